"""gateway/upstream/h2call.py: HTTP/2 frames on the loop give what a grpc.aio unary call gives.

A real grpc.aio server in this process (tests/unit/test_direct_call.py's) answers the h2 call and
``direct.unary`` alike: answers, errors (code and details, grpc-message's escapes read back),
deadlines, a cancelled caller (the server hears it), large messages both ways (flow-control
windows). A server written with the ``h2`` library plays what grpc's server does rarely or
loosely: GOAWAY with calls in flight, PING, a non-200 HTTP status, a dropped socket,
MAX_CONCURRENT_STREAMS counted strictly, several addresses.
"""

from __future__ import annotations

import asyncio

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from gateway.upstream import h2call
from tests.support import free_port
from tests.unit.test_direct_call import SERVICE, Server, _both


@pytest.fixture
async def served():
    impl = Server()

    async def percent(request: bytes, context):
        await context.abort(grpc.StatusCode.NOT_FOUND, "100% not here: ünïcode\nline")

    async def big(request: bytes, context):
        return request * 2

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Percent": grpc.unary_unary_rpc_method_handler(percent),
        "Big": grpc.unary_unary_rpc_method_handler(big)})
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
                                      ("grpc.max_concurrent_streams", 2)])
    server.add_generic_rpc_handlers((impl.handler(), handler))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", -1)])
    chans = {}

    def h2(name: str) -> h2call.Channel:
        if name not in chans:
            chans[name] = h2call.Channel([("127.0.0.1", port)], path=f"/{SERVICE}/{name}")
        return chans[name]

    try:
        yield impl, channel, h2
    finally:
        for c in chans.values():
            await c.close()
        await channel.close()
        await server.stop(None)


async def _outcome(call):
    try:
        return "ok", await call
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details()


async def test_answers_and_errors_as_grpc_gives_them(served):
    _, channel, h2 = served
    for name, request in (("Echo", b"hello"), ("Fail", b"that"), ("Percent", b""), ("Echo", b"")):
        direct_call = _both(channel, name)[0]
        want = await _outcome(direct_call(request, timeout=5))
        assert await _outcome(h2(name).call(request, 5)) == want, name
    assert want == ("ok", b"")


async def test_large_messages_both_ways(served):
    _, channel, h2 = served
    request = bytes(range(256)) * (40 << 10)  # 10 MiB: past every default window, in many frames
    direct_call = _both(channel, "Big")[0]
    assert await h2("Big").call(b"x", 5) == b"xx"  # the server's SETTINGS (2 streams at most) read
    answers = await asyncio.gather(*(h2("Big").call(request, 30) for _ in range(3)))
    assert answers == [await direct_call(request, timeout=30)] * 3


async def test_deadline_and_cancel(served):
    impl, _, h2 = served
    assert await _outcome(h2("Slow").call(b"", 0.2)) == (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    assert await _outcome(h2("Slow").call(b"", 0.0)) == (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    impl.cancelled.clear()
    task = asyncio.ensure_future(h2("Slow").call(b"", 30))
    await asyncio.sleep(0.3)  # the server is in its handler
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(impl.cancelled.wait(), 5)  # the server heard the RST_STREAM
    assert await h2("Echo").call(b"ok", 5) == b"ko"
    conn = h2("Slow")._conns[0]
    assert not conn.streams and not conn.closed


class FakeServer(asyncio.Protocol):
    """An HTTP/2 server (the h2 library) whose answer to each call the test decides: ``script``."""

    def __init__(self, script, max_streams: int | None = None):
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.max_streams = max_streams
        self.script = script
        self.events: list = []

    def connection_made(self, transport):
        self.transport = transport
        self.conn.initiate_connection()
        if self.max_streams is not None:
            self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        transport.write(self.conn.data_to_send())

    def data_received(self, data):
        for ev in self.conn.receive_data(data):
            self.events.append(ev)
            if isinstance(ev, h2.events.StreamEnded):
                self.script(self, ev.stream_id)
        self.flush()

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.transport.write(out)

    def answer(self, sid: int, message: bytes, status: int = 0, http: int = 200):
        self.conn.send_headers(sid, [(":status", str(http)), ("content-type", "application/grpc")])
        self.conn.send_data(sid, b"\x00" + len(message).to_bytes(4, "big") + message)
        self.conn.send_headers(sid, [("grpc-status", str(status))], end_stream=True)


async def _fake(script, max_streams: int | None = None):
    servers: list[FakeServer] = []

    def make():
        servers.append(FakeServer(script, max_streams))
        return servers[-1]

    port = free_port()
    server = await asyncio.get_running_loop().create_server(make, "127.0.0.1", port)
    return server, servers, h2call.Channel([("127.0.0.1", port)])


async def test_goaway_ping_http_status_and_a_dropped_socket():
    seen = []

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        kind = len(seen)
        if kind == 1:  # an answer, and a PING the client must answer
            srv.conn.ping(b"12345678")
            srv.answer(sid, b"one")
        elif kind == 2:  # an HTTP error status, no gRPC status
            srv.conn.send_headers(sid, [(":status", "503")], end_stream=True)
        elif kind == 3:  # the third call is left waiting; the fourth's arrival says GOAWAY for both
            pass
        elif kind == 4:
            srv.flush()  # GOAWAY written by hand: the h2 library would answer nothing more after its own
            srv.transport.write(h2call.frame(h2call.GOAWAY, 0, 0, (sid - 2).to_bytes(4, "big") + bytes(4)))
            srv.answer(sid - 2, b"three")
        elif kind == 5:  # the fourth, which the old connection's GOAWAY left out, on a new one
            srv.answer(sid, b"four")
        elif kind == 6:  # the socket drops under the call
            srv.transport.close()

    server, servers, chan = await _fake(script)
    try:
        assert await chan.call(b"a", 5) == b"one"
        await asyncio.sleep(0.05)
        assert any(isinstance(e, h2.events.PingAckReceived) for e in servers[0].events)
        assert await _outcome(chan.call(b"b", 5)) == (grpc.StatusCode.UNAVAILABLE,
                                                     "Received http2 header with status: 503")
        first = chan._conns[0]
        third = asyncio.ensure_future(chan.call(b"c", 5))
        await asyncio.sleep(0.05)
        # the fourth, past the GOAWAY's last stream: never started, so sent again on a new
        # connection (grpc's transparent retry); the third, started, is answered on the old one
        assert await chan.call(b"d", 5) == b"four"
        assert await third == b"three"
        assert first.closed and len(servers) == 2 and chan._conns[0] is not first
        # a socket that drops under a call: UNAVAILABLE, never sent again
        assert await _outcome(chan.call(b"e", 5)) == (grpc.StatusCode.UNAVAILABLE, "Socket closed")
        assert len(seen) == 6
    finally:
        await chan.close()
        server.close()


async def test_round_robin_spreads_calls():
    hits = {}

    def script_for(name):
        def script(srv: FakeServer, sid: int):
            hits[name] = hits.get(name, 0) + 1
            srv.answer(sid, name.encode())
        return script

    a, _, chan_a = await _fake(script_for("a"))
    b, _, chan_b = await _fake(script_for("b"))
    chan = h2call.Channel(chan_a.addresses + chan_b.addresses, "round_robin")
    first = h2call.Channel(chan_a.addresses + chan_b.addresses, "pick_first")
    try:
        assert [await chan.call(b"", 5) for _ in range(4)] == [b"a", b"b", b"a", b"b"]
        assert {await first.call(b"", 5) for _ in range(3)} == {b"a"}
    finally:
        await chan.close()
        await first.close()
        a.close()
        b.close()


async def test_max_concurrent_streams_kept():
    most = []

    def script(srv: FakeServer, sid: int):
        most.append(srv.conn.open_inbound_streams)
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, lambda: (srv.answer(sid, b"%d" % sid), srv.flush()))

    server, servers, chan = await _fake(script, max_streams=2)
    try:
        await chan.call(b"", 5)  # the server's SETTINGS read
        assert chan._conns[0].peer_streams == 2
        answers = await asyncio.gather(*(chan.call(b"", 5) for _ in range(20)))
        assert sorted(answers) == sorted(b"%d" % sid for sid in range(3, 43, 2))
        assert max(most) <= 2 and len(servers) == 1
    finally:
        await chan.close()
        server.close()
