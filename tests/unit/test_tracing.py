"""Tracing (gateway/observe/tracing.py): the caller's W3C trace context continued on HTTP and gRPC listeners,
one server span per request with its attributes, the Triton call as a client child span whose
``traceparent`` reaches Triton, errors with their kind, the trace id in the access line; off, nothing.

A real Worker runs in-process; a scripted gRPC server stands in for Triton and records the metadata
of every call it gets (what Triton's own tracing would continue). Spans are read from the SDK's
in-memory exporter.
"""

from __future__ import annotations

import asyncio
import io
import json

import aiohttp
import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tritonclient.grpc import service_pb2

from gateway.observe import logs, tracing
from gateway.settings import TracingSettings
from tests.fakes import fake_triton
from tests.support import free_port, running_worker

SVC = "/inference.GRPCInferenceService/"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT}-01"


class FakeTriton(grpc.GenericRpcHandler):
    """Records (method, metadata) of each call; model "nope" is listed but its metadata is NOT_FOUND;
    ModelInfer echoes."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.metadata_read = asyncio.Event()  # a ServerMetadata call came (the worker makes one at start)

    def service(self, details):
        name = details.method.rsplit("/", 1)[1]
        return grpc.unary_unary_rpc_method_handler(self._answer(name))

    def _answer(self, name):
        async def answer(request: bytes, context):
            self.calls.append((name, dict(context.invocation_metadata())))
            if name == "ServerMetadata":
                self.metadata_read.set()
            if name == "ServerReady":
                return service_pb2.ServerReadyResponse(ready=True).SerializeToString()
            if name == "RepositoryIndex":  # the model is listed, but its metadata is NOT_FOUND
                index = service_pb2.RepositoryIndexResponse()
                index.models.add(name="nope", version="1", state="READY")
                return index.SerializeToString()
            if name in ("ModelMetadata", "ModelConfig") or request == b"fail":
                await context.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'nope' is not found")
            return b"echo:" + request

        return answer


@pytest.fixture
async def traced(request, monkeypatch):
    """A worker with tracing on (``request.param``: more settings), its spans and its fake Triton."""
    exporter = InMemorySpanExporter()
    monkeypatch.setattr(tracing, "_otlp_exporter", lambda _cfg: exporter)
    fake = FakeTriton()
    ports = {"v2_grpc": free_port(), "tfserving_rest": free_port()}
    extra = {"TRACING__ENABLED": "true", **getattr(request, "param", {})}

    def spans():
        tracing.flush()
        return exporter.get_finished_spans()

    async with fake_triton(fake) as (_, target), running_worker(ports, target, **extra), \
            grpc.aio.insecure_channel(f"127.0.0.1:{ports['v2_grpc']}") as channel:
        # the worker's own start-up read of Triton's version (gateway/app.py, _warn_on_triton_version)
        # runs beside the tests' calls: it is waited for and forgotten, so that ``fake.calls`` holds
        # what the tests sent (it came after a ModelInfer and was taken for it in one full run)
        await asyncio.wait_for(fake.metadata_read.wait(), 10)
        fake.calls.clear()
        yield fake, channel, ports, spans


def _hex(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def _traceparent(md: dict) -> tuple[str, str, str]:
    version, trace_id, parent, flags = md["traceparent"].split("-")
    assert version == "00"
    return trace_id, parent, flags


async def test_a_grpc_callers_trace_continues_through_the_gateway_into_triton(traced):
    fake, channel, _, spans = traced
    infer = service_pb2.ModelInferRequest(model_name="half_plus_two").SerializeToString()
    out = await channel.unary_unary(SVC + "ModelInfer")(
        infer, metadata=(("traceparent", TRACEPARENT), ("x-request-id", "rid-1")), timeout=5)
    assert out == b"echo:" + infer
    server, client = sorted(spans(), key=lambda s: s.kind != SpanKind.SERVER)
    assert server.kind == SpanKind.SERVER and client.kind == SpanKind.CLIENT
    assert _hex(server.context.trace_id, 32) == TRACE_ID == _hex(client.context.trace_id, 32)
    assert _hex(server.parent.span_id, 16) == PARENT and server.parent.is_remote
    assert client.parent.span_id == server.context.span_id
    assert server.name == "inference.GRPCInferenceService/ModelInfer"
    assert {k: server.attributes[k] for k in ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code",
                                               "gateway.dialect", "gateway.listener", "gateway.model",
                                               "gateway.request_id")} == {
        "rpc.system": "grpc", "rpc.service": "inference.GRPCInferenceService", "rpc.method": "ModelInfer",
        "rpc.grpc.status_code": 0, "gateway.dialect": "v2", "gateway.listener": "v2_grpc",
        "gateway.model": "half_plus_two", "gateway.request_id": "rid-1"}
    assert client.name == "inference.GRPCInferenceService/ModelInfer"
    # Triton got the gateway's client span as parent (the caller's own traceparent was replaced)
    name, md = fake.calls[-1]
    assert name == "ModelInfer"
    trace_id, parent, flags = _traceparent(md)
    assert (trace_id, parent, int(flags, 16) & 1) == (TRACE_ID, _hex(client.context.span_id, 16), 1)


async def test_an_http_request_without_context_starts_a_trace_and_errors_carry_their_kind(traced):
    fake, _, ports, spans = traced
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{ports['tfserving_rest']}/v1/models/nope:predict",
                             data=b'{"instances": [1.0]}') as r:
            assert r.status == 404
    found = spans()
    server = next(s for s in found if s.kind == SpanKind.SERVER)
    clients = [s for s in found if s.kind == SpanKind.CLIENT]
    assert server.parent is None  # a new trace
    assert server.name == "POST /<path:path>"
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.response.status_code"] == 404
    assert server.attributes["url.path"] == "/v1/models/nope:predict"
    assert server.attributes["error.type"] == "not_found"
    assert server.attributes["gateway.dialect"] == "tfserving"
    assert server.status.status_code == StatusCode.UNSET  # a client's mistake is not the server's fault
    assert clients and all(c.parent.span_id == server.context.span_id for c in clients)
    failed = next(c for c in clients if c.attributes.get("error.type") == "NOT_FOUND")
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["rpc.grpc.status_code"] == 5
    for name, md in fake.calls:
        if name == "ModelMetadata":
            assert _traceparent(md)[0] == _hex(server.context.trace_id, 32)


async def test_an_upstream_failure_is_recorded_on_both_spans(traced):
    _, channel, _, spans = traced
    with pytest.raises(grpc.aio.AioRpcError):
        await channel.unary_unary(SVC + "ModelInfer")(b"fail", metadata=(("traceparent", TRACEPARENT),), timeout=5)
    server, client = sorted(spans(), key=lambda s: s.kind != SpanKind.SERVER)
    assert server.attributes["error.type"] == "not_found" and server.attributes["rpc.grpc.status_code"] == 5
    assert client.attributes["error.type"] == "NOT_FOUND"


@pytest.mark.parametrize("traced", [{"TRACING__SAMPLE_RATIO": "0"}], indirect=True)
async def test_unsampled_requests_record_nothing_but_pass_the_context_on(traced):
    fake, channel, _, spans = traced
    await channel.unary_unary(SVC + "ServerMetadata")(b"", timeout=5)  # a new trace, ratio 0: not sampled
    assert spans() == ()
    _, md = fake.calls[-1]
    assert int(_traceparent(md)[2], 16) & 1 == 0  # the sampled flag is off
    # a caller's sampled context is kept whatever the ratio (ParentBased)
    await channel.unary_unary(SVC + "ServerMetadata")(b"", metadata=(("traceparent", TRACEPARENT),), timeout=5)
    assert {_hex(s.context.trace_id, 32) for s in spans()} == {TRACE_ID}


async def test_the_access_line_carries_the_trace_id(traced, restore_logging):
    _, channel, _, _ = traced
    out = io.StringIO()
    logs.setup("INFO", "json", stream=out)
    await channel.unary_unary(SVC + "ServerMetadata")(b"", metadata=(("traceparent", TRACEPARENT),), timeout=5)
    logs.flush()
    line = [json.loads(x) for x in out.getvalue().splitlines() if '"gateway.access"' in x][-1]
    assert line["trace_id"] == TRACE_ID


def test_off_by_default_the_hooks_do_nothing():
    assert TracingSettings().enabled is False
    tracing.configure(TracingSettings())
    assert tracing.listener("v2", "v2_grpc") is None and tracing.interceptors() == ()
    md = (("traceparent", TRACEPARENT),)
    with tracing.upstream("ModelInfer", "m", md) as sent:
        assert sent is md  # a caller's context passes through untouched (Triton may continue it)
    with tracing.upstream("ModelInfer", "m") as sent:
        assert sent is None
