"""The served-model catalog against its upstream. Found by ``make soak``: while Triton was down,
every OpenAI request answered 422 "Model tiny_llm not found." (a client's mistake) instead of the
503 every other route gives. Found by ``make bench``: a route without a model name looked up every
model's metadata, one after the other, on every request."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import ModelIndexEntry, ModelMetadata
from gateway.dialects.mindie import errors, openai
from gateway.llm.served import ServedModels, ServedModelsSettings
from tests.fakes import FakeUpstream, trtllm_meta


class DownUpstream(FakeUpstream):
    async def model_metadata(self, model, version=""):
        raise GatewayError(ErrorKind.UNAVAILABLE, "failed to connect to all addresses")


async def test_triton_down_is_unavailable_not_an_unknown_model():
    catalog = ServedModels(DownUpstream(metas=[trtllm_meta("tiny_llm")], ready=False), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("tiny_llm")
    assert err.value.kind is ErrorKind.UNAVAILABLE
    body = {"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(GatewayError) as err:
        await openai.plan_chat(body, catalog, "1")
    assert errors.envelope(err.value)[0] == 503


async def test_an_unknown_model_on_a_ready_triton_is_still_not_found():
    catalog = ServedModels(FakeUpstream(metas=[trtllm_meta("tiny_llm")]), ServedModelsSettings())
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("gpt-9")
    assert err.value.kind is ErrorKind.NOT_FOUND
    catalog = ServedModels(DownUpstream(metas=[], ready=True), ServedModelsSettings())  # Triton up, model not loaded
    with pytest.raises(GatewayError) as err:
        await catalog.resolve("gpt-9")
    assert err.value.kind is ErrorKind.NOT_FOUND


class CachedIndexUpstream(FakeUpstream):
    """An upstream that hands out one index object while it is cached (as TritonUpstream does) and
    counts metadata lookups; the metadata calls of one listing overlap (they are awaited together)."""

    def __init__(self, metas):
        super().__init__(metas=metas)
        self.cached_index = [ModelIndexEntry(m.name, "1", "READY") for m in metas]
        self.lookups, self.running, self.most_at_once = 0, 0, 0

    async def repository_index(self):
        return self.cached_index

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
    assert await catalog.served() == ["a_llm", "b_llm"]
    assert (up.lookups, up.most_at_once) == (3, 3)
    assert await catalog.default_name() == "a_llm" and up.lookups == 3  # the same index: no lookup
    up.cached_index = list(up.cached_index[:2])  # the upstream's cache expired: a new index, not_llm gone
    assert await catalog.served() == ["a_llm", "b_llm"] and up.lookups == 5
