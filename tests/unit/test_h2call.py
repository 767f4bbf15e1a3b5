"""gateway/h2/client.py: HTTP/2 frames on the loop give what a grpc.aio unary call gives.

A real grpc.aio server in this process (tests/unit/test_upstream_unary.py's) answers the h2 call and
grpc.aio's call alike: answers, errors (code and details, grpc-message's escapes read back),
deadlines, a cancelled caller (the server hears it), large messages both ways (flow-control
windows). A server written with the ``h2`` library plays what grpc's server does rarely or
loosely: GOAWAY with calls in flight, PING, a non-200 HTTP status, a dropped socket,
MAX_CONCURRENT_STREAMS counted strictly, several addresses, a host that stops answering (keepalive
PINGs unacknowledged) and GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
"""

from __future__ import annotations

import asyncio
import gc
import itertools

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from tritonclient.grpc import service_pb2

from gateway.core.tensors import InferRequest
from gateway.h2 import client as h2call
from gateway.upstream.client import TritonUpstream
from gateway.upstream.unary import over_grpc
from tests.support import free_port
from tests.unit.test_upstream_unary import SERVICE, Server, _outcome


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


async def test_answers_and_errors_as_grpc_gives_them(served):
    _, channel, h2 = served
    for name, request in (("Echo", b"hello"), ("Fail", b"that"), ("Percent", b""), ("Echo", b"")):
        grpc_call = over_grpc(channel, f"/{SERVICE}/{name}")
        want = await _outcome(grpc_call(request, timeout=5))
        assert await _outcome(h2(name).call(request, 5)) == want, name
    assert want == ("ok", b"")


async def test_large_messages_both_ways(served):
    _, channel, h2 = served
    request = bytes(range(256)) * (40 << 10)  # 10 MiB: past every default window, in many frames
    grpc_call = over_grpc(channel, f"/{SERVICE}/Big")
    assert await h2("Big").call(b"x", 5) == b"xx"  # the server's SETTINGS (2 streams at most) read
    answers = await asyncio.gather(*(h2("Big").call(request, 30) for _ in range(3)))
    assert answers == [await grpc_call(request, timeout=30)] * 3


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
        self.early = False  # the script runs at a request's headers, not at its end
        self.events: list = []
        self.deaf = False  # read nothing, answer nothing: a host gone without closing the socket

    def connection_made(self, transport):
        self.transport = transport
        self.conn.initiate_connection()
        if self.max_streams is not None:
            self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        transport.write(self.conn.data_to_send())

    def data_received(self, data):
        if self.deaf:
            return
        for ev in self.conn.receive_data(data):
            self.events.append(ev)
            if isinstance(ev, h2.events.RequestReceived if self.early else h2.events.StreamEnded):
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


async def _fake(script, max_streams: int | None = None, keepalive: h2call.Keepalive | None = None):
    servers: list[FakeServer] = []

    def make():
        servers.append(FakeServer(script, max_streams))
        return servers[-1]

    port = free_port()
    server = await asyncio.get_running_loop().create_server(make, "127.0.0.1", port)
    return server, servers, h2call.Channel([("127.0.0.1", port)], keepalive=keepalive)


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


async def _until(check, what: str):
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_keepalive_pings_and_a_host_that_stops_answering():
    seen = []

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        if len(seen) == 2:  # the host goes quiet under the second call: no answer, no PING ack
            srv.deaf = True
        else:
            srv.answer(sid, b"%d" % len(seen))

    pings = h2call.Keepalive(0.1, 0.2)
    server, servers, chan = await _fake(script, keepalive=pings)
    try:
        assert await chan.call(b"", 5) == b"1"
        first = chan._conns[0]
        # idle: PINGed (without calls, as the grpc.aio channel allows), acked, the connection kept
        await _until(lambda: any(isinstance(e, h2.events.PingReceived) for e in servers[0].events), "a PING")
        await _until(lambda: first._watchdog is None, "the ack read")
        assert not first.closed
        # a call in flight when the host stops answering: UNAVAILABLE from the keepalive, long
        # before its deadline, and never sent again
        assert await _outcome(chan.call(b"", 30)) == (grpc.StatusCode.UNAVAILABLE, "keepalive watchdog timeout")
        assert first.closed and first.lost and first._ticker is None and len(seen) == 2
        # the next call opens a new connection
        assert await chan.call(b"", 5) == b"3"
        assert len(servers) == 2 and chan._conns[0] is not first
    finally:
        await chan.close()
        server.close()


class Transport:
    """What a Connection writes, kept."""

    def __init__(self):
        self.out = []

    def write(self, data):
        self.out.append(data)

    def close(self):
        pass


def test_keepalive_only_with_calls_unless_permitted():
    async def run(without_calls: bool, streams: int, read_at: int = -1) -> int:
        conn = h2call.Connection(h2call.Keepalive(1000.0, 1000.0, without_calls))
        conn.transport = Transport()
        conn.streams = dict.fromkeys(range(1, 2 * streams, 2))
        for i in range(4):  # four quarters of the keepalive time, quiet but for a read at ``read_at``
            conn.heard = i == read_at
            conn._tick()
        conn._tick()  # an outstanding PING: no second one
        pings = sum(d[3] == h2call.PING for d in conn.transport.out)
        conn.lost = True
        conn._stop_keepalive()
        return pings

    assert asyncio.run(run(True, 0)) == 1
    assert asyncio.run(run(False, 0)) == 0
    assert asyncio.run(run(False, 1)) == 1
    assert asyncio.run(run(True, 1, read_at=1)) == 0  # a frame read: the keepalive time starts again


async def test_too_many_pings_doubles_the_keepalive_time():
    def script(srv: FakeServer, sid: int):
        srv.answer(sid, b"ok")
        srv.flush()  # GOAWAY by hand, after the answer (the h2 library sends nothing after its own)
        srv.transport.write(h2call.frame(h2call.GOAWAY, 0, 0, sid.to_bytes(4, "big")
                                         + h2call.ENHANCE_YOUR_CALM.to_bytes(4, "big") + b"too_many_pings"))

    server, servers, chan = await _fake(script, keepalive=h2call.Keepalive(30.0, 10.0))
    try:
        times = []
        for _ in range(3):
            assert await chan.call(b"", 5) == b"ok"
            conn = chan._conns[0]
            times.append(conn.keepalive.time)
            await _until(lambda c=conn: c.closed, "the GOAWAY read")
        # each connection starts with the time the last one's GOAWAY doubled, as grpc core's
        # subchannel keeps it
        assert times == [30.0, 60.0, 120.0] and chan._conns[0].keepalive_time == 240.0
        assert len(servers) == 3
        conn = h2call.Connection(h2call.Keepalive(2**30 / 1000, 1.0))
        conn.transport = Transport()
        conn._frame(h2call.GOAWAY, 0, 0, bytes(4) + h2call.ENHANCE_YOUR_CALM.to_bytes(4, "big") + b"too_many_pings", 22)
        assert conn.keepalive_time == float("inf")  # past INT_MAX/2 ms: off, as grpc core has it
    finally:
        await chan.close()
        server.close()


def _msg(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


async def _read_all(call: h2call.StreamCall) -> list:
    got = []
    try:
        while (item := await call.read()) is not grpc.aio.EOF:
            got.append(item)
    except grpc.aio.AioRpcError as err:
        got.append((err.code(), err.details()))
    return got


async def test_stream_messages_as_they_come_and_its_end():
    """A ModelStreamInfer answer's messages however the DATA frames cut them (two in one frame,
    one across frames, the prefix itself cut), its window given back as they are read, and its end:
    trailers OK (EOF) or an error status after some messages."""
    seen = []
    big = bytes(range(256)) * 4096  # 1 MiB

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        srv.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        if len(seen) == 1:
            wire = _msg(b"one") + _msg(b"two") + _msg(b"three" * 10_000) + _msg(b"")
            cuts = [0, 10, 12, 17, 50_000, len(wire)]  # frames cut there (and at 16 KiB)
            for a, b in itertools.pairwise(cuts):
                for i in range(a, b, 16384):
                    srv.conn.send_data(sid, wire[i:min(b, i + 16384)])
                srv.flush()
            srv.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        elif len(seen) == 2:
            srv.conn.send_data(sid, _msg(b"tok"))
            srv.conn.send_headers(sid, [("grpc-status", "3"), ("grpc-message", "bad%20token")], end_stream=True)
        else:  # 5 MiB in 1 MiB messages: past half the stream window, given back as read
            wire = _msg(big) * 5
            for i in range(0, len(wire), 16384):
                srv.conn.send_data(sid, wire[i:i + 16384])

    server, servers, chan = await _fake(script)
    try:
        call = chan.stream_call(bytes, 5)
        await call.write(b"request")
        assert await _read_all(call) == [b"one", b"two", b"three" * 10_000, b""]
        assert call.done()
        ev = [e for e in servers[0].events if isinstance(e, h2.events.DataReceived)]
        assert ev[0].data == _msg(b"request") and ev[0].stream_ended is not None  # the half-close
        call = chan.stream_call(bytes, 5)
        await call.write(b"again")
        assert await _read_all(call) == [b"tok", (grpc.StatusCode.INVALID_ARGUMENT, "bad token")]
        call = chan.stream_call(bytes, 5)
        await call.write(b"large")
        assert [await call.read() for _ in range(5)] == [big] * 5
        sid, srv = seen[-1], servers[0]
        await _until(lambda: any(isinstance(e, h2.events.WindowUpdated) and e.stream_id == sid for e in srv.events),
                     "the stream's window given back")
        srv.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        srv.flush()
        assert await call.read() is grpc.aio.EOF
        assert not chan._conns[0].streams and len(servers) == 1
    finally:
        await chan.close()
        server.close()


async def test_stream_deadline_cancel_and_a_dropped_socket():
    seen = []

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        srv.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        srv.conn.send_data(sid, _msg(b"first"))
        if len(seen) == 3:
            srv.flush()
            srv.transport.close()

    server, servers, chan = await _fake(script)
    try:
        call = chan.stream_call(bytes, 0.2)  # a deadline: the messages read, then DEADLINE_EXCEEDED
        await call.write(b"a")
        assert await _read_all(call) == [b"first", (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")]
        call = chan.stream_call(bytes, 5)  # the caller gone: RST_STREAM CANCEL
        await call.write(b"b")
        assert await call.read() == b"first"
        call.cancel()
        assert call.done()
        await _until(lambda: sum(isinstance(e, h2.events.StreamReset) for e in servers[0].events) == 2,
                     "both streams reset")
        assert not chan._conns[0].streams
        call = chan.stream_call(bytes, 5)  # the socket drops mid-stream: UNAVAILABLE after what came
        await call.write(b"c")
        assert await _read_all(call) == [b"first", (grpc.StatusCode.UNAVAILABLE, "Socket closed")]
    finally:
        await chan.close()
        server.close()


async def test_a_stream_read_to_its_final_response_ends_with_its_trailers_not_a_reset():
    """TritonUpstream.stream on h2: Triton writes its trailers after the final response; a stream
    whose final response was read is left to end with them (no RST_STREAM for a finished request),
    and its deadline timer goes with it. One closed before its final response is still reset."""
    def response(final: bool) -> bytes:
        msg = service_pb2.ModelStreamInferResponse()
        msg.infer_response.model_name = "m"
        msg.infer_response.parameters["triton_final_response"].bool_param = final
        msg.infer_response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
        msg.infer_response.raw_output_contents.append(b"\x02\x00\x00\x00hi")
        return _msg(msg.SerializeToString())

    seen = []

    def script(srv: FakeServer, sid: int):
        seen.append(sid)
        srv.conn.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        srv.conn.send_data(sid, response(False) + response(True))
        srv.flush()

        def trailers():  # a moment later, as a separate write
            srv.conn.send_headers(sid, [("grpc-status", "0")], end_stream=True)
            srv.flush()

        if len(seen) == 1:  # (the second stream is reset before its final response is read)
            asyncio.get_running_loop().call_later(0.05, trailers)
        elif len(seen) == 3:  # with the final response, as Triton's often come
            trailers()

    server, servers, chan = await _fake(script)
    upstream = TritonUpstream("127.0.0.1:1", h2=chan)
    try:
        got = [r async for r in upstream.stream(InferRequest(model="m", inputs=[]))]
        assert [r.final for r in got] == [False, True]
        conn = chan._conns[0]
        await _until(lambda: not conn.streams, "the stream ended by its trailers")
        stream = upstream.stream(InferRequest(model="m", inputs=[]))  # closed after the first response
        assert not (await anext(stream)).final
        await stream.aclose()
        await _until(lambda: any(isinstance(e, h2.events.StreamReset) and e.stream_id == seen[-1]
                                 for e in servers[0].events), "the unfinished stream reset")
        # the server reads frames in order: a reset of the first stream would have come before
        assert [e.stream_id for e in servers[0].events if isinstance(e, h2.events.StreamReset)] == [seen[-1]]
        got = [r async for r in upstream.stream(InferRequest(model="m", inputs=[]))]
        assert [r.final for r in got] == [False, True] and not conn.streams
        gc.collect()  # nothing holds an ended stream (its deadline timer stopped: it held it, and the connection)
        assert not [o for o in gc.get_objects() if type(o) is h2call._Stream]
    finally:
        await chan.close()
        server.close()


def _sent(srv: FakeServer, sid: int) -> bytes:
    """The request message a fake server read on stream ``sid`` (prefix taken off)."""
    return b"".join(e.data for e in srv.events if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)[5:]


async def test_a_call_begun_at_once_hands_its_end_to_a_function():
    """Channel.start: what ``call`` would give (bytes, AioRpcError) handed to a function, without
    a task; a call a GOAWAY left out sent again on a new connection and its end handed on; its
    deadline; ``cancel`` resets the stream (cancel True) or leaves it to finish, its answer dropped
    (False); None where it cannot begin at once (no connection open yet)."""
    later = []

    def script(srv: FakeServer, sid: int):
        sent = _sent(srv, sid)
        if sent == b"goaway" and srv is servers[0]:  # on the first connection
            srv.flush()
            srv.transport.write(h2call.frame(h2call.GOAWAY, 0, 0, (sid - 2).to_bytes(4, "big") + bytes(4)))
        elif sent in (b"slow", b"hold"):
            pass  # never answered
        elif sent == b"late":  # answered once the caller has gone
            later.append(asyncio.get_running_loop().call_later(0.2, lambda: (srv.answer(sid, b"late!"), srv.flush())))
        else:
            srv.answer(sid, b"ans:" + sent)

    server, servers, chan = await _fake(script)
    got: list = []
    blocks = chan.blocks(h2call.STREAM_PATH.replace("ModelStreamInfer", "ModelInfer"))
    try:
        assert chan.start(b"a", 5, blocks, None, None, got.append) is None  # nothing open yet: ``call`` then
        assert await chan.call(b"x", 5) == b"ans:x"
        assert chan.start(b"a", 5, blocks, (("x-k", "v"),), None, got.append) is not None
        await _until(lambda: got, "the answer")
        assert got == [b"ans:a"]
        first = chan._conns[0]
        chan.start(b"goaway", 5, blocks, None, None, got.append)  # left out by the GOAWAY: sent again
        await _until(lambda: len(got) == 2, "the answer sent again")
        assert got[1] == b"ans:goaway" and first.closed and len(servers) == 2
        chan.start(b"slow", 0.2, blocks, None, None, got.append)
        await _until(lambda: len(got) == 3, "the deadline")
        assert got[2].code() == grpc.StatusCode.DEADLINE_EXCEEDED
        resets = lambda: [e.stream_id for e in servers[1].events if isinstance(e, h2.events.StreamReset)]  # noqa: E731
        await _until(lambda: len(resets()) == 1, "the expired stream reset")
        started = chan.start(b"hold", 5, blocks, None, True, got.append)
        await asyncio.sleep(0.05)
        started.cancel()  # the caller went away: the stream reset
        await _until(lambda: len(resets()) == 2, "the cancelled stream reset")
        conn = chan._conns[0]
        started = chan.start(b"late", 5, blocks, None, False, got.append)
        await asyncio.sleep(0.05)
        started.cancel()  # left to finish: no reset, its answer dropped
        await _until(lambda: not conn.streams, "the late answer read")
        assert len(resets()) == 2 and len(got) == 3 and started.timer is None
    finally:
        for handle in later:
            handle.cancel()
        await chan.close()
        server.close()


async def test_frames_late_on_a_closed_stream():
    """RFC 9113 5.1 on the client (gateway/h2/core.py's Closed): DATA or HEADERS on a stream Triton
    ended is a stream error STREAM_CLOSED (RST_STREAM), the connection kept for the other calls;
    what Triton still sends on a stream we reset is dropped, its trailers twice included (grpc
    core's server does that)."""
    def script(srv: FakeServer, sid: int):
        sent = _sent(srv, sid)
        if sent == b"hold":
            return
        srv.answer(sid, b"ans:" + sent)
        srv.flush()
        if sent == b"data-late":
            srv.transport.write(h2call.frame(h2call.DATA, 0, sid, b"\x00\x00\x00\x00\x01x"))
        elif sent == b"headers-late":
            srv.transport.write(h2call.frame(h2call.HEADERS, h2call.END_HEADERS, sid, b"\x88"))

    server, servers, chan = await _fake(script)
    written: list[bytes] = []
    try:
        assert await chan.call(b"x", 5) == b"ans:x"
        conn = chan._conns[0]
        write = conn.transport.write
        conn.transport.write = lambda data: (written.append(bytes(data)), write(data))[1]
        resets = lambda: [(int.from_bytes(w[5:9], "big"), int.from_bytes(w[9:13], "big"))  # noqa: E731
                          for w in written if len(w) == 13 and w[3] == h2call.RST_STREAM]
        assert await chan.call(b"data-late", 5) == b"ans:data-late"
        sid = conn.next_sid - 2
        await _until(lambda: resets(), "the RST_STREAM")
        assert resets() == [(sid, h2call.STREAM_CLOSED)] and not conn.closed
        held = asyncio.ensure_future(chan.call(b"hold", 5, cancel=True))
        await asyncio.sleep(0.05)
        held.cancel()  # reset by us: what Triton still sends on it is dropped
        await _until(lambda: len(resets()) == 2, "the cancel")
        sid = conn.next_sid - 2
        trailers = h2call.frame(h2call.HEADERS, h2call.END_HEADERS | h2call.END_STREAM, sid, b"\x88")
        servers[0].transport.write(h2call.frame(h2call.DATA, 0, sid, b"\x00\x00\x00\x00\x01y") + trailers + trailers)
        assert await chan.call(b"after", 5) == b"ans:after"
        assert len(resets()) == 2 and not conn.closed and conn.past.get(sid) == h2call.LOCAL
        assert await chan.call(b"headers-late", 5) == b"ans:headers-late"
        sid = conn.next_sid - 2
        await _until(lambda: len(resets()) == 3, "the RST_STREAM")
        assert resets()[2] == (sid, h2call.STREAM_CLOSED)
        assert await chan.call(b"more", 5) == b"ans:more" and not conn.closed
    finally:
        await chan.close()
        server.close()


async def test_an_answer_before_the_whole_request_closes_our_half():
    """Triton answering (END_STREAM) while the request's bytes still wait for its window: what
    waits is dropped and the stream reset (NO_ERROR), so Triton's half does not stay open."""
    def script(srv: FakeServer, sid: int):
        srv.answer(sid, b"early", status=8 if srv.early else 0)  # (early: at the headers, as a size check would)

    server, servers, chan = await _fake(script)
    try:
        assert await chan.call(b"x" * 10, 5) == b"early"  # (its DATA came after the answer: the connection made)
        servers[0].early = True
        conn = chan._conns[0]
        written: list[bytes] = []
        write = conn.transport.write
        conn.transport.write = lambda data: (written.append(bytes(data)), write(data))[1]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await chan.call(b"y" * (1 << 20), 5)  # past the 64 KiB the h2 library's window allows
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        sid = conn.next_sid - 2
        assert h2call.frame(h2call.RST_STREAM, 0, sid, bytes(4)) in written and not conn.pending
        await _until(lambda: any(isinstance(e, h2.events.StreamReset) and e.stream_id == sid
                                 for e in servers[0].events), "the reset read")
    finally:
        await chan.close()
        server.close()
