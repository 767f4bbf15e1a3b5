"""``upstream.cancel`` (gateway/upstream/cancel.py) on every transport to Triton: a unary call whose
caller goes away is cancelled only under ``all`` (a real grpc.aio server in this process sees the
cancellation, or the call's end), on the HTTP/2 client (h2call) and grpc.aio's
public multicallable; a stream whose caller goes away is cancelled under ``streams`` and ``all``,
and read to its end under ``none``; a stream whose final response was read is never cancelled.
And which Triton releases the start-up warning and ``gateway check`` name."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from gateway import config
from gateway.h2 import client as h2call
from gateway.settings import SettingsError
from gateway.upstream import cancel, from_settings
from gateway.upstream.unary import over_grpc
from tests.support import free_port

SERVICE = "test.Later"


class Server:
    """``Later``: answers after ``delay`` seconds, noting whether it finished or was cancelled."""

    def __init__(self, delay: float = 0.5):
        self.delay = delay
        self.finished = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def later(self, request: bytes, context):
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        self.finished.set()
        return request

    def reset(self) -> None:
        self.finished.clear()
        self.cancelled.clear()


@pytest.fixture
async def served():
    impl = Server()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Later": grpc.unary_unary_rpc_method_handler(impl.later)}),))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield impl, channel, port
    finally:
        await channel.close()
        await server.stop(None)


async def _left(impl: Server, call) -> str:
    """The caller goes away 0.1 s into ``call``: what the server saw of it ("finished" or "cancelled")."""
    impl.reset()
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    done, _ = await asyncio.wait([asyncio.ensure_future(impl.finished.wait()),
                                  asyncio.ensure_future(impl.cancelled.wait())],
                                 timeout=5, return_when=asyncio.FIRST_COMPLETED)
    assert done, "the server saw neither the end nor a cancellation"
    return "finished" if impl.finished.is_set() else "cancelled"


@pytest.mark.parametrize("cancels", [True, False])
async def test_a_unary_call_whose_caller_left_on_each_transport(served, cancels):
    impl, channel, port = served
    path = f"/{SERVICE}/Later"
    want = "cancelled" if cancels else "finished"
    assert await _left(impl, over_grpc(channel, path, cancel=cancels)(b"x", timeout=10)) == want
    chan = h2call.Channel([("127.0.0.1", port)], path=path, cancel_unary=cancels)
    try:
        assert await _left(impl, chan.call(b"x", 10)) == want
        conn = chan._conns[0]
        await asyncio.sleep(0.05)
        assert not conn.streams and not conn.closed  # the call ended (either way) and was forgotten
        assert await chan.call(b"again", 10) == b"again"  # the connection serves on
    finally:
        await chan.close()


async def test_a_unary_call_left_to_finish_still_has_its_deadline(served):
    impl, channel, port = served
    impl.delay = 30
    path = f"/{SERVICE}/Later"
    chan = h2call.Channel([("127.0.0.1", port)], path=path, cancel_unary=False)
    try:
        impl.reset()
        task = asyncio.ensure_future(chan.call(b"x", 0.5))
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.wait_for(impl.cancelled.wait(), 5)  # the deadline's RST_STREAM, not the caller's
        assert not chan._conns[0].streams
    finally:
        await chan.close()


def test_the_modes():
    assert [(cancel.unary_cancelled(m), cancel.streams_cancelled(m)) for m in cancel.MODES] == [
        (False, True), (True, True), (False, False)]
    assert config.load(None, env={}).upstream.cancel == "streams"
    assert config.load(None, env={"GATEWAY__UPSTREAM__CANCEL": "none"}).upstream.cancel == "none"
    with pytest.raises(SettingsError, match="upstream.cancel"):
        config.load(None, env={"GATEWAY__UPSTREAM__CANCEL": "some"})


@pytest.mark.parametrize(("mode", "unary"), [("streams", False), ("all", True), ("none", False)])
def test_the_setting_reaches_every_transport(mode, unary):
    settings = config.load(None, env={"GATEWAY__UPSTREAM__GRPC": "127.0.0.1:1", "GATEWAY__UPSTREAM__CANCEL": mode})
    up = from_settings(settings)
    assert up._h2.cancel_unary is unary and up._cancel_unary is unary
    assert up._cancel_streams is (mode != "none") and up.cancel_mode == mode


class FakeStream:
    """A ModelStreamInfer call as grpc.aio's has it: ``messages`` then EOF, each read after ``gap`` s."""

    def __init__(self, messages: int, gap: float = 0.01):
        self.left = messages
        self.gap = gap
        self.cancelled = False
        self.half_closed = False
        self.ended = False

    def done(self) -> bool:
        return self.cancelled or self.ended

    def cancel(self) -> None:
        self.cancelled = True

    async def done_writing(self) -> None:
        self.half_closed = True

    async def read(self):
        try:
            await asyncio.sleep(self.gap)
        except asyncio.CancelledError:
            self.cancelled = True  # as grpc.aio and h2call do: a cancelled read cancels the call
            raise
        if self.cancelled:
            raise grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, None, None, "cancelled")
        if self.left == 0:
            self.ended = True
            return grpc.aio.EOF
        self.left -= 1
        return b"m"


async def _consumer_leaves(call: FakeStream, reader: cancel.Reader | None) -> None:
    """A consumer that reads one message, then is cancelled in the middle of its second read."""
    read = call.read if reader is None else reader.read

    async def consume():
        await read()
        await read()

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(0.015)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stream_whose_caller_left_is_cancelled_unless_none():
    call = FakeStream(5)
    await _consumer_leaves(call, None)
    cancel.finish(call, False, True)
    assert call.cancelled  # streams, all: Triton stops the generation

    call = FakeStream(5)
    reader = cancel.Reader(call)
    await _consumer_leaves(call, reader)
    assert not call.cancelled and reader.pending is not None  # the read in flight lives on
    cancel.finish(call, False, False, reader)
    for _ in range(100):
        if call.ended:
            break
        await asyncio.sleep(0.01)
    assert call.ended and call.half_closed and not call.cancelled and call.left == 0  # none: read to its end


@pytest.mark.parametrize("cancels", [True, False])
async def test_an_answered_stream_ends_with_its_trailers_in_every_mode(cancels):
    call = FakeStream(0)  # the final response read: only the trailers (EOF) to come
    cancel.finish(call, True, cancels)
    for _ in range(100):
        if call.ended:
            break
        await asyncio.sleep(0.01)
    assert call.ended and not call.cancelled


async def test_the_reader_iterates_as_the_call_does():
    assert [m async for m in cancel.Reader(FakeStream(3))] == [b"m"] * 3


@pytest.mark.parametrize(("version", "mode", "said"), [
    ("2.51.0", "streams", "streams"), ("2.51.0", "all", "set upstream.cancel to streams"), ("2.51.0", "none", None),
    ("2.58.0", "streams", "streams"), ("2.54.0dev", "all", "all"), ("2.59.0", "all", None), ("2.75.0", "streams", None),
    ("", "streams", None), ("unknown", "all", None)])
def test_which_tritons_are_said_to_crash_on_a_cancellation(version, mode, said):
    warning = cancel.crash_warning(version, mode)
    if said is None:
        assert warning is None
    else:
        assert warning is not None and said in warning
        assert f"Triton {version} is older than 2.59.0 (NGC 25.06)" in warning
        assert "#7840" in warning and "#8078" in warning and "#8220" in warning and "Upgrade Triton" in warning


async def test_gateway_check_warns_of_such_a_triton(tmp_path):
    from tests.unit.test_check import Upstream, load, warnings

    class Old(Upstream):
        async def server_metadata(self):
            return {"name": "triton", "version": "2.51.0", "extensions": []}

    from gateway import check
    from tests.unit.test_check import ECHO, HP3, TINY

    for mode, said in (("streams", True), ("all", True), ("none", False)):
        r = await check.collect(load(tmp_path, upstream={"grpc": "127.0.0.1:1", "cancel": mode}),
                                Old(metas=[HP3, ECHO, TINY]))
        found = [w for w in warnings(r, "triton") if "older than 2.59.0" in w]
        assert bool(found) is said and r.exit_code == 0, mode
        if said:
            assert found[0].startswith("upstream.cancel: Triton 2.51.0 is older than 2.59.0 (NGC 25.06)")
    r = await check.collect(load(tmp_path), Upstream(metas=[HP3, ECHO, TINY]))  # the fake's version: "0"
    assert not [w for w in warnings(r, "triton") if "older" in w]
