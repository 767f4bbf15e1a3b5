"""A plain-TCP gRPC listener written as HTTP/2 frames on the worker's event loop (``grpc_server: h2``).

grpc.aio's server crosses threads: grpc core's poller thread reads the socket, then wakes the loop
for each batch of a call's operations. Here an ``asyncio.Protocol`` per connection parses the
frames in ``data_received`` and each call is one task running the handler the listener registered,
found through the same generic handlers grpc's server asks (``GenericRpcHandler.service`` ->
``RpcMethodHandler``, its (de)serializers and behaviour kind), so every service a listener's
``attach`` adds (TF Serving, GRPS, the V2 passthrough, grpc.health.v1) is served unchanged. Its
context (gateway/h2/rpc.py) is what the handlers use of ``grpc.aio.ServicerContext``. A unary
handler may also carry ``now(rpc) -> bool``: the call begun at once from ``data_received`` and
answered from callbacks (``Rpc.reply``, ``Rpc.end``), its ``rpc.task`` a stand-in with ``done`` and
``cancel`` (gateway/edge's ``unary_now``); False, or a client with answers queued past SEND_CAP:
the task, as for any other.

What the client gets is what grpc.aio's server gives it:

    connection    the preface checked (else GOAWAY PROTOCOL_ERROR; none within PREFACE_TIMEOUT:
                  closed), SETTINGS (our MAX_CONCURRENT_STREAMS, windows, frame size) and their acks,
                  PINGs acked, every frame checked (gateway/h2/wire.py ``Framing``), flow control
                  both ways (below), HPACK with ``hpack``
    holding       what a client sends is counted against the windows we advertised (past them:
                  FLOW_CONTROL_ERROR) and given back as it leaves us: a unary request's stream
                  window as its bytes come (one message, a second refused at once), a streaming
                  request's as its handler reads its messages; the connection's window once the
                  bytes held for the connection's calls are under HOLD (the one call whose message
                  is the largest still being read is given it regardless, so a message up to
                  ``max_message`` always gets through; a message larger than a stream's window is
                  gathered by one call at a time, its buffer handed over without a copy). Answers
                  wait for the client's windows in the connection core (gateway/h2/core.py: stream
                  states, the send scheduler); past SEND_CAP of them queued, new calls are refused
                  and accepted ones wait before their handler starts; nothing more is read while
                  the transport's buffer is over its high-water mark.
    a call        ``:path`` looked up (unknown: UNIMPLEMENTED "Method not found!"); its handler's
                  task started once the request is whole (a streaming request: at its first
                  message, as grpc.aio's handler starts in effect, so a client still writing is
                  not answered before its first write went); ``grpc-timeout``
                  is the handler's deadline (``time_remaining``; past it the handler is cancelled and
                  the client hears DEADLINE_EXCEEDED); a message over ``max_message`` is
                  RESOURCE_EXHAUSTED in grpc core's words; gzip and deflate requests decompressed,
                  another ``grpc-encoding`` refused as grpc core refuses it; the client's RST_STREAM
                  cancels the handler's task
    keepalive     grpc core's ping policy: a client pinging more often than ``min_ping_interval``
                  (with no answer sent between) gets a strike, the third: GOAWAY ENHANCE_YOUR_CALM
                  "too_many_pings"
    stopping      ``stop(grace)``: the listening socket closed, GOAWAY on every connection (later
                  streams refused: grpc clients send them again elsewhere), calls in flight finish
                  within ``grace``, then are cancelled (CANCELLED), the connections closed

Plain TCP only, without tracing's interceptors: TLS listeners and traced workers keep grpc.aio
(gateway/app.py decides). SO_REUSEPORT comes with the socket the worker binds.
"""

from __future__ import annotations

import asyncio
import collections
import io
import socket
import time
import zlib
from typing import NamedTuple

import grpc

from gateway.h2 import rpc as h2rpc
from gateway.h2.core import CLOSED, LOCAL, REMOTE, SEND_CAP, Closed, Core
from gateway.h2.rpc import RESPONSE_HEADERS, TRAILERS_ONLY, Rpc, trailers
from gateway.h2.wire import (
    ACK,
    COMPRESSION_ERROR,
    DATA,
    DEFAULT_WINDOW,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    NO_ERROR,
    PING,
    PREFACE,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RESETS,
    RST_STREAM,
    SELF_DEPENDENT,
    STREAM_CLOSED,
    U32,
    WINDOW_UPDATE,
    Decoder,
    HeaderListTooLarge,
    Headers,
    frame,
    header_frames,
    refused,
    settings,
)
from gateway.observe import fastpaths

ON = fastpaths.declare("grpc_server_h2", [] if Decoder is not None else ["hpack"])
STREAM_WINDOW = 1 << 20  # what a client may send on one stream before we read it
CONN_WINDOW = 16 << 20  # and on the connection (Framing.CONN_WINDOW)
HOLD = 16 << 20  # request bytes held per connection past which its window is given back only to the largest message
MAX_PING_STRIKES = 2  # grpc core's default (grpc.http2.max_ping_strikes)
PREFACE_TIMEOUT = 10.0  # seconds a new connection has to send the HTTP/2 preface
BIG = STREAM_WINDOW - 5  # a request message larger than a stream's window: gathered one at a time per connection
# SEND_CAP (gateway/h2/core.py): answer bytes queued per connection for a client that does not take them;
# past it, new calls are refused (REFUSED_STREAM) and the calls accepted wait before their handler starts


async def _unimplemented(_request, context) -> None:
    await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


# an unknown method: a call like the others (it counts against MAX_CONCURRENT_STREAMS until answered)
UNIMPLEMENTED = grpc.stream_unary_rpc_method_handler(_unimplemented)


class _CallDetails(NamedTuple):  # grpc.HandlerCallDetails
    method: str
    invocation_metadata: tuple


class Server:
    """The gRPC services of one listener, served on sockets the worker binds (``start``).
    ``max_message``: the largest request message (grpc.max_receive_message_length; None: any);
    ``max_streams``: calls in flight per connection; ``min_ping_interval`` (s) and
    ``permit_without_calls``: the keepalive policy asked of clients; ``cancel_unary``: a unary-unary
    call whose client went away has its handler cancelled (False: the handler runs on to its end or
    deadline and its answer is dropped; ``upstream.cancel`` streams or none, gateway/upstream/cancel.py)."""

    def __init__(self, max_message: int | None, max_streams: int, min_ping_interval: float = 10.0,
                 permit_without_calls: bool = True, cancel_unary: bool = True):
        self.cancel_unary = cancel_unary
        self.max_message = max_message if max_message is not None else (1 << 32)
        self.max_streams = max_streams
        self.min_ping_interval = min_ping_interval
        self.permit_without_calls = permit_without_calls
        self.connections: set[Connection] = set()
        self.stopping = False
        self._generic: list = []
        self._methods: dict[str, grpc.RpcMethodHandler | None] = {}
        self._server: asyncio.AbstractServer | None = None
        self.port = 0  # the port it listens on, once started

    # -- what a listener's attach calls (through grpchealth.ServiceNames) -------------------
    def add_generic_rpc_handlers(self, handlers) -> None:
        self._generic.extend(handlers)
        self._methods.clear()

    def add_registered_method_handlers(self, _service: str, _handlers) -> None:
        """Nothing: generated code adds the same methods as a generic handler too."""

    def lookup(self, method: str, metadata: tuple = ()) -> grpc.RpcMethodHandler | None:
        """The handler of ``method`` (a ``:path``), as grpc's server finds it: the first generic
        handler that serves it. Remembered per method (at most 1024 of them)."""
        try:
            return self._methods[method]
        except KeyError:
            pass
        details = _CallDetails(method, metadata)
        handler = None
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                break
        if len(self._methods) < 1024:
            self._methods[method] = handler
        return handler

    # -- running ----------------------------------------------------------------------------
    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self.port = sock.getsockname()[1]
        self._server = await loop.create_server(lambda: Connection(self), sock=sock)

    async def stop(self, grace: float | None) -> None:
        """GOAWAY to every client, the calls in flight given ``grace`` seconds, then cancelled."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.go_away()
        loop = asyncio.get_running_loop()
        end = loop.time() + (grace or 0.0)
        while any(c.calls for c in self.connections) and loop.time() < end:
            await asyncio.sleep(0.02)
        tasks = [t for c in list(self.connections) for t in c.cancel_calls()]
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        for conn in list(self.connections):
            conn.close()


class Connection(Core):
    """One client's HTTP/2 connection: its calls (``Rpc`` by stream id), windows and HPACK decoder."""

    CONN_WINDOW = CONN_WINDOW
    credit_on_read = False  # given back as the calls' bytes leave (``release``)

    def __init__(self, server: Server):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.calls: dict[int, Rpc] = {}
        self.by_id = self.calls
        self.last_sid = 0
        self.preface = False
        self.lost = False
        self.going_away = False
        self.pending: collections.deque[Rpc] = collections.deque()  # calls with answer bytes waiting for a window
        self.ping_strikes = 0
        self.last_ping = -1e18
        self._headers = Headers(h2rpc.read_metadata)
        self.held = 0  # request bytes held for the calls (partial and unread messages)
        self.deferred = 0  # connection window owed, held back while ``held`` is over HOLD
        self.lane: Rpc | None = None  # the call given window past HOLD (its message the largest being read)
        self.big: Rpc | None = None  # the one call gathering a message larger than BIG (in ``Rpc.big``)
        self.closed = Closed()  # the streams closed lately, each with the state it closed in
        self._preface_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        super().connection_made(transport)  # TCP_NODELAY
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"ipv6:[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"ipv4:{peer[0]}:{peer[1]}"
        self.server.connections.add(self)
        self.recv_window = self.CONN_WINDOW
        self._preface_timer = self.loop.call_later(PREFACE_TIMEOUT, self._preface_late)
        transport.write(settings((MAX_CONCURRENT_STREAMS, self.server.max_streams),
                                 (INITIAL_WINDOW_SIZE, STREAM_WINDOW), (MAX_FRAME_SIZE, self.MAX_FRAME))
                        + frame(WINDOW_UPDATE, 0, 0, U32.pack(self.CONN_WINDOW - DEFAULT_WINDOW)))
        if self.server.stopping:
            self.go_away()

    def connection_lost(self, exc) -> None:
        self.lost = True
        self.server.connections.discard(self)
        for rpc in list(self.calls.values()):
            self._cancelled(rpc)
        self.let_go()

    def data_received(self, data: bytes) -> None:
        if not self.preface:
            if self._buf:
                data, self._buf = self._buf + data, b""
            if len(data) < 24:
                if PREFACE.startswith(data):
                    self._buf = data
                    return
                return self.on_error(PROTOCOL_ERROR)
            if data[:24] != PREFACE:
                return self.on_error(PROTOCOL_ERROR)
            self.preface = True
            self._preface_timer.cancel()
            data = data[24:]
        self.frames(data)

    def _preface_late(self) -> None:
        if not self.preface and not self.lost:
            refused("preface_timeout")
            self.close()

    # -- frames read (wire.Framing) -------------------------------------------------------------
    def idle(self, sid: int) -> bool:
        return sid > self.last_sid or not sid & 1  # (even: we push nothing)

    def stream_error(self, sid: int, code: int) -> None:
        """RST_STREAM with ``code``; the call, if one, cancelled (what the client sends after: ignored)."""
        if self.lost:
            return
        self.transport.write(frame(RST_STREAM, 0, sid, U32.pack(code)))
        rpc = self.calls.get(sid)
        if rpc is not None:
            self._cancelled(rpc)
        if sid in self.closed:
            self.closed.add(sid, LOCAL)  # closed by us: what the client still sends on it is dropped

    def on_data(self, sid: int, flags: int, payload: bytes, length: int) -> None:
        rpc = self.calls.get(sid)
        if rpc is None or rpc.state & REMOTE:
            self.credit(len(payload))  # nothing of it kept (the padding was given back)
            if rpc is not None:  # half-closed (remote): the client ended it already
                return self.stream_error(sid, STREAM_CLOSED)
            return self._late(sid, flags)
        rpc.inwin -= length
        if rpc.inwin < 0:
            self.credit(len(payload))
            return self.stream_error(sid, FLOW_CONTROL_ERROR)
        self._data(rpc, payload, length)
        if flags & END_STREAM and not rpc.state & LOCAL:
            self._half_close(rpc)

    def _late(self, sid: int, flags: int) -> None:
        """DATA on a stream that is not open: idle, a connection error; one both ends closed,
        STREAM_CLOSED; one we ended (answered, or reset) while the client was still sending,
        dropped."""
        if self.idle(sid):
            return self.on_error(PROTOCOL_ERROR)
        state = self.closed.get(sid)
        if state == CLOSED:
            self.stream_error(sid, STREAM_CLOSED)
        elif state is not None and flags & END_STREAM:
            self.closed.ended(sid)

    def on_reset(self, sid: int, code: int) -> None:
        rpc = self.calls.get(sid)
        if rpc is not None:
            if self.flood(RESETS):  # Rapid Reset (CVE-2023-44487)
                return
            rpc.state |= REMOTE  # the client closed it: what it sends on it after is STREAM_CLOSED
            self._cancelled(rpc)

    # GOAWAY from the client: it opens no more streams, those in flight go on (Framing.on_goaway)

    def on_ping(self, payload: bytes, ack: bool) -> None:
        if not ack:
            self._ping(payload)

    def _ping(self, payload: bytes) -> None:
        """Acked; grpc core's policy: a ping sooner than ``min_ping_interval`` after the last one
        (nothing answered between) is a strike, too many of them ends the connection."""
        now = time.monotonic()
        server = self.server
        if not self.calls and not server.permit_without_calls:
            self.ping_strikes += 1
        elif now - self.last_ping < server.min_ping_interval:
            self.ping_strikes += 1
        self.last_ping = now
        if self.ping_strikes > MAX_PING_STRIKES:
            refused("too_many_pings")
            self.goaway(ENHANCE_YOUR_CALM, b"too_many_pings")
            return self.close()
        self.transport.write(frame(PING, ACK, 0, payload))

    def on_headers(self, sid: int, flags: int, block: bytes) -> None:
        try:
            own, metadata = self._headers.decode(block)
        except HeaderListTooLarge:  # an HPACK bomb
            return self.calm("header_list")
        except Exception:  # noqa: BLE001 - hpack's errors: the connection's table is lost
            return self.on_error(COMPRESSION_ERROR)
        end = flags & END_STREAM
        rpc = self.calls.get(sid)
        if rpc is not None:  # trailers from the client: only their END_STREAM counts
            if rpc.state & REMOTE:
                return self.stream_error(sid, STREAM_CLOSED)
            if not end or any(key[0] == ":" for key in own):  # trailers end the stream, without pseudo-headers
                return self.stream_error(sid, PROTOCOL_ERROR)
            if not rpc.state & LOCAL:
                self._half_close(rpc)
            return
        if not sid & 1:
            return self.on_error(PROTOCOL_ERROR)
        if sid <= self.last_sid:
            state = self.closed.get(sid)
            if state is None:  # a new stream's id below one already used
                return self.on_error(PROTOCOL_ERROR)
            if state == CLOSED:
                return self.on_error(STREAM_CLOSED)
            if end:  # the trailers of a stream we answered already
                self.closed.ended(sid)
            return
        self.last_sid = sid
        if "!bad" in own or flags & SELF_DEPENDENT:  # a malformed request (RFC 9113 8.1.1, 8.2, 8.3.1)
            self.closed.add(sid, LOCAL | REMOTE if end else LOCAL)
            return self.stream_error(sid, PROTOCOL_ERROR)
        if self.going_away:
            return self._refused(sid)
        if len(self.calls) >= self.server.max_streams:
            return self._refused(sid, "max_streams")
        if self.queued > SEND_CAP:  # a client that does not take its answers gets no new calls
            return self._refused(sid, "send_queue")
        method = own.get(":path", "")
        handler = self.server.lookup(method, metadata) or UNIMPLEMENTED
        encoding = own.get("grpc-encoding")
        if encoding == "identity":
            encoding = None
        elif encoding is not None and encoding not in ("gzip", "deflate"):
            return self._refuse(sid, grpc.StatusCode.INTERNAL, "Error parsing 'grpc-encoding' metadata", end)
        deadline = h2rpc.deadline_of(own.get("grpc-timeout"))
        rpc = self.calls[sid] = Rpc(self, sid, method, handler, metadata, deadline, encoding, self.peer_window)
        rpc.inwin = STREAM_WINDOW
        if deadline is not None:
            loop = self.loop
            rpc.timer = loop.call_at(loop.time() + (deadline - time.monotonic()), self._expire, rpc)
        if end:
            self._half_close(rpc)

    def _refused(self, sid: int, reason: str = "") -> None:
        """A new stream refused before it began (RST_STREAM REFUSED_STREAM: the client may send it
        again elsewhere); with a ``reason``, counted (``gateway_h2_refused_total``) and as a reset
        against the Rapid Reset budget (past it: GOAWAY, nothing more written for this one)."""
        if reason:
            refused(reason)
            if self.flood(RESETS):
                return
        self.transport.write(frame(RST_STREAM, 0, sid, U32.pack(REFUSED_STREAM)))
        self.closed.add(sid, LOCAL)

    def _refuse(self, sid: int, code: grpc.StatusCode, details: str, end: int) -> None:
        """A call answered before it began (trailers-only). What the client still sends on it is
        dropped (no RST_STREAM: a grpc client still writing would fail its call with INTERNAL)."""
        self.transport.write(header_frames(sid, TRAILERS_ONLY + trailers(code, details, ()), True, self.peer_frame))
        self.closed.add(sid, LOCAL | REMOTE if end else LOCAL)

    def _data(self, rpc: Rpc, payload: bytes, length: int) -> None:
        """A request's bytes: whole messages to the call (decompressed), the rest kept. A message
        larger than BIG is gathered in a ``BytesIO`` (its bytes once: ``getvalue`` hands over the
        buffer itself), by one call of the connection at a time (``big``): another call announcing
        one is given no window back until it is its turn."""
        streaming = rpc.handler.request_streaming
        kept = len(payload)
        rpc.held += kept
        self.held += kept
        big = self.big
        free = self.held <= HOLD and big is None and self.queued <= SEND_CAP or rpc is big or self._free(rpc, payload)
        if free:
            self.conn_unacked += kept
            if self.conn_unacked >= CONN_WINDOW // 2:
                self.credit(0)
        else:
            self.deferred += kept
        if streaming:  # its window given back as the handler reads its messages (Rpc.read)
            rpc.unacked += length - kept
        else:
            rpc.unacked += length
            if rpc.unacked >= STREAM_WINDOW // 2 and free:
                self.window_back(rpc)
        limit = self.server.max_message
        if rpc.big is not None:
            payload = self._gather(rpc, payload, limit)
            if payload is None:  # the message not whole yet, or the call ended
                return
        if rpc.buf:  # a message begun in an earlier frame: the bytes gathered in one buffer
            rpc.buf += payload
            buf = rpc.buf
        else:
            buf = payload
        while len(buf) >= 5:
            size = U32.unpack_from(buf, 1)[0]
            if size > limit:
                return self._error(rpc, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                   f"SERVER: Received message larger than max ({size} vs. {limit})")
            if len(buf) < 5 + size:
                if size > BIG and self.big is None and self.queued <= SEND_CAP:  # gathered apart, its bytes once
                    gather = rpc.big = io.BytesIO()
                    gather.write(memoryview(buf)[5:])
                    rpc.need, rpc.flag = 5 + size - len(buf), buf[0]
                    self.big = rpc
                    buf = b""
                break
            msg = bytes(memoryview(buf)[5:5 + size]) if buf.__class__ is bytearray else buf[5:5 + size]  # one copy
            if buf[0]:
                if not self._message(rpc, 1, msg, limit):
                    return
            else:
                rpc.messages.append(msg)
            buf = buf[5 + size:]
            if not streaming and (buf or len(rpc.messages) > 1):  # a unary call takes one message
                return self._error(rpc, grpc.StatusCode.INTERNAL,
                                   "Unary call got more or less than one whole request messages")
        rpc.buf = b"" if not buf else buf if buf.__class__ is bytearray else bytearray(buf)
        if streaming and rpc.messages:
            if rpc.task is None:  # started with its first message, as grpc.aio's server starts it in effect
                self._start(rpc)
            elif rpc.reader is not None and not rpc.reader.done():
                rpc.reader.set_result(None)

    def _gather(self, rpc: Rpc, payload: bytes, limit: int) -> bytes | None:
        """``payload`` added to the large message ``rpc`` gathers; once it is whole, the message
        taken and what follows it returned (None: not whole yet, or the call ended)."""
        need = rpc.need
        if len(payload) < need:
            rpc.big.write(payload)
            rpc.need = need - len(payload)
            return None
        gather, rpc.big, self.big = rpc.big, None, None
        gather.write(memoryview(payload)[:need] if len(payload) > need else payload)
        msg = gather.getvalue()  # the buffer itself, not a copy
        del gather
        if not self._message(rpc, rpc.flag, msg, limit):
            return None
        rest = payload[need:]
        if not rpc.handler.request_streaming and (rest or len(rpc.messages) > 1):
            self._error(rpc, grpc.StatusCode.INTERNAL, "Unary call got more or less than one whole request messages")
            return None
        return rest

    def _message(self, rpc: Rpc, flag: int, msg: bytes, limit: int) -> bool:
        """One whole request message to the call (decompressed); False: the call ended in error."""
        if flag:
            if rpc.encoding is None:
                self._error(rpc, grpc.StatusCode.INTERNAL, "Compression bit set but no encoding configured")
                return False
            try:
                msg = h2rpc.decompress(rpc.encoding, msg, limit)
            except zlib.error:
                self._error(rpc, grpc.StatusCode.INTERNAL, "Failed to decompress the message")
                return False
            if len(msg) > limit:
                self._error(rpc, grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"SERVER: Received message larger than max ({len(msg)} vs. {limit})")
                return False
        rpc.messages.append(msg)
        return True

    def _free(self, rpc: Rpc, payload: bytes) -> bool:
        """Whether a call's bytes are given their window back (the slow path of ``_data``): under
        HOLD, unless a large message is being gathered by another call and this one announces one
        too (it waits for its turn); over HOLD, only the lane's."""
        if self.big is not None or self.queued > SEND_CAP:
            return self.held <= HOLD and not self._waits(rpc, payload)
        return self._lane(rpc)

    def _waits(self, rpc: Rpc, payload: bytes = b"") -> bool:
        """Whether ``rpc``'s message being read is larger than BIG while another call gathers one
        (or while the answers queued for the client are over SEND_CAP)."""
        if self.big is None and self.queued <= SEND_CAP or self.big is rpc:
            return False
        head = rpc.buf[:5] if len(rpc.buf) >= 5 else bytes(rpc.buf) + payload[:5]
        return len(head) >= 5 and U32.unpack_from(head, 1)[0] > BIG

    def _lane(self, rpc: Rpc) -> bool:
        """Over HOLD: whether ``rpc`` is the call whose message being read is the largest (the
        one given window regardless, so that one message always gets through)."""
        lane = self.lane
        if lane is None or lane.state & LOCAL or not lane.buf:
            lane = self.lane = max((r for r in self.calls.values() if r.buf), key=lambda r: len(r.buf), default=rpc)
        return lane is rpc

    def release(self, rpc: Rpc, n: int) -> None:
        """``n`` of a call's request bytes left us (read by its handler, or dropped): the
        connection's window owed is given back once what is held is under HOLD."""
        rpc.held -= n
        self.held -= n
        if rpc is self.lane and not rpc.buf:
            self.lane = None
        if self.deferred and self.held <= HOLD and not self.lost:
            owed, self.deferred = self.deferred, 0
            self.credit(owed)
            for other in self.calls.values():  # the unary calls' stream windows held back with it
                if (not other.handler.request_streaming and other.unacked >= STREAM_WINDOW // 2
                        and not other.state & LOCAL and not self._waits(other)):
                    self.window_back(other)

    def consumed(self, rpc: Rpc, n: int) -> None:
        """A streaming call's handler read ``n`` bytes of its messages: given back to the client."""
        partial = len(rpc.buf) if rpc.big is None else 5 + rpc.big.tell()
        self.release(rpc, max(0, min(n, rpc.held - partial)))
        rpc.unacked += n
        if rpc.unacked >= STREAM_WINDOW // 4 and not rpc.state & LOCAL:
            self.window_back(rpc)

    def _half_close(self, rpc: Rpc) -> None:
        rpc.state |= REMOTE
        if rpc.handler.request_streaming:
            if rpc.task is None:
                self._start(rpc)
            elif rpc.reader is not None and not rpc.reader.done():
                rpc.reader.set_result(None)
        elif len(rpc.messages) != 1 or rpc.buf or rpc.big is not None:
            self._error(rpc, grpc.StatusCode.INTERNAL, "Unary call got %s request messages"
                        % ("no" if not rpc.messages and not rpc.buf and rpc.big is None else "more or less than one whole"))
        else:
            self.held -= rpc.held  # the message is the handler's now
            rpc.held = 0
            if self.deferred or self.lane is rpc:
                self.release(rpc, 0)
            self._start(rpc)

    def _start(self, rpc: Rpc) -> None:
        now = getattr(rpc.handler, "now", None)  # a unary handler that answers from callbacks: no task
        if now is not None and self.queued <= SEND_CAP and now(rpc):
            return
        rpc.task = self.loop.create_task(h2rpc.serve(rpc))

    # -- a call's end ------------------------------------------------------------------------
    def _error(self, rpc: Rpc, code: grpc.StatusCode, details: str) -> None:
        """The call ends with ``code`` (its request could not be read); its handler, if running, cancelled."""
        rpc.status, rpc.message = code, details
        self.finish(rpc)
        if rpc.task is not None and not rpc.task.done():
            rpc.task.cancel()

    def _expire(self, rpc: Rpc) -> None:
        """The call's deadline passed: its handler cancelled, the client told DEADLINE_EXCEEDED."""
        if self.calls.get(rpc.sid) is not rpc or rpc.state & LOCAL:
            return
        rpc.expired = rpc.cancelled_ = True
        if rpc.task is not None and not rpc.task.done():
            rpc.task.cancel()  # h2rpc.serve answers DEADLINE_EXCEEDED
        else:
            self._error(rpc, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _cancelled(self, rpc: Rpc) -> None:
        """The client reset the stream (or went away): the handler cancelled, nothing more sent (a
        unary-unary handler left to finish instead where the server's ``cancel_unary`` is False)."""
        rpc.cancelled_ = True
        rpc.state |= LOCAL
        self._done(rpc)
        task = rpc.task
        if task is not None and not task.done():
            handler = rpc.handler
            if (not self.server.cancel_unary and handler is not None
                    and not handler.request_streaming and not handler.response_streaming):
                return  # its answer dropped: rpc.state LOCAL (gateway/h2/rpc.py, serve)
            task.cancel()

    def cancel_calls(self) -> list[asyncio.Task]:
        """Every call in flight cancelled (the server stopping): their tasks, which answer CANCELLED."""
        tasks = []
        for rpc in list(self.calls.values()):
            if rpc.task is not None and not rpc.task.done():
                rpc.task.cancel()
                if isinstance(rpc.task, asyncio.Future):  # (one answered from callbacks has answered now)
                    tasks.append(rpc.task)
            elif not rpc.state & LOCAL:
                self._error(rpc, grpc.StatusCode.UNAVAILABLE, "Server shutting down")
        return tasks

    def _done(self, rpc: Rpc) -> None:
        sid = rpc.sid
        if self.calls.get(sid) is rpc:
            del self.calls[sid]
            self.closed.add(sid, rpc.state)
        if rpc.big is not None:
            rpc.big = None
            if self.big is rpc:
                self.big = None
        if rpc.held:
            self.release(rpc, rpc.held)
        if rpc.timer is not None:
            rpc.timer.cancel()
        self.unqueue(rpc)
        for fut in (rpc.reader, rpc.drained):
            if fut is not None and not fut.done():
                fut.set_result(None)
        if rpc.callbacks:
            rpc.run_callbacks()
        if self.going_away and not self.calls:
            self.close()

    # -- answering ---------------------------------------------------------------------------
    def send_headers(self, rpc: Rpc, fields: bytes = b"") -> None:
        if rpc.headers_sent or rpc.state & LOCAL or self.lost:
            return
        rpc.headers_sent = True
        self.transport.write(header_frames(rpc.sid, RESPONSE_HEADERS + fields, False, self.peer_frame))

    def send_message(self, rpc: Rpc, data: bytes, last: bool = False) -> None:
        """One answer message (``last``: and the call's trailers after it)."""
        if rpc.state & LOCAL or self.lost:
            return
        sid = rpc.sid
        self.ping_strikes, self.last_ping = 0, -1e18  # an answer sent: the client may ping again
        head = b""
        if not rpc.headers_sent:
            rpc.headers_sent = True
            head = header_frames(sid, RESPONSE_HEADERS, False, self.peer_frame)
        tail = b""
        if last:
            rpc.state |= LOCAL
            tail = self._trailer_frames(rpc, False)
        size = len(data) + 5
        prefix = b"\x00" + U32.pack(len(data))
        if (rpc.out is None and size <= rpc.window and size <= self.send_window and size <= self.peer_frame
                and not self._paused & 1):
            self.transport.write(b"".join((head, FRAME.pack(size >> 8, size & 0xFF, DATA, 0, sid), prefix, data, tail)))
            rpc.window -= size
            self.send_window -= size
            if last:
                self._done(rpc)
            return
        if head:
            self.transport.write(head)
        if tail:
            self.queue(rpc, memoryview(prefix), memoryview(data), tail)
        else:
            self.queue(rpc, memoryview(prefix), memoryview(data))

    def finish(self, rpc: Rpc) -> None:
        """The call's status and trailing metadata (trailers-only when no message went)."""
        if rpc.state & LOCAL or self.lost:
            return
        rpc.state |= LOCAL
        out = self._trailer_frames(rpc, not rpc.headers_sent)
        self.ping_strikes, self.last_ping = 0, -1e18
        if rpc.out:
            self.queue(rpc, out)
        else:
            self.transport.write(out)
            self._done(rpc)

    def _trailer_frames(self, rpc: Rpc, only: bool) -> bytes:
        block = trailers(rpc.status, rpc.message, rpc.trailing)
        # no RST_STREAM after it when the client is still sending: what it sends is dropped
        return header_frames(rpc.sid, TRAILERS_ONLY + block if only else block, True, self.peer_frame)

    def sent(self, rpc: Rpc) -> None:
        """Its answers queued have gone (core's scheduler): its handler, if waiting, goes on; a call
        whose trailers went with them is done."""
        if rpc.drained is not None and not rpc.drained.done():
            rpc.drained.set_result(None)
        if rpc.state & LOCAL:
            self._done(rpc)

    # -- the connection's end --------------------------------------------------------------------
    def go_away(self) -> None:
        """No new calls (GOAWAY NO_ERROR with the last stream id read): those in flight go on; the
        connection closes once they are done."""
        if self.going_away or self.lost:
            return
        self.going_away = True
        self.goaway(NO_ERROR)
        if not self.calls:
            self.close()

    def on_error(self, code: int) -> None:
        """A connection error: GOAWAY with its code, the connection closed."""
        self.goaway(code)
        self.close()

    def close(self) -> None:
        for timer in (self._preface_timer, self._block_timer):
            if timer is not None:
                timer.cancel()
        if self.transport is not None and not self.lost:
            self.lost = True
            self.transport.close()
            for rpc in list(self.calls.values()):
                self._cancelled(rpc)
            self.let_go()
            self.server.connections.discard(self)
