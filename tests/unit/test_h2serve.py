"""gateway/h2/server.py: a gRPC server of HTTP/2 frames on the loop answers as grpc.aio's does.

The same generic handlers are served by grpc.aio's server and by ``h2serve.Server``; the real
grpcio client calls both and must hear the same thing (answers, codes, details, trailing metadata
with ``-bin`` values, compressed requests, large answers through the flow-control windows, the
four behaviour kinds, deadlines). A client written with the ``h2`` library then plays what grpc's
client does rarely or never: a bad preface, PINGs (and too many of them), a client window that
stays shut, RST_STREAM mid-call, streams over MAX_CONCURRENT_STREAMS, and GOAWAY while calls are in
flight (``stop``: they finish within the grace).
"""

from __future__ import annotations

import asyncio
import gzip
import struct

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
from hpack import Decoder

from gateway.h2 import rpc as h2rpc
from gateway.h2 import server as h2serve
from tests.support import free_port

SERVICE = "t.S"
LIMIT = 1 << 20


class Handlers:
    """The services both servers run; what the handlers saw and whether they were cancelled."""

    def __init__(self):
        self.seen: list = []
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def echo(self, request: bytes, context):
        self.seen.append((context.invocation_metadata(), context.time_remaining()))
        context.set_trailing_metadata((("x-request-id", "r1"), ("k-bin", b"\x00\x01\xff")))
        if request == b"abort":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad \u00e9 100% \n x",
                                (("x-request-id", "r2"), ("d-bin", b"\xfe")))
        if request == b"raise":
            raise ValueError("boom")
        if request == b"code":
            context.set_code(grpc.StatusCode.NOT_FOUND)
            context.set_details("set, not raised")
        if request.startswith(b"big"):
            return b"y" * int(request[3:])
        return request

    async def hold(self, request: bytes, context):
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return b"released"

    async def many(self, request: bytes, context):
        count, size = map(int, request.split(b","))
        for i in range(count):
            yield bytes([65 + i % 26]) * size

    async def written(self, request: bytes, context):
        for part in request.split(b","):
            await context.write(part)

    async def total(self, requests, context):
        return b"+".join([r async for r in requests])

    async def bidi(self, requests, context):
        async for r in requests:
            if r == b"stop":
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stopped")
            yield r.upper()

    def generic(self):
        return grpc.method_handlers_generic_handler(SERVICE, {
            "Echo": grpc.unary_unary_rpc_method_handler(self.echo),
            "Hold": grpc.unary_unary_rpc_method_handler(self.hold),
            "Many": grpc.unary_stream_rpc_method_handler(self.many),
            "Written": grpc.unary_stream_rpc_method_handler(self.written),
            "Total": grpc.stream_unary_rpc_method_handler(self.total),
            "Bidi": grpc.stream_stream_rpc_method_handler(self.bidi)})


async def _h2_server(handlers: Handlers, max_streams: int = 100, min_ping: float = 10.0) -> h2serve.Server:
    import socket

    server = h2serve.Server(LIMIT, max_streams, min_ping)
    server.add_generic_rpc_handlers((handlers.generic(),))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await server.start(sock)
    return server


@pytest.fixture
async def both():
    """((grpc.aio channel to grpc.aio's server, to h2serve's), their Handlers, the h2serve Server)."""
    ha, hb = Handlers(), Handlers()
    aio = grpc.aio.server(options=[("grpc.max_receive_message_length", LIMIT), ("grpc.max_send_message_length", -1)])
    aio.add_generic_rpc_handlers((ha.generic(),))
    port = free_port()
    aio.add_insecure_port(f"127.0.0.1:{port}")
    await aio.start()
    h2s = await _h2_server(hb)
    opts = [("grpc.max_receive_message_length", -1)]
    channels = (grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=opts),
                grpc.aio.insecure_channel(f"127.0.0.1:{h2s.port}", options=opts))
    try:
        yield channels, (ha, hb), h2s
    finally:
        for c in channels:
            await c.close()
        await aio.stop(0)
        await h2s.stop(0)


async def _outcome(call):
    """(answers, code, details, trailing metadata) of a finished call, errors included."""
    answers = []
    try:
        got = await call
        answers = [got]
    except grpc.aio.AioRpcError as err:
        return answers, err.code(), err.details(), tuple(err.trailing_metadata() or ())
    return answers, await call.code(), await call.details(), tuple(await call.trailing_metadata() or ())


async def _stream_outcome(call):
    answers = []
    try:
        async for item in call:
            answers.append(item)
    except grpc.aio.AioRpcError as err:
        return answers, err.code(), err.details(), tuple(err.trailing_metadata() or ())
    return answers, await call.code(), await call.details(), tuple(await call.trailing_metadata() or ())


async def _requests(*items: bytes):
    for item in items:
        yield item


UNARY = [b"hello", b"", b"abort", b"raise", b"code", b"big3000000", b"x" * (LIMIT + 1), b"z" * LIMIT]


async def test_unary_calls_answer_as_grpc_aio(both):
    channels, _, _ = both
    for request in UNARY:
        got = [await _outcome(ch.unary_unary(f"/{SERVICE}/Echo")(request, timeout=10)) for ch in channels]
        assert got[0] == got[1], request[:20]
    assert got[0][1] is grpc.StatusCode.OK


async def test_errors_as_grpc_aio_words_them(both):
    channels, _, _ = both
    for ch in channels:
        _, code, details, trailing = await _outcome(ch.unary_unary(f"/{SERVICE}/Echo")(b"abort", timeout=10))
        assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "bad \u00e9 100% \n x")
        assert trailing == (("x-request-id", "r2"), ("d-bin", b"\xfe"))
        _, code, details, _ = await _outcome(ch.unary_unary(f"/{SERVICE}/Echo")(b"x" * (LIMIT + 1), timeout=10))
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details == f"SERVER: Received message larger than max ({LIMIT + 1} vs. {LIMIT})"
        _, code, details, _ = await _outcome(ch.unary_unary("/t.S/Nope")(b"", timeout=10))
        assert (code, details) == (grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


async def test_metadata_and_deadline_reach_the_handler_as_with_grpc_aio(both):
    channels, handlers, _ = both
    md = (("x-a", "1"), ("b-bin", b"\x00\x02"), ("authorization", "Bearer k"))
    for ch in channels:
        await ch.unary_unary(f"/{SERVICE}/Echo")(b"m", timeout=7, metadata=md)
        await ch.unary_unary(f"/{SERVICE}/Echo")(b"m", metadata=md)
    (aio_md, aio_left), (aio_md2, aio_none) = handlers[0].seen
    (h2_md, h2_left), (h2_md2, h2_none) = handlers[1].seen
    assert [tuple(m) for m in aio_md] == [tuple(m) for m in h2_md] == [tuple(m) for m in h2_md2]
    assert aio_none is None and h2_none is None
    assert 6 < h2_left <= 7.1 and 6 < aio_left <= 7.1  # grpc-timeout is rounded up


async def test_compressed_requests_as_grpc_aio(both):
    channels, _, _ = both
    for compression in (grpc.Compression.Gzip, grpc.Compression.Deflate):
        got = [await _outcome(ch.unary_unary(f"/{SERVICE}/Echo")(b"squeeze " * 100, timeout=10,
                                                                 compression=compression)) for ch in channels]
        assert got[0] == got[1]
        assert got[1][0] == [b"squeeze " * 100]


async def test_streams_of_every_kind_as_grpc_aio(both):
    channels, _, _ = both
    cases = [
        lambda ch: _stream_outcome(ch.unary_stream(f"/{SERVICE}/Many")(b"5,3", timeout=10)),
        lambda ch: _stream_outcome(ch.unary_stream(f"/{SERVICE}/Many")(b"3,2000000", timeout=10)),
        lambda ch: _stream_outcome(ch.unary_stream(f"/{SERVICE}/Written")(b"a,bb,ccc", timeout=10)),
        lambda ch: _outcome(ch.stream_unary(f"/{SERVICE}/Total")(_requests(b"a", b"b", b"c"), timeout=10)),
        lambda ch: _outcome(ch.stream_unary(f"/{SERVICE}/Total")(_requests(), timeout=10)),
        lambda ch: _stream_outcome(ch.stream_stream(f"/{SERVICE}/Bidi")(_requests(b"a", b"bc"), timeout=10)),
        lambda ch: _stream_outcome(ch.stream_stream(f"/{SERVICE}/Bidi")(_requests(b"a", b"stop"), timeout=10)),
    ]
    for i, case in enumerate(cases):
        got = [await case(ch) for ch in channels]
        assert got[0] == got[1], i


async def test_deadline_cancels_the_handler_as_grpc_aio(both):
    channels, handlers, _ = both
    for ch, h in zip(channels, handlers, strict=True):
        _, code, _, _ = await _outcome(ch.unary_unary(f"/{SERVICE}/Hold")(b"", timeout=0.3))
        assert code is grpc.StatusCode.DEADLINE_EXCEEDED
        await asyncio.wait_for(h.cancelled.wait(), 5)


async def test_a_cancelled_client_call_cancels_the_handler(both):
    channels, handlers, h2s = both
    call = channels[1].unary_unary(f"/{SERVICE}/Hold")(b"", timeout=30)
    await asyncio.wait_for(handlers[1].started.wait(), 5)
    call.cancel()
    await asyncio.wait_for(handlers[1].cancelled.wait(), 5)
    await asyncio.sleep(0.05)
    assert not any(c.calls for c in h2s.connections)


async def test_a_cancelled_client_call_leaves_a_unary_handler_to_finish_without_cancel_unary():
    """``cancel_unary`` False (upstream.cancel streams or none): the client's reset ends the call for
    the client, the unary handler runs on to its end, its answer is dropped; a stream is cancelled."""
    import socket

    handlers = Handlers()
    server = h2serve.Server(LIMIT, 100, 10.0, True, cancel_unary=False)
    server.add_generic_rpc_handlers((handlers.generic(),))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await server.start(sock)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        call = channel.unary_unary(f"/{SERVICE}/Hold")(b"", timeout=30)
        await asyncio.wait_for(handlers.started.wait(), 5)
        call.cancel()
        await asyncio.sleep(0.2)
        assert not handlers.cancelled.is_set()  # left to finish
        handlers.release.set()
        await asyncio.sleep(0.1)
        assert not handlers.cancelled.is_set()
        assert await channel.unary_unary(f"/{SERVICE}/Echo")(b"after", timeout=5) == b"after"
        assert not any(c.calls for c in server.connections)
    finally:
        await channel.close()
        await server.stop(0)


def test_grpc_message_is_percent_encoded_as_grpc_writes_it():
    assert h2rpc.percent_encode("bad \u00e9 100% \n x") == b"bad %C3%A9 100%25 %0A x"
    assert h2rpc.percent_encode("plain ~ text") == b"plain ~ text"


def test_grpc_timeout_units():
    assert h2rpc.timeout("5S") == 5.0 and h2rpc.timeout("250m") == 0.25 and h2rpc.timeout("2M") == 120.0
    assert h2rpc.timeout("1H") == 3600.0 and h2rpc.timeout("7u") == pytest.approx(7e-6)
    assert h2rpc.timeout("x") is None and h2rpc.timeout("5") is None and h2rpc.timeout("S") is None


# -- a raw client (the h2 library) --------------------------------------------------------------

class Raw:
    def __init__(self, reader, writer, conn):
        self.reader, self.writer, self.conn = reader, writer, conn

    @classmethod
    async def open(cls, port: int, window: int | None = None) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        if window is not None:
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        raw = cls(reader, writer, conn)
        raw.flush()
        return raw

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    def call(self, sid: int, method: str, body: bytes | None, end: bool = True, extra=()) -> None:
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", f"/{SERVICE}/{method}"),
                                     (":authority", "t"), ("content-type", "application/grpc"), ("te", "trailers"),
                                     *extra])
        if body is not None:
            self.conn.send_data(sid, b"\x00" + struct.pack(">I", len(body)) + body, end_stream=end)
        self.flush()

    async def events(self, until, timeout: float = 5.0, ack: bool = True) -> list:
        """Events read until ``until(events)`` is true (or the connection ends)."""
        got: list = []
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not until(got):
            data = await asyncio.wait_for(self.reader.read(1 << 20), max(0.01, end - loop.time()))
            if not data:
                got.append("closed")
                break
            for ev in self.conn.receive_data(data):
                got.append(ev)
                if ack and isinstance(ev, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            self.flush()
        return got

    def close(self) -> None:
        self.writer.close()


def _ended(sid: int):
    return lambda evs: "closed" in evs or any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
                                              and e.stream_id == sid for e in evs)


def _headers(evs, sid: int) -> dict:
    out = {}
    for e in evs:
        if isinstance(e, (h2.events.ResponseReceived, h2.events.TrailersReceived)) and e.stream_id == sid:
            out.update(dict(e.headers))
    return out


@pytest.fixture
async def served():
    handlers = Handlers()
    server = await _h2_server(handlers, max_streams=2, min_ping=10.0)
    raws: list[Raw] = []

    async def client(window: int | None = None) -> Raw:
        raws.append(await Raw.open(server.port, window))
        return raws[-1]

    try:
        yield server, handlers, client
    finally:
        for r in raws:
            r.close()
        await server.stop(0)


async def test_a_bad_preface_ends_the_connection(served):
    server, _, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while chunk := await asyncio.wait_for(reader.read(1 << 16), 5):
        data += chunk
    # our SETTINGS, then GOAWAY (type 7) PROTOCOL_ERROR, then the end of the connection
    assert b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + b"\x00" * 4 + b"\x00\x00\x00\x01" in data
    writer.close()


async def test_settings_and_pings_are_acknowledged(served):
    _, _, client = served
    raw = await client()
    raw.conn.ping(b"12345678")
    raw.flush()
    evs = await raw.events(lambda e: any(isinstance(x, h2.events.PingAckReceived) for x in e))
    assert [e.ping_data for e in evs if isinstance(e, h2.events.PingAckReceived)] == [b"12345678"]
    changed = [e for e in evs if isinstance(e, h2.events.RemoteSettingsChanged)][0].changed_settings
    assert changed[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS].new_value == 2


async def test_too_many_pings_get_goaway_enhance_your_calm(served):
    _, _, client = served
    raw = await client()
    for i in range(4):
        raw.conn.ping(b"%08d" % i)
    raw.flush()
    evs = await raw.events(lambda e: any(isinstance(x, h2.events.ConnectionTerminated) for x in e) or "closed" in e)
    gone = [e for e in evs if isinstance(e, h2.events.ConnectionTerminated)][0]
    assert gone.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM and gone.additional_data == b"too_many_pings"
    assert len([e for e in evs if isinstance(e, h2.events.PingAckReceived)]) == 3


async def test_answers_wait_for_the_clients_window(served):
    _, _, client = served
    raw = await client(window=1000)
    raw.call(1, "Echo", b"big5000")
    evs = await raw.events(lambda e: sum(len(x.data) for x in e if isinstance(x, h2.events.DataReceived)) >= 1000,
                           ack=False)
    assert not _ended(1)(evs)  # stopped at the window: 1000 bytes, no trailers
    await asyncio.sleep(0.1)
    raw.conn.increment_flow_control_window(1 << 20, 1)
    raw.conn.increment_flow_control_window(1 << 20)
    raw.flush()
    evs += await raw.events(_ended(1))
    body = b"".join(e.data for e in evs if isinstance(e, h2.events.DataReceived))
    assert body == b"\x00" + struct.pack(">I", 5000) + b"y" * 5000
    assert _headers(evs, 1)["grpc-status"] == "0"


async def test_rst_stream_mid_call_cancels_the_handler(served):
    server, handlers, client = served
    raw = await client()
    raw.call(1, "Hold", b"")
    await asyncio.wait_for(handlers.started.wait(), 5)
    raw.conn.reset_stream(1, h2.errors.ErrorCodes.CANCEL)
    raw.flush()
    await asyncio.wait_for(handlers.cancelled.wait(), 5)
    raw.call(3, "Echo", b"after")  # the connection goes on
    evs = await raw.events(_ended(3))
    assert _headers(evs, 3)["grpc-status"] == "0"


async def test_unknown_method_oversized_and_bad_encoding_in_grpc_cores_words(served):
    _, _, client = served
    raw = await client()
    raw.call(1, "Nope", b"")
    raw.call(3, "Echo", b"x" * 10, extra=[("grpc-encoding", "snappy")])
    raw.conn.send_headers(5, [(":method", "POST"), (":scheme", "http"), (":path", f"/{SERVICE}/Echo"),
                              (":authority", "t"), ("content-type", "application/grpc"), ("te", "trailers")])
    raw.conn.send_data(5, b"\x00" + struct.pack(">I", LIMIT + 5) + b"x" * 1000)  # a message too large, still coming
    raw.flush()
    evs = await raw.events(lambda e: all(_ended(s)(e) for s in (1, 3, 5)))
    assert _headers(evs, 1)["grpc-status"] == "12" and _headers(evs, 1)["grpc-message"] == "Method not found!"
    assert _headers(evs, 3)["grpc-status"] == "13"
    assert _headers(evs, 3)["grpc-message"] == "Error parsing 'grpc-encoding' metadata"
    assert _headers(evs, 5)["grpc-status"] == "8"
    assert _headers(evs, 5)["grpc-message"] == f"SERVER: Received message larger than max ({LIMIT + 5} vs. {LIMIT})"


async def test_gzip_request_and_compressed_flag_without_encoding(served):
    _, _, client = served
    raw = await client()
    packed = gzip.compress(b"zipped")
    raw.conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", f"/{SERVICE}/Echo"),
                              (":authority", "t"), ("content-type", "application/grpc"), ("grpc-encoding", "gzip")])
    raw.conn.send_data(1, b"\x01" + struct.pack(">I", len(packed)) + packed, end_stream=True)
    raw.conn.send_headers(3, [(":method", "POST"), (":scheme", "http"), (":path", f"/{SERVICE}/Echo"),
                              (":authority", "t"), ("content-type", "application/grpc")])
    raw.conn.send_data(3, b"\x01\x00\x00\x00\x02hi", end_stream=True)
    raw.flush()
    evs = await raw.events(lambda e: _ended(1)(e) and _ended(3)(e))
    assert b"".join(e.data for e in evs if isinstance(e, h2.events.DataReceived) and e.stream_id == 1) == \
        b"\x00\x00\x00\x00\x06zipped"
    assert _headers(evs, 3)["grpc-message"] == "Compression bit set but no encoding configured"


async def test_streams_over_the_limit_are_refused(served):
    _, handlers, client = served
    raw = await client()
    for sid in (1, 3, 5):  # sent before the server's SETTINGS (MAX_CONCURRENT_STREAMS 2) are read
        raw.call(sid, "Hold", b"")
    evs = await raw.events(lambda e: any(isinstance(x, h2.events.StreamReset) for x in e))
    reset = [e for e in evs if isinstance(e, h2.events.StreamReset)]
    assert [(e.stream_id, e.error_code) for e in reset] == [(5, h2.errors.ErrorCodes.REFUSED_STREAM)]
    handlers.release.set()
    evs = await raw.events(lambda e: _ended(1)(e) and _ended(3)(e))
    assert _headers(evs, 1)["grpc-status"] == _headers(evs, 3)["grpc-status"] == "0"


async def _frames(raw: Raw, until, timeout: float = 5.0) -> list[tuple[int, int, int, bytes]]:
    """Frames read as they are (the h2 library takes nothing after a GOAWAY): (kind, flags, stream, payload)."""
    got, buf = [], b""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not until(got):
        data = await asyncio.wait_for(raw.reader.read(1 << 20), max(0.01, end - loop.time()))
        if not data:
            break
        buf += data
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            got.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]))
            buf = buf[9 + n:]
    return got


def _kinds(kind: int):
    return lambda got: any(f[0] == kind for f in got)


async def _settled(raw: Raw) -> None:
    """The connection's preamble read (SETTINGS and its ack), through the h2 library."""
    await raw.events(lambda e: any(isinstance(x, h2.events.SettingsAcknowledged) for x in e))


async def _holding(served) -> Raw:
    """A client whose call (stream 1) is held in its handler."""
    _, handlers, client = served
    raw = await client()
    await _settled(raw)
    raw.call(1, "Hold", b"")
    await asyncio.wait_for(handlers.started.wait(), 5)
    return raw


async def test_stop_sends_goaway_and_lets_calls_in_flight_finish(served):
    server, handlers, _ = served
    raw = await _holding(served)
    stopping = asyncio.ensure_future(server.stop(5.0))
    got = await _frames(raw, _kinds(7))
    goaway = [f for f in got if f[0] == 7][0][3]
    assert struct.unpack(">II", goaway[:8]) == (1, 0)  # last stream 1, NO_ERROR
    await asyncio.sleep(0.1)
    assert not stopping.done()
    handlers.release.set()
    got = await _frames(raw, lambda g: any(f[0] == 1 and f[1] & 1 for f in g))  # trailers: HEADERS END_STREAM
    assert b"released" in b"".join(f[3] for f in got if f[0] == 0)
    trailers = dict(Decoder().decode([f for f in got if f[0] == 1][-1][3]))
    assert trailers["grpc-status"] == "0"
    await asyncio.wait_for(stopping, 5)
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port)


async def test_stop_cancels_calls_past_the_grace(served):
    server, handlers, _ = served
    raw = await _holding(served)
    await server.stop(0.1)
    assert handlers.cancelled.is_set()
    got = await _frames(raw, lambda g: any(f[0] == 1 and f[1] & 1 for f in g))
    assert dict(Decoder().decode([f for f in got if f[0] == 1][-1][3]))["grpc-status"] == "1"


@pytest.mark.parametrize("setting", ["h2", "grpc"])
async def test_the_worker_serves_its_grpc_listeners_as_grpc_server_says(setting):
    from gateway.observe import metrics
    from tests.fakes import FakeUpstream
    from tests.support import running_worker

    kind = h2serve.Server if setting == "h2" else grpc.aio.Server
    async with running_worker({"tfserving_grpc": free_port(), "v2_grpc": free_port()}, "127.0.0.1:1",
                              upstream_factory=lambda _s: FakeUpstream(), GRPC_SERVER=setting) as (worker, _):
        assert len(worker._grpc) == 2 and all(isinstance(s, kind) for s in worker._grpc)
        assert metrics.FAST_PATH.labels("grpc_server_h2")._value.get() == (1 if setting == "h2" else 0)
