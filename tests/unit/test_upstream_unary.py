"""gateway/upstream/unary.py: a unary call on the HTTP/2 client (``over_h2``, the default transport)
gives what grpc.aio's public call gives (``over_grpc``, ``upstream.transport: grpc``).

A real grpc.aio server in this process answers both; every case sends the same request through
each and compares what comes back: the answer (serializers both ways), the error (code and
details), the deadline, a call without one, and the cancellation the server sees when the caller
goes away (or does not see, ``cancel`` False). A call's metadata (tracing, the V2 passthrough's
headers) is delivered on either transport: the HTTP/2 client sends it as header fields.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

from gateway.h2 import client as h2call
from gateway.upstream.unary import over_grpc, over_h2
from tests.support import free_port, grpc_and_h2

SERVICE = "test.Echo"


class Server:
    """Methods: Echo (the request, reversed, with the server's view of the metadata), Fail (aborts
    with initial and trailing metadata), Slow (waits until cancelled, noting it)."""

    def __init__(self):
        self.cancelled = asyncio.Event()
        self.finished = asyncio.Event()
        self.received: list[tuple] = []
        self.deadlines: list[float | None] = []

    async def echo(self, request: bytes, context):
        self.received.append(tuple((k, v) for k, v in context.invocation_metadata() if not k.startswith("grpc-")
                                   and k not in ("user-agent",)))
        self.deadlines.append(context.time_remaining())
        return request[::-1]

    async def fail(self, request: bytes, context):
        await context.send_initial_metadata((("initial-key", "i"),))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"no room for {request.decode()}",
                            (("trailing-key", "t"), ("trailing-bin", b"\x00\x01")))

    async def slow(self, request: bytes, context):
        try:
            await asyncio.sleep(float(request or b"30"))
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        self.finished.set()
        return b"done"

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {
            "Echo": grpc.unary_unary_rpc_method_handler(self.echo),
            "Fail": grpc.unary_unary_rpc_method_handler(self.fail),
            "Slow": grpc.unary_unary_rpc_method_handler(self.slow),
        })


@contextlib.asynccontextmanager
async def serving():
    """(Server, a grpc.aio channel to it, an h2 channel to it), a real grpc.aio server in this process."""
    impl = Server()
    async with grpc_and_h2(impl.handler()) as (channel, h2):
        yield impl, channel, h2


@pytest.fixture
async def served():
    async with serving() as found:
        yield found


def _both(channel, h2, name: str, serializer=None, deserializer=None, cancel: bool = True):
    """(the h2 call, grpc.aio's call) of method ``name``."""
    path = f"/{SERVICE}/{name}"
    return (over_h2(h2, path, serializer, deserializer, cancel),
            over_grpc(channel, path, serializer, deserializer, cancel))


async def _outcome(call):
    try:
        return "ok", await call
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details()


async def test_an_answer_is_the_same_and_metadata_is_delivered(served):
    impl, channel, h2 = served
    md = (("x-request-id", "abc"), ("traceparent", "00-1-2-01"), ("key-bin", b"\xff\x00"))
    results = []
    for call in _both(channel, h2, "Echo", serializer=str.encode, deserializer=bytes.decode):
        results.append(await call("hello", timeout=5, metadata=md))
        results.append(await call("again"))  # no deadline, no metadata
    assert results == ["olleh", "niaga"] * 2
    assert [sorted(got) for got in impl.received] == [sorted(md), []] * 2
    assert impl.deadlines[1] > 1e6 and impl.deadlines[3] is None  # no deadline: none (h2: grpc-timeout's largest)


async def test_an_error_is_the_same(served):
    _, channel, h2 = served
    outcomes = [await _outcome(call(b"that", timeout=5)) for call in _both(channel, h2, "Fail")]
    assert outcomes == [(grpc.StatusCode.RESOURCE_EXHAUSTED, "no room for that")] * 2


async def test_the_deadline_is_kept(served):
    _, channel, h2 = served
    outcomes = [await _outcome(call(b"", timeout=0.2)) for call in _both(channel, h2, "Slow")]
    assert outcomes == [(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")] * 2


@pytest.mark.parametrize("transport", ["h2", "grpc"])
async def test_a_cancelled_caller_cancels_the_call_or_leaves_it_to_finish(served, transport):
    impl, channel, h2 = served
    for cancel in (True, False):
        impl.cancelled.clear()
        impl.finished.clear()
        call = _both(channel, h2, "Slow", cancel=cancel)[0 if transport == "h2" else 1]
        task = asyncio.ensure_future(call(b"0.6", timeout=30))
        await asyncio.sleep(0.3)  # the server is in its handler
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        heard = impl.cancelled if cancel else impl.finished  # cancelled, or left to run to its end
        await asyncio.wait_for(heard.wait(), 5)
        assert not (impl.finished if cancel else impl.cancelled).is_set()
    assert await _both(channel, h2, "Echo")[0](b"ok", timeout=5) == b"ko"  # the channel still serves


async def test_an_unreachable_server_is_unavailable():
    port = free_port()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    h2 = h2call.Channel([("127.0.0.1", port)])
    try:
        codes = [(await _outcome(call(b"x", timeout=5)))[0] for call in _both(channel, h2, "Echo")]
        assert codes == [grpc.StatusCode.UNAVAILABLE] * 2
    finally:
        await h2.close()
        await channel.close()
