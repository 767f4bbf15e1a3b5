"""gateway/h2/client.py as the V2 passthrough's relay: per-call metadata both ways and streams both ways.

A real grpc.aio server in this process answers the h2 client and grpc.aio's own channel alike, and
each test holds the h2 client to what grpc.aio gives: the metadata the server reads (``-bin`` values
included), the code, details, initial and trailing metadata of an error (after headers, and
trailers-only), and a ModelStreamInfer written message by message while its answers are read,
past the flow-control windows, half-closed, ended by the server midway, cancelled.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.support import grpc_and_h2

SERVICE = "inference.GRPCInferenceService"
STREAM = f"/{SERVICE}/ModelStreamInfer"


class Server:
    def __init__(self):
        self.received: list[tuple] = []
        self.half_closed = asyncio.Event()
        self.cancelled = asyncio.Event()

    def _seen(self, context) -> None:
        self.received.append(tuple((k, v) for k, v in context.invocation_metadata()
                                   if not k.startswith("grpc-") and k != "user-agent"))

    async def echo(self, request: bytes, context):
        self._seen(context)
        return request

    async def fail(self, request: bytes, context):
        if request == b"headers":  # initial metadata first: the status then comes in trailers
            await context.send_initial_metadata((("initial-key", "i"), ("initial-bin", b"\xff")))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no room: 100% ünïcode",
                            (("trailing-key", "t"), ("trailing-bin", b"\x00\x01\x02"), ("trailing-key", "again")))

    async def stream(self, requests, context):
        self._seen(context)
        try:
            async for item in requests:
                if item == b"pair":  # answered once the next message has come
                    nxt = await anext(aiter(requests))
                    yield b"pair+" + nxt
                elif item == b"boom":
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "in-stream failure", (("why", "boom"),))
                elif item == b"hold":
                    yield b"held"
                    await asyncio.sleep(30)
                else:
                    yield item[:16] + b"#%d" % len(item)
            self.half_closed.set()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {
            "ServerMetadata": grpc.unary_unary_rpc_method_handler(self.echo),
            "ModelInfer": grpc.unary_unary_rpc_method_handler(self.fail),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(self.stream)})


@pytest.fixture
async def served():
    impl = Server()
    async with grpc_and_h2(impl.handler(), (("grpc.max_receive_message_length", -1),
                                            ("grpc.max_send_message_length", -1))) as (channel, h2):
        yield impl, channel, h2


METADATA = (("x-tenant", "a b"), ("trace-bin", b"\x00\xff\x10"), ("x-tenant", "second"), ("traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))


async def test_metadata_reaches_the_server_as_grpc_sends_it(served):
    impl, channel, h2 = served
    path = f"/{SERVICE}/ServerMetadata"
    assert await channel.unary_unary(path)(b"x", metadata=METADATA, timeout=5) == b"x"
    assert await h2.call(b"x", 5, h2.blocks(path), METADATA) == b"x"
    by_key = [sorted(r, key=lambda kv: kv[0]) for r in impl.received]  # (grpc core orders some keys its own way)
    assert by_key[0] == by_key[1]
    assert ("trace-bin", b"\x00\xff\x10") in impl.received[1] and ("x-tenant", "second") in impl.received[1]


@pytest.mark.parametrize("bad", [(("X-Upper", "v"),), (("grpc-timeout", "1S"),), ((":path", "/x"),),
                                 (("x-ctl", "a\nb"),), (("x-ctl", "\x7f"),), (("", "v"),), (("x-num", 3),)])
async def test_invalid_metadata_is_refused_before_anything_is_sent(served, bad):
    impl, _, h2 = served
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await h2.call(b"x", 5, h2.blocks(f"/{SERVICE}/ServerMetadata"), bad)
    assert err.value.code() is grpc.StatusCode.INTERNAL
    assert impl.received == []


async def _error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


@pytest.mark.parametrize("request_", [b"headers", b"trailers-only"])
async def test_an_error_carries_tritons_code_details_and_metadata_as_grpc_gives_them(served, request_):
    _, channel, h2 = served
    path = f"/{SERVICE}/ModelInfer"
    want = await _error(channel.unary_unary(path)(request_, timeout=5))
    got = await _error(h2.call(request_, 5, h2.blocks(path)))
    assert (got.code(), got.details()) == (want.code(), want.details())
    assert tuple(got.trailing_metadata()) == tuple(want.trailing_metadata())
    assert tuple(got.initial_metadata()) == tuple(want.initial_metadata())
    assert ("trailing-bin", b"\x00\x01\x02") in tuple(got.trailing_metadata())


async def test_a_bidi_stream_forwards_each_message_as_it_comes(served):
    impl, _, h2 = served
    call = await h2.stream(5, (("x-tenant", "a"),))
    await call.write(b"pair")
    await call.write(b"x")
    assert await call.read() == b"pair+x"  # the first answer needed the second message: nothing waited
    await call.write(b"y")
    assert await call.read() == b"y#1"
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    await asyncio.wait_for(impl.half_closed.wait(), 5)
    assert ("x-tenant", "a") in impl.received[0]


async def test_a_bidi_stream_past_the_windows_arrives_whole_and_in_order(served):
    """Messages larger than Triton's stream window (64 KiB to begin with) and, together, than the
    connection's: each write waits for the windows and the answers come as they are read."""
    _, _, h2 = served
    call = await h2.stream(30)
    sizes = [1, 70_000, 3 << 20, 5, 9 << 20, 200_000]
    messages = [bytes([i + 1]) * n for i, n in enumerate(sizes)]

    async def writer():
        for m in messages:
            await call.write(m)
        await call.done_writing()

    task = asyncio.ensure_future(writer())
    got = [m async for m in call]
    await task
    assert got == [m[:16] + b"#%d" % len(m) for m in messages]


async def test_a_half_close_behind_a_message_still_waiting_for_a_window_waits_with_it(served):
    impl, _, h2 = served
    call = await h2.stream(30)
    big = b"\x07" * (12 << 20)  # far past the server's first windows: its write waits
    write = asyncio.ensure_future(call.write(big))
    await asyncio.sleep(0)
    await asyncio.wait_for(call.done_writing(), 20)  # sent after the message, with END_STREAM
    await asyncio.wait_for(write, 20)
    assert [m async for m in call] == [big[:16] + b"#%d" % len(big)]
    await asyncio.wait_for(impl.half_closed.wait(), 5)


async def test_the_servers_status_midway_ends_the_stream_with_its_metadata(served):
    _, channel, h2 = served
    want_call = channel.stream_stream(STREAM)(timeout=5)
    await want_call.write(b"boom")
    want = await _error(want_call.read())
    call = await h2.stream(5)
    await call.write(b"a")
    assert await call.read() == b"a#1"
    await call.write(b"boom")
    got = await _error(call.read())
    assert (got.code(), got.details(), tuple(got.trailing_metadata())) == \
        (want.code(), want.details(), tuple(want.trailing_metadata()))
    assert call.done()
    with pytest.raises(asyncio.InvalidStateError):  # as grpc.aio's write to a finished call
        await call.write(b"late")
    await call.done_writing()  # a finished call: nothing to do, as grpc.aio


async def test_a_cancelled_bidi_stream_is_cancelled_at_the_server(served):
    impl, _, h2 = served
    call = await h2.stream(20)
    await call.write(b"hold")
    assert await call.read() == b"held"
    call.cancel()
    await asyncio.wait_for(impl.cancelled.wait(), 5)
    assert call.done()


async def test_an_empty_bidi_stream_ends_ok(served):
    impl, _, h2 = served
    call = await h2.stream(5)
    await call.done_writing()
    assert [m async for m in call] == []
    await asyncio.wait_for(impl.half_closed.wait(), 5)


async def test_a_bidi_streams_deadline_is_deadline_exceeded(served):
    impl, _, h2 = served
    call = await h2.stream(0.3)
    await call.write(b"hold")
    assert await call.read() == b"held"
    err = await _error(call.read())
    assert err.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    await asyncio.wait_for(impl.cancelled.wait(), 5)
