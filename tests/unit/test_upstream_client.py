"""TritonUpstream against a scripted in-process KServe server: streams, finals, errors, retries, on
both transports (the HTTP/2 client, the default, and ``upstream.transport: grpc``)."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2

from gateway import call as calls
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import InferRequest, Tensor
from gateway.h2 import client as h2call
from gateway.settings import upstream_addresses
from gateway.upstream import TritonUpstream
from tests.fakes import fake_triton

SVC = "inference.GRPCInferenceService"


def _text_response(req, text: str | None, final: bool):
    r = service_pb2.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
    if text is not None:
        r.outputs.add(name="text_output", datatype="BYTES", shape=[1, 1])
        r.raw_output_contents.append(len(text).to_bytes(4, "little") + text.encode())
    r.parameters["triton_final_response"].bool_param = final
    return service_pb2.ModelStreamInferResponse(infer_response=r)


class Scripted(grpc.GenericRpcHandler):
    def __init__(self):
        self.calls: dict[str, int] = {}
        self.cancelled = asyncio.Event()
        self.unavailable_left = 0
        self.last_stream_request = None
        self.down = False  # every read-only call UNAVAILABLE, as a Triton that just died

    def service(self, details):
        name = details.method.rsplit("/", 1)[1]
        self.calls[name] = self.calls.get(name, 0) + 1
        if name == "ModelStreamInfer":
            return grpc.stream_stream_rpc_method_handler(
                self.stream, service_pb2.ModelInferRequest.FromString,
                service_pb2.ModelStreamInferResponse.SerializeToString)
        types = {"ModelInfer": (service_pb2.ModelInferRequest, self.infer),
                 "ModelMetadata": (service_pb2.ModelMetadataRequest, self.metadata),
                 "ModelConfig": (service_pb2.ModelConfigRequest, self.config),
                 "ServerReady": (service_pb2.ServerReadyRequest, self.ready)}
        req_type, fn = types[name]
        return grpc.unary_unary_rpc_method_handler(fn, req_type.FromString, lambda m: m.SerializeToString())

    async def infer(self, req, context):
        self.last_infer = (req, context.time_remaining())
        if req.model_name == "flaky":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        if req.model_name == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'missing' is not found")
        r = service_pb2.ModelInferResponse(model_name=req.model_name, model_version="3")
        r.outputs.add(name="y", datatype="FP32", shape=list(req.inputs[0].shape))
        x = np.frombuffer(req.raw_input_contents[0], np.float32)
        r.raw_output_contents.append((x * 2).astype(np.float32).tobytes())
        return r

    async def metadata(self, req, context):
        if req.name == "slow_meta":
            await asyncio.sleep(3)
        if self.unavailable_left or self.down:
            self.unavailable_left = max(0, self.unavailable_left - 1)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "connection refused")
        m = service_pb2.ModelMetadataResponse(name=req.name, versions=["1"], platform="python")
        m.inputs.add(name="text_input", datatype="BYTES", shape=[-1, 1])
        m.outputs.add(name="text_output", datatype="BYTES", shape=[-1, -1])
        return m

    async def config(self, req, context):
        cfg = model_config_pb2.ModelConfig(name=req.name, max_batch_size=8)
        cfg.model_transaction_policy.decoupled = True
        cfg.input.add(name="text_input", optional=False)
        return service_pb2.ModelConfigResponse(config=cfg)

    async def ready(self, req, context):
        if self.down:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        return service_pb2.ServerReadyResponse(ready=True)

    async def stream(self, request_iterator, context):
        async for req in request_iterator:
            self.last_stream_request = req
            prompt = req.id
            if req.model_name == "broken":
                yield service_pb2.ModelStreamInferResponse(error_message="expected 2 inputs but got 1 inputs")
                continue
            if req.model_name == "slow":
                try:
                    for i in range(1000):
                        yield _text_response(req, f"t{i}", False)
                        await asyncio.sleep(0.02)
                except asyncio.CancelledError:
                    self.cancelled.set()
                    raise
            for i in range(3):
                yield _text_response(req, f" w{i}", False)
            yield _text_response(req, None, True)  # the empty final response
            del prompt


def _upstream(target: str, transport: str) -> TritonUpstream:
    h2 = h2call.Channel(upstream_addresses(target)) if transport == "h2" else None
    return TritonUpstream(target, cache_ttl=60, h2=h2)


@pytest.fixture(params=["h2", "grpc"])
async def upstream(request):
    scripted = Scripted()
    async with fake_triton(scripted) as (_, target):
        up = _upstream(target, request.param)
        await up.connect()
        yield up, scripted
        await up.close()


def _prompt(model: str = "llm") -> InferRequest:
    return InferRequest(model, [Tensor("text_input", np.array([[b"hi"]], dtype=object), "BYTES")])


async def test_stream_yields_tokens_then_an_explicit_final(upstream):
    up, scripted = upstream
    got = [r async for r in up.stream(_prompt())]
    texts = [r.output("text_output").data.reshape(-1)[0] for r in got if r.outputs]
    assert texts == [b" w0", b" w1", b" w2"]
    assert [r.final for r in got] == [False, False, False, True]
    assert got[-1].outputs == []
    req = scripted.last_stream_request
    assert req.parameters["triton_enable_empty_final_response"].bool_param is True
    assert req.id  # a request id is always set, to correlate stream responses


async def test_in_stream_errors_become_gateway_errors(upstream):
    up, _ = upstream
    with pytest.raises(GatewayError) as err:
        [r async for r in up.stream(_prompt("broken"))]
    assert err.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "expected 2 inputs" in err.value.message


async def test_closing_the_stream_early_cancels_the_upstream_call(upstream):
    up, scripted = upstream
    gen = up.stream(_prompt("slow"))
    first = await gen.__anext__()
    assert first.output("text_output").data.reshape(-1)[0] == b"t0"
    await gen.aclose()
    await asyncio.wait_for(scripted.cancelled.wait(), 5)


async def test_stream_deadline_is_a_deadline_error(upstream):
    up, _ = upstream
    token = calls.enter(calls.Call("r", "generate", timeout=60.0, stream_timeout=0.2))
    try:
        with pytest.raises(GatewayError) as err:
            [r async for r in up.stream(_prompt("slow"))]
    finally:
        calls.leave(token)
    assert err.value.kind is ErrorKind.DEADLINE_EXCEEDED


async def test_unary_infer_and_grpc_status_translation(upstream):
    up, _ = upstream
    req = InferRequest("double", [Tensor("x", np.array([1, 2], np.float32))])
    resp = await up.infer(req)
    np.testing.assert_array_equal(resp.output("y").data, [2, 4])
    assert resp.version == "3"
    with pytest.raises(GatewayError) as err:
        await up.infer(InferRequest("missing", req.inputs))
    assert err.value.kind is ErrorKind.NOT_FOUND
    assert err.value.message == "Request for unknown model: 'missing' is not found"


async def test_metadata_retries_unavailable_then_caches(upstream):
    up, scripted = upstream
    scripted.unavailable_left = 2
    meta = await up.model_metadata("llm")
    assert meta.decoupled and meta.max_batch_size == 8
    assert meta.input("text_input").shape == (-1, 1)
    assert scripted.calls["ModelMetadata"] == 3
    await up.model_metadata("llm")
    assert scripted.calls["ModelMetadata"] == 3  # served from the cache


async def test_inference_is_never_retried(upstream):
    up, scripted = upstream
    with pytest.raises(GatewayError) as err:
        await up.infer(InferRequest("flaky", [Tensor("x", np.array([1], np.float32))]))
    assert err.value.kind is ErrorKind.UNAVAILABLE
    assert scripted.calls["ModelInfer"] == 1


async def test_unreachable_triton_is_unavailable_and_not_ready(upstream):
    up, _ = upstream
    await up.close()
    up = _upstream("127.0.0.1:1", "h2" if up._h2 is not None else "grpc")  # nothing listens there
    await up.connect()
    token = calls.enter(calls.Call("r", "predict", timeout=2.0, stream_timeout=2.0))
    try:
        with pytest.raises(GatewayError) as err:
            await up.infer(InferRequest("double", [Tensor("x", np.array([1], np.float32))]))
    finally:
        calls.leave(token)
    assert err.value.kind in (ErrorKind.UNAVAILABLE, ErrorKind.DEADLINE_EXCEEDED)
    assert await up.server_ready() is False
    await up.close()


async def test_a_triton_that_stops_answering_is_not_ready_at_once(upstream):
    """Readiness is cached (here for 60 s), but a read-only call that found Triton unreachable
    forgets it: found by make soak, where a Triton killed a moment after a readiness check made an
    OpenAI request's failed metadata look like an unknown model (422) instead of 503."""
    up, scripted = upstream
    assert await up.server_ready() is True
    scripted.down = True
    assert await up.server_ready() is True  # cached: nothing said otherwise yet
    with pytest.raises(GatewayError) as err:
        await up.model_metadata("tiny_llm")
    assert err.value.kind is ErrorKind.UNAVAILABLE
    assert await up.server_ready() is False  # asked again
    scripted.down = False
    assert await up.server_ready() is True  # "not ready" is never kept: Triton back is seen at once


async def test_concurrent_cache_misses_share_one_fetch(upstream):
    up, scripted = upstream
    metas = await asyncio.gather(*(up.model_metadata("shared") for _ in range(20)))
    assert all(m is metas[0] for m in metas)
    assert scripted.calls["ModelMetadata"] == 1 and scripted.calls["ModelConfig"] == 1


async def test_an_entry_near_its_end_is_fetched_again_behind_the_request_that_reads_it(upstream):
    up, scripted = upstream
    first = await up.model_metadata("ageing")
    (key,) = [k for k in up._cache._data if "ageing" in k]
    stamp, value = up._cache._data[key]
    up._cache._data[key] = (stamp - 0.8 * up._cache.ttl, value)  # in the last quarter of its life
    assert await up.model_metadata("ageing") is first  # answered at once from the cache
    assert scripted.calls["ModelMetadata"] == 1
    await asyncio.gather(*up._pending.values())  # the fetch behind it
    await asyncio.sleep(0)
    again = await up.model_metadata("ageing")
    assert again is not first and again.name == "ageing"  # the new value, without waiting for it
    assert scripted.calls["ModelMetadata"] == 2 and scripted.calls["ModelConfig"] == 2


async def test_a_failed_fetch_is_not_cached(upstream):
    up, scripted = upstream
    scripted.unavailable_left = 10  # more than the retries
    with pytest.raises(GatewayError) as err:
        await up.model_metadata("flaky-meta")
    assert err.value.kind is ErrorKind.UNAVAILABLE
    scripted.unavailable_left = 0
    assert (await up.model_metadata("flaky-meta")).name == "flaky-meta"


def _infer_request() -> InferRequest:
    return InferRequest("m", [Tensor("x", np.array([1.0], np.float32), "FP32")])


async def test_request_id_and_deadline_come_from_the_edge_call(upstream):
    up, scripted = upstream
    call = calls.Call("client-rid-7", "predict", timeout=2.0, stream_timeout=30.0)
    token = calls.enter(call)
    try:
        await up.infer(_infer_request())
        call.shorten(0.5)  # the client asked for less (e.g. MindIE's `timeout`): the shorter deadline wins
        await up.infer(_infer_request())
        short = scripted.last_infer[1]
        [r async for r in up.stream(_prompt())]
    finally:
        calls.leave(token)
    assert scripted.last_infer[0].id == "client-rid-7"
    assert 0 < short <= 0.6
    assert scripted.last_stream_request.id == "client-rid-7"


async def test_outside_a_request_the_default_deadline_applies(upstream):
    up, scripted = upstream
    await up.infer(_infer_request())
    req, remaining = scripted.last_infer
    assert req.id == "" and 50 < remaining <= 60.5  # TritonUpstream's default_timeout is 60 s


async def test_the_listener_deadline_applies_when_it_is_shorter(upstream):
    up, scripted = upstream
    token = calls.enter(calls.Call("r", "predict", timeout=1.5, stream_timeout=30.0, client_timeout=None))
    try:
        await up.infer(_infer_request())
    finally:
        calls.leave(token)
    assert 0 < scripted.last_infer[1] <= 1.6


async def test_a_metadata_wait_ends_at_the_requests_deadline_without_failing_the_shared_fetch(upstream):
    up, _ = upstream
    token = calls.enter(calls.Call("r", "predict", timeout=0.3, stream_timeout=0.3))
    try:
        with pytest.raises(GatewayError) as err:
            await up.model_metadata("slow_meta")
    finally:
        calls.leave(token)
    assert err.value.kind is ErrorKind.DEADLINE_EXCEEDED
    meta = await up.model_metadata("slow_meta")  # the fetch went on for the callers without a deadline
    assert meta.name == "slow_meta"


async def test_grpc_aio_channel_only_under_the_grpc_transport(upstream):
    """On the HTTP/2 client nothing rides on grpc.aio: no channel is made for it; every call fails
    the same before connect() and after close()."""
    up, _ = upstream
    assert (up._channel is None) == (up._h2 is not None)
    assert await up.server_ready()
    await up.close()
    for call in (up.infer_bytes("m", b""), up.model_metadata("m")):
        with pytest.raises(GatewayError, match="before connect"):
            await call
