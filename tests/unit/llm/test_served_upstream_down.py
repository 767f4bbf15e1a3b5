"""The served-model catalog against its upstream. Found by ``make soak``: while Triton was down,
every OpenAI request answered 422 "Model tiny_llm not found." (a client's mistake) instead of the
503 every other route gives. Found by ``make bench``: a route without a model name looked up every
model's metadata on every request, and when they expired one request waited for all of them, one
after the other."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import ModelIndexEntry, ModelMetadata
from gateway.dialects.mindie import errors, openai
from gateway.llm import served as served_mod
from gateway.llm.served import ServedModels, ServedModelsSettings
from tests.fakes import FakeUpstream, trtllm_meta


class DownUpstream(FakeUpstream):
    async def model_metadata(self, model, version=""):
        raise GatewayError(ErrorKind.UNAVAILABLE, "failed to connect to all addresses")


class LoadingUpstream(FakeUpstream):
    async def model_metadata(self, model, version=""):
        raise GatewayError(ErrorKind.NOT_FOUND, f"Request for unknown model: '{model}' is not found")


# Triton down: its UNAVAILABLE as it is. Found by make soak again: Triton restarted, listening but
# still loading tiny_llm (not ready until it is): its NOT_FOUND for the model was the client's 422.
@pytest.mark.parametrize("upstream,kind", [(DownUpstream, ErrorKind.UNAVAILABLE),
                                           (LoadingUpstream, ErrorKind.NOT_READY)], ids=["down", "loading"])
async def test_a_triton_not_ready_is_unavailable_not_an_unknown_model(upstream, kind):
    catalog = ServedModels(upstream(metas=[trtllm_meta("tiny_llm")], ready=False), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("tiny_llm")
    assert err.value.kind is kind
    body = {"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(GatewayError) as err:
        await openai.plan_chat(body, catalog, "1")
    assert errors.envelope(err.value)[0] == 503


async def test_an_unknown_model_on_a_ready_triton_is_still_not_found():
    catalog = ServedModels(FakeUpstream(metas=[trtllm_meta("tiny_llm")]), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("gpt-9")
    assert err.value.kind is ErrorKind.NOT_FOUND
    catalog = ServedModels(LoadingUpstream(metas=[], ready=True), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:  # Triton ready and saying it does not know the model
        await catalog.resolve("gpt-9")
    assert err.value.kind is ErrorKind.NOT_FOUND


async def test_an_unreachable_triton_is_unavailable_even_when_it_looks_ready():
    """Found by make soak (2-3 OpenAI requests in 14 k, at each Triton restart): the metadata call
    was refused while Triton started, Triton was ready a moment later when readiness was asked, and
    the request was answered the client's 422 "Model tiny_llm not found.". Triton said nothing of
    an unknown model: 503, whatever readiness says afterwards."""
    catalog = ServedModels(DownUpstream(metas=[trtllm_meta("tiny_llm")], ready=True), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("tiny_llm")
    assert err.value.kind is ErrorKind.UNAVAILABLE
    body = {"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(GatewayError) as err:
        await openai.plan_chat(body, catalog, "1")
    assert errors.envelope(err.value)[0] == 503


class SlowUpstream(FakeUpstream):
    async def model_metadata(self, model, version=""):
        raise GatewayError(ErrorKind.DEADLINE_EXCEEDED, "Deadline Exceeded")


async def test_a_metadata_timeout_is_a_timeout_not_an_unknown_model():
    """A ready Triton too slow to give a model's metadata: 504 as every route answers a deadline,
    not the client's 422."""
    catalog = ServedModels(SlowUpstream(metas=[trtllm_meta("tiny_llm")], ready=True), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("tiny_llm")
    assert err.value.kind is ErrorKind.DEADLINE_EXCEEDED


class CachedIndexUpstream(FakeUpstream):
    """An upstream that hands out one index object while it is cached (as TritonUpstream does) and
    counts metadata lookups; the metadata calls of one listing overlap (they are awaited together)."""

    def __init__(self, metas):
        super().__init__(metas=metas)
        self.index_object = [ModelIndexEntry(m.name, "1", "READY") for m in metas]
        self.lookups, self.running, self.most_at_once = 0, 0, 0

    async def repository_index(self):
        return self.index_object

    async def model_metadata(self, model, version=""):
        self.lookups += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1
        return await super().model_metadata(model, version)


async def test_the_served_list_is_worked_out_once_per_index_and_its_lookups_overlap():
    metas = [trtllm_meta("b_llm"), trtllm_meta("a_llm"), ModelMetadata("not_llm", ("1",), "python", (), ())]
    up = CachedIndexUpstream(metas)
    catalog = ServedModels(up, ServedModelsSettings())
    assert await catalog.served() == ["a_llm", "b_llm"]  # the first list is waited for
    assert (up.lookups, up.most_at_once) == (3, 3)
    assert await catalog.default_name() == "a_llm" and up.lookups == 3  # the same index: no lookup
    # the upstream's cache expired: a new index, b_llm gone. The request is answered from the last
    # list at once while the new one is worked out in the background; the next ones get the new list
    up.index_object = [e for e in up.index_object if e.name != "b_llm"]
    assert await catalog.served() == ["a_llm", "b_llm"] and up.lookups <= 5
    await asyncio.sleep(0.05)
    assert await catalog.served() == ["a_llm"] and up.lookups == 5
    assert await catalog.served() == ["a_llm"] and up.lookups == 5  # one relist per index


async def test_an_index_like_the_last_keeps_the_list_without_a_lookup():
    up = CachedIndexUpstream([trtllm_meta("a_llm")])
    catalog = ServedModels(up, ServedModelsSettings())
    assert await catalog.served() == ["a_llm"] and up.lookups == 1
    up.index_object = list(up.index_object)  # fetched again (the upstream's cache expired), the same rows
    assert await catalog.served() == ["a_llm"]
    await asyncio.sleep(0.01)
    assert await catalog.served() == ["a_llm"] and up.lookups == 1
    catalog._listed_at -= served_mod.RELIST_AT_LEAST_S  # the list is old: worked out again all the same
    up.index_object = list(up.index_object)
    assert await catalog.served() == ["a_llm"]
    await asyncio.sleep(0.01)
    assert up.lookups == 2


async def test_a_relist_that_fails_keeps_the_last_list_and_is_logged(caplog):
    up = CachedIndexUpstream([trtllm_meta("a_llm")])
    catalog = ServedModels(up, ServedModelsSettings())
    assert await catalog.served() == ["a_llm"]

    async def broken(model, version=""):
        raise RuntimeError("a bug")

    up.model_metadata = broken
    up.index_object = [*up.index_object, ModelIndexEntry("b_llm", "1", "READY")]  # a new model: worked out again
    assert await catalog.served() == ["a_llm"]
    await asyncio.sleep(0.01)
    for _ in range(3):
        assert await catalog.served() == ["a_llm"]
    await asyncio.sleep(0.01)
    assert caplog.text.count("could not be worked out again") == 1  # once for this index, not per request
