"""The stream runner: errors before the first byte raise; after it they go in-band and the stream ends."""

from __future__ import annotations

import pytest

from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialects.mindie import openai, streaming, vllm
from gateway.dialects.mindie.common import Plan
from gateway.llm.served import ServedModels, ServedModelsSettings
from gateway.llm.service import GenerationService
from gateway.llm.types import GenerateRequest
from tests.fakes import FakeUpstream, text_response


class FakeResponse:
    def __init__(self):
        self.chunks, self.ended = [], False

    async def send(self, data: bytes):
        self.chunks.append(data)

    async def eof(self):
        self.ended = True


class FakeRequest:
    def __init__(self):
        self.resp = None

    async def respond(self, **_kw):
        self.resp = FakeResponse()
        return self.resp


async def _run(script, encoder):
    up = FakeUpstream(script)
    model = await ServedModels(up, ServedModelsSettings()).resolve("llm")
    plan = Plan(GenerateRequest("llm", "p", 10, stream=True, request_id="1"), model, encoder)
    request = FakeRequest()
    await streaming.stream(GenerationService(up), plan, request)
    return request.resp, up


async def test_error_after_first_byte_is_an_sse_event_for_openai():
    resp, up = await _run([text_response("a"), GatewayError(ErrorKind.UPSTREAM_FAILED, "boom")],
                          openai.ChatEncoder("1", "llm"))
    assert resp.chunks[-1] == b'data: {"error":"boom","error_type":"Generation Error"}\n\n'
    assert resp.ended and up.closed == 1


async def test_error_after_first_byte_is_nul_terminated_for_vllm():
    resp, _ = await _run([text_response("a"), GatewayError(ErrorKind.DEADLINE_EXCEEDED, "late")],
                         vllm.VllmEncoder("p"))
    assert resp.chunks[-1].endswith(b'"error_type":"Incomplete Generation"}\x00') and resp.ended


async def test_error_before_first_byte_raises_so_the_edge_sets_the_status():
    with pytest.raises(GatewayError):
        await _run([GatewayError(ErrorKind.INVALID_ARGUMENT, "bad")], vllm.VllmEncoder("p"))


async def test_an_in_band_error_marks_the_request_failed_for_metrics_and_the_access_line():
    from gateway import call as calls

    call = calls.Call("r-1", "chat", 10.0, 10.0)
    token = calls.enter(call)
    try:
        await _run([text_response("a"), GatewayError(ErrorKind.UPSTREAM_FAILED, "boom")], openai.ChatEncoder("1", "llm"))
    finally:
        calls.leave(token)
    assert call.failed == "upstream_failed"
