"""Found by ``make soak``: while Triton was down, every OpenAI request answered 422 "Model tiny_llm
not found." (a client's mistake) instead of the 503 every other route gives."""

from __future__ import annotations

import pytest

from gateway.core.errors import ErrorKind, GatewayError
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
