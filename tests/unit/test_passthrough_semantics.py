"""Passthrough semantics that Triton cannot show us: metadata, deadlines, cancellation, status.

A scripted in-process upstream (a grpc.aio server speaking raw bytes) stands in for Triton, and the
real Worker runs only the v2_grpc listener in front of it.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from tritonclient.grpc import service_pb2

from gateway.dialects.v2.passthrough import _scan, forward_metadata, model_name
from gateway.observe import metrics
from tests.fakes import fake_triton
from tests.support import free_port, running_worker

SVC = "/inference.GRPCInferenceService/"


class FakeTriton(grpc.GenericRpcHandler):
    def __init__(self):
        self.seen: dict[str, object] = {}
        self.cancelled = asyncio.Event()
        self.stream_cancelled = asyncio.Event()
        self.methods: list[str] = []

    def service(self, details):
        name = details.method.rsplit("/", 1)[1]
        self.methods.append(name)
        if name == "ModelStreamInfer":
            return grpc.stream_stream_rpc_method_handler(self._stream)
        return grpc.unary_unary_rpc_method_handler(getattr(self, "_" + name, self._echo))

    async def _echo(self, request: bytes, context):
        self.seen["metadata"] = dict(context.invocation_metadata())
        self.seen["time_remaining"] = context.time_remaining()
        return b"echo:" + request

    async def _ServerMetadata(self, request: bytes, context):
        if not request:  # the worker's own start-up version read (upstream.cancel's warning): not what a test sent
            return b""
        return await self._echo(request, context)

    async def _ModelInfer(self, request: bytes, context):
        if request == b"slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if request == b"fail":
            await context.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'x' is not found",
                                (("why", "test"),))
        return await self._echo(request, context)

    async def _stream(self, request_iterator, context):
        self.seen["stream_metadata"] = dict(context.invocation_metadata())
        self.seen["stream_time_remaining"] = context.time_remaining()
        try:
            async for item in request_iterator:
                if item == b"pair":  # answered only once the next message has come
                    nxt = await anext(aiter(request_iterator))
                    yield b"pair+" + nxt
                elif item == b"hold":  # one answer, then work that runs on after a half-close (a generation)
                    yield b"hold#0"
                    await asyncio.sleep(30)
                elif item == b"boom":  # Triton's status ends the stream midway
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "in-stream failure",
                                        (("why", "boom"),))
                else:
                    for i in range(3):
                        yield item + b"#%d" % i
            self.seen["half_closed"] = True
        except asyncio.CancelledError:
            self.stream_cancelled.set()
            raise


@pytest.fixture
async def proxy(request):
    fake = FakeTriton()
    port = free_port()
    extra = {"LIMITS__MAX_REQUEST_BYTES": str(200 << 20), **getattr(request, "param", {})}
    unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    async with fake_triton(fake, options=unlimited[1:]) as (_, target), \
            running_worker({"v2_grpc": port}, target, grace=5.0, **extra) as (_, ctx), \
            grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=unlimited) as channel:
        # the connection to Triton opened (a first call finds none and takes the task path on the h2 client)
        await ctx.upstream.relay(SVC + "ServerMetadata")(b"", 5, None)
        yield fake, channel, ctx


# the relay on both transports: gateway/h2/client.py (upstream.transport h2, the default) and grpc.aio
BOTH = pytest.mark.parametrize("proxy", [{}, {"UPSTREAM__TRANSPORT": "grpc"}], indirect=True, ids=["h2", "grpc"])


@BOTH
async def test_bytes_metadata_and_deadline_are_forwarded(proxy):
    fake, channel, ctx = proxy
    call = channel.unary_unary(SVC + "ServerMetadata")
    out = await call(b"\x01\x02", metadata=(("x-tenant", "a"), ("trace-bin", b"\x00\xff")), timeout=5)
    assert out == b"echo:\x01\x02"
    md = fake.seen["metadata"]
    assert md["x-tenant"] == "a" and md["trace-bin"] == b"\x00\xff"
    # the transport the settings chose carried it (each sends its own user-agent)
    h2 = ctx.settings.upstream.transport == "h2"
    assert md["user-agent"].startswith("gateway-h2") == h2 and md["user-agent"].startswith("grpc-python") != h2
    # without propagation the upstream would see no deadline (None); grpc rounds the header up a little
    assert fake.seen["time_remaining"] is not None and 3 < fake.seen["time_remaining"] <= 5.1


@BOTH
async def test_a_relayed_unary_call_takes_no_task_on_the_h2_client(proxy, monkeypatch):
    """On the h2 client a unary call begins from the request's frames and is answered from the
    callback that reads Triton's answer (Edge.unary_now), so the semantics here hold on that path;
    under upstream.transport grpc (and for the streams) the handler's task runs."""
    from gateway.h2 import rpc as h2rpc

    _, channel, ctx = proxy
    served, serve = [], h2rpc.serve

    async def counted(rpc):
        served.append(rpc.method)
        await serve(rpc)

    monkeypatch.setattr(h2rpc, "serve", counted)
    assert await channel.unary_unary(SVC + "ModelInfer")(b"x", timeout=5) == b"echo:x"
    assert served == ([] if ctx.settings.upstream.transport == "h2" else [SVC + "ModelInfer"])
    assert [m async for m in channel.stream_stream(SVC + "ModelStreamInfer")(_one(b"s"), timeout=5)] == [
        b"s#0", b"s#1", b"s#2"]
    assert served[-1] == SVC + "ModelStreamInfer"


@BOTH
async def test_status_details_and_trailing_metadata_are_preserved(proxy):
    _, channel, _ = proxy
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await channel.unary_unary(SVC + "ModelInfer")(b"fail", timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "Request for unknown model: 'x' is not found"
    assert ("why", "test") in tuple(err.value.trailing_metadata())


@BOTH
async def test_client_deadline_reaches_upstream_and_cancels_it(proxy):
    fake, channel, _ = proxy
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await channel.unary_unary(SVC + "ModelInfer")(b"slow", timeout=0.3)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(fake.cancelled.wait(), 5)


@pytest.mark.parametrize("proxy", [{"UPSTREAM__CANCEL": "all"}], indirect=True)
async def test_client_cancellation_reaches_upstream_under_cancel_all(proxy):
    fake, channel, _ = proxy
    call = channel.unary_unary(SVC + "ModelInfer")(b"slow", timeout=20)
    await asyncio.sleep(0.3)
    assert not fake.cancelled.is_set()
    call.cancel()
    await asyncio.wait_for(fake.cancelled.wait(), 5)
    assert fake.cancelled.is_set() and call.cancelled()


@BOTH
async def test_a_unary_call_whose_client_left_is_left_to_finish_by_default(proxy):
    """upstream.cancel streams (the default): Triton's unary call runs on to its end (or deadline)."""
    fake, channel, _ = proxy
    call = channel.unary_unary(SVC + "ModelInfer")(b"slow", timeout=1.0)
    await asyncio.sleep(0.3)
    call.cancel()
    await asyncio.sleep(0.4)
    assert not fake.cancelled.is_set()  # the client's RST_STREAM stopped at the gateway
    await asyncio.wait_for(fake.cancelled.wait(), 5)  # its deadline (1 s) still ends it at Triton


async def test_a_call_without_a_deadline_gets_the_listeners_default(proxy):
    fake, channel, ctx = proxy
    await channel.unary_unary(SVC + "ServerMetadata")(b"x")  # no client deadline
    default = ctx.settings.listener("v2_grpc").timeout_s
    assert fake.seen["time_remaining"] is not None and default - 5 < fake.seen["time_remaining"] <= default + 0.5


async def test_a_request_id_comes_back_only_when_the_client_sent_one(proxy):
    """As Triton said it: Triton's trailers carry no request id, so the passthrough adds only the
    client's own (a generated one is in the access line, not in the answer)."""
    _, channel, _ = proxy
    call = channel.unary_unary(SVC + "ServerMetadata")(b"x", metadata=(("x-request-id", "client-id-1"),), timeout=5)
    await call
    assert ("x-request-id", "client-id-1") in tuple(await call.trailing_metadata())
    call = channel.unary_unary(SVC + "ServerMetadata")(b"x", timeout=5)
    await call
    assert "x-request-id" not in dict(tuple(await call.trailing_metadata()))


def test_the_model_name_is_read_from_the_raw_request():
    raw = service_pb2.ModelInferRequest(model_name="resnet", id="r1", model_version="3").SerializeToString()
    assert model_name(raw) == "resnet"
    raw = service_pb2.ModelInferRequest(id="only-id").SerializeToString()
    assert model_name(raw) == ""
    assert model_name(b"\x0a\x05res") == "res"  # truncated: what is there, never an exception
    assert model_name(b"\xff") == ""


async def test_metrics_are_labelled_with_the_model_not_the_rpc(proxy):
    _, channel, _ = proxy
    labels = {"dialect": "v2", "listener": "v2_grpc", "route": "ModelInfer", "model": "resnet", "outcome": "ok",
              "status": "OK"}
    before = REGISTRY.get_sample_value("gateway_requests_total", labels) or 0
    raw = service_pb2.ModelInferRequest(model_name="resnet").SerializeToString()
    await channel.unary_unary(SVC + "ModelInfer")(raw, timeout=5)
    assert REGISTRY.get_sample_value("gateway_requests_total", labels) == before + 1


@BOTH
async def test_bidirectional_stream_passes_through(proxy):
    _, channel, _ = proxy

    async def requests():
        yield b"a"
        yield b"b"

    got = [m async for m in channel.stream_stream(SVC + "ModelStreamInfer")(requests(), timeout=5)]
    assert got == [b"a#0", b"a#1", b"a#2", b"b#0", b"b#1", b"b#2"]


@BOTH
async def test_a_stream_forwards_each_message_without_waiting_for_answers(proxy):
    """The two directions are independent: "pair" is answered only after the next message reached
    Triton, so a gateway that waited for an answer before forwarding the next message would hang."""
    fake, channel, _ = proxy
    call = channel.stream_stream(SVC + "ModelStreamInfer")(metadata=(("x-tenant", "a"),), timeout=5)
    await call.write(b"pair")
    await call.write(b"x")
    assert await call.read() == b"pair+x"
    await call.write(b"y")
    assert [await call.read() for _ in range(3)] == [b"y#0", b"y#1", b"y#2"]
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    assert fake.seen["half_closed"]  # the client's half-close reached Triton
    assert fake.seen["stream_metadata"]["x-tenant"] == "a"
    assert 3 < fake.seen["stream_time_remaining"] <= 5.1


@BOTH
async def test_tritons_status_midway_through_a_stream_is_kept(proxy):
    _, channel, _ = proxy
    call = channel.stream_stream(SVC + "ModelStreamInfer")(metadata=(("x-request-id", "s-1"),), timeout=5)
    await call.write(b"a")
    assert [await call.read() for _ in range(3)] == [b"a#0", b"a#1", b"a#2"]
    await call.write(b"boom")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "in-stream failure"
    trailing = tuple(err.value.trailing_metadata())
    assert ("why", "boom") in trailing and ("x-request-id", "s-1") in trailing


@BOTH
async def test_a_client_leaving_a_stream_cancels_tritons(proxy):
    fake, channel, _ = proxy
    call = channel.stream_stream(SVC + "ModelStreamInfer")(timeout=20)
    await call.write(b"hold")  # Triton still working on it
    assert await call.read() == b"hold#0"
    await asyncio.sleep(0.2)
    assert not fake.stream_cancelled.is_set()
    before = _streams_counted()
    call.cancel()
    await asyncio.wait_for(fake.stream_cancelled.wait(), 5)
    for _ in range(50):  # the edge still counts the request, though its generator is closed from grpc's task
        metrics.flush()
        if _streams_counted() == before + 1:
            break
        await asyncio.sleep(0.1)
    assert _streams_counted() == before + 1


@pytest.mark.parametrize("proxy", [{"UPSTREAM__CANCEL": "none"}], indirect=True)
async def test_a_client_leaving_a_stream_under_cancel_none_leaves_it_to_end(proxy):
    """upstream.cancel none: Triton's stream is half-closed and read to its end (here its deadline)."""
    fake, channel, _ = proxy
    call = channel.stream_stream(SVC + "ModelStreamInfer")(timeout=1.5)
    await call.write(b"hold")
    assert await call.read() == b"hold#0"
    call.cancel()
    await asyncio.sleep(0.6)
    assert not fake.stream_cancelled.is_set()
    await asyncio.wait_for(fake.stream_cancelled.wait(), 5)  # its deadline (1.5 s) ends it at Triton


def _streams_counted() -> float:
    return sum(s.value for m in REGISTRY.collect() if m.name == "gateway_requests" for s in m.samples
               if s.name == "gateway_requests_total" and s.labels.get("route") == "ModelStreamInfer")


async def test_a_stream_is_labelled_with_the_model_of_its_first_message(proxy):
    _, channel, _ = proxy
    labels = {"dialect": "v2", "listener": "v2_grpc", "route": "ModelStreamInfer", "model": "resnet",
              "outcome": "ok", "status": "OK"}
    before = REGISTRY.get_sample_value("gateway_requests_total", labels) or 0
    first = service_pb2.ModelInferRequest(model_name="resnet").SerializeToString()
    second = service_pb2.ModelInferRequest(model_name="other").SerializeToString()
    got = [m async for m in channel.stream_stream(SVC + "ModelStreamInfer")(_many(first, second), timeout=5)]
    assert len(got) == 6 and got[0] == first + b"#0" and got[3] == second + b"#0"
    metrics.flush()
    assert REGISTRY.get_sample_value("gateway_requests_total", labels) == before + 1


async def test_an_empty_stream_ends_ok(proxy):
    _, channel, _ = proxy
    call = channel.stream_stream(SVC + "ModelStreamInfer")(_many(), timeout=5)
    assert [m async for m in call] == []
    assert await call.code() == grpc.StatusCode.OK


async def _many(*items: bytes):
    for item in items:
        yield item


@BOTH
async def test_messages_over_100_mib_pass(proxy):
    _, channel, _ = proxy
    payload = b"\xab" * (100 * 1024 * 1024 + 7)
    out = await channel.unary_unary(SVC + "ModelInfer")(payload, timeout=60)
    assert len(out) == len(payload) + 5 and out.endswith(b"\xab\xab")


@settings(max_examples=300, deadline=None)
@given(name=st.text(max_size=300), version=st.text(max_size=5), rid=st.text(max_size=5))
def test_the_quick_model_name_read_is_the_field_scans(name, version, rid):
    raw = service_pb2.ModelInferRequest(model_name=name, model_version=version, id=rid).SerializeToString()
    assert model_name(raw) == _scan(raw)
    assert model_name(raw) == name.encode()[:256].decode("utf-8", "replace")


@given(raw=st.binary(max_size=40))
def test_the_quick_model_name_read_agrees_with_the_scan_on_any_bytes(raw):
    assert model_name(raw) == _scan(raw)
    assert model_name(raw, field=2) == _scan(raw, field=2)


def test_hop_by_hop_metadata_is_not_forwarded():
    md = (("user-agent", "grpc-python"), ("grpc-accept-encoding", "gzip"), (":authority", "x"),
          ("content-type", "application/grpc"), ("te", "trailers"), ("x-keep", "1"))
    assert forward_metadata(md) == (("x-keep", "1"),)


async def test_requests_over_the_in_flight_limit_get_tritons_queue_full_answer(proxy):
    _, channel, ctx = proxy
    labels = {"dialect": "v2", "listener": "v2_grpc", "route": "ModelInfer", "model": "", "outcome": "overloaded",
              "status": "UNAVAILABLE"}
    refused_before = REGISTRY.get_sample_value("gateway_requests_total", labels) or 0
    ctx.admission.inflight = ctx.settings.limits.max_inflight  # as if the worker were full
    try:
        for method in ("ModelInfer", "ServerMetadata"):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await channel.unary_unary(SVC + method)(b"x", timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert err.value.details() == "Exceeds maximum queue size"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            [m async for m in channel.stream_stream(SVC + "ModelStreamInfer")(_one(b"a"), timeout=5)]
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        ctx.admission.inflight = 0
    assert REGISTRY.get_sample_value("gateway_requests_total", labels) == refused_before + 1  # refusals counted
    assert await channel.unary_unary(SVC + "ModelInfer")(b"x", timeout=5) == b"echo:x"


async def _one(item: bytes):
    yield item


CONTROL = ("RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryRegister", "CudaSharedMemoryRegister",
           "SystemSharedMemoryUnregister", "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings")
READ_ONLY = ("RepositoryIndex", "SystemSharedMemoryStatus", "CudaSharedMemoryStatus")


async def test_the_control_plane_is_closed_by_default(proxy):
    fake, channel, _ = proxy
    for method in CONTROL:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await channel.unary_unary(SVC + method)(b"", timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
        assert "control_plane" in err.value.details()
    assert not set(CONTROL) & set(fake.methods)  # never reached Triton
    for method in READ_ONLY:  # they change nothing: open
        assert await channel.unary_unary(SVC + method)(b"x", timeout=5) == b"echo:x", method


@pytest.mark.parametrize("proxy", [{"DIALECTS__V2__CONTROL_PLANE": "true"}], indirect=True)
async def test_the_control_plane_can_be_opened(proxy):
    fake, channel, _ = proxy
    assert await channel.unary_unary(SVC + "RepositoryModelLoad")(b"m", timeout=5) == b"echo:m"
    assert "RepositoryModelLoad" in fake.methods


async def test_handlers_are_kept_for_the_service_methods_only():
    """A method outside Triton's service is passed on (Triton answers it) but its handler is not
    kept: clients cannot grow the worker's handler map with made-up names."""
    from types import SimpleNamespace

    from gateway.call import Admission
    from gateway.dialect import DefaultRendering
    from gateway.dialects.v2.passthrough import Passthrough
    from gateway.edge import Edge
    from gateway.upstream.client import TritonUpstream

    upstream = TritonUpstream("127.0.0.1:1")  # never called: handlers are only made
    await upstream.connect()
    ctx = SimpleNamespace(worker=SimpleNamespace(upstream=upstream), scope=None,
                          settings=SimpleNamespace(upstream=SimpleNamespace(cancel="streams")))
    state = SimpleNamespace(ctx=ctx, config=SimpleNamespace(control_plane=True))
    passthrough = Passthrough(Edge("v2", "v2_grpc", DefaultRendering(), Admission(8), 5.0, 5.0), state)
    try:
        made_up = [passthrough.service(SimpleNamespace(method=f"{SVC}Nope{i}")) for i in range(50)]
        assert all(h is not None for h in made_up)  # still forwarded
        infer = passthrough.service(SimpleNamespace(method=SVC + "ModelInfer"))
        assert passthrough.service(SimpleNamespace(method=SVC + "ModelInfer")) is infer
        assert list(passthrough._handlers) == [SVC + "ModelInfer"]
    finally:
        await upstream.close()


async def test_a_method_outside_the_service_is_answered_by_triton(proxy):
    fake, channel, ctx = proxy
    for i in range(3):
        assert await channel.unary_unary(f"{SVC}Nope{i}")(b"x", timeout=5) == b"echo:x"
    # (the worker's own ServerMetadata call, its Triton version read at start, may come between)
    assert [m for m in fake.methods if m != "ServerMetadata"][-3:] == ["Nope0", "Nope1", "Nope2"]
    # nor are their header blocks kept by the h2 channel: made-up names cannot grow the worker's maps
    assert not [path for path in ctx.upstream._h2._method_blocks if "Nope" in path]
