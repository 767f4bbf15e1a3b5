"""HTTP/2 as gRPC uses it, the pieces both ends written on the event loop share: the client of
Triton (gateway/h2/client.py) and the gRPC listener's server (gateway/h2/server.py).

Frame kinds, flags and error codes (RFC 9113), the 9-byte frame head, HPACK literal fields without
indexing (RFC 7541 6.2.2: no table state on either side, so a block can be encoded once and kept),
``Headers``: header blocks decoded with ``hpack`` (the pinned library h2 uses), a block made only of
indexed fields remembered until one that changes the table comes, every path held to the header-list
limit; and ``Framing``, where every frame read is checked against RFC 9113 (sizes, stream 0, padding,
settings' ranges, windows) and the floods hardened servers refuse are counted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable

try:
    from hpack import Decoder
    from hpack.hpack import encode_integer
except ImportError:  # pragma: no cover - hpack is a pinned dependency
    Decoder = encode_integer = None

from gateway.observe import metrics

log = logging.getLogger("gateway")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
SELF_DEPENDENT = 0x100  # not on the wire: a HEADERS frame whose priority names its own stream (on_headers)
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB
# SETTINGS identifiers
MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, ENABLE_PUSH = 0x3, 0x4, 0x5, 0x2
MAX_WINDOW = (1 << 31) - 1  # the largest window (RFC 9113 6.9.1)
MAX_HEADER_LIST = 1 << 16  # the largest header list decoded (name + value + 32 per field, RFC 9113 6.5.2)
FRAME = struct.Struct(">HBBBI")  # length (24 bits: H then B), type, flags, stream id
U32 = struct.Struct(">I")
SETTING = struct.Struct(">HI")
LAST_STREAM_ID = (1 << 31) - 1
DEFAULT_WINDOW = 65535
DEFAULT_FRAME = 16384


def frame(kind: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return FRAME.pack(n >> 8, n & 0xFF, kind, flags, sid) + payload


def settings(*pairs: tuple[int, int]) -> bytes:
    """A SETTINGS frame with these (identifier, value) pairs."""
    return frame(SETTINGS, 0, 0, b"".join(SETTING.pack(k, v) for k, v in pairs))


def read_settings(payload: bytes) -> list[tuple[int, int]]:
    return [SETTING.unpack_from(payload, i) for i in range(0, len(payload) - 5, 6)]


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return bytes(encode_integer(len(raw), 7)) + raw  # an HPACK string, not Huffman-coded (RFC 7541 5.2)


def literal(name: str | int, value: str | bytes) -> bytes:
    """A field as an HPACK literal without indexing (no table state on either side): ``name`` by
    its static-table index or spelled out."""
    if isinstance(name, int):
        return bytes(encode_integer(name, 4)) + string(value)
    return b"\x00" + string(name) + string(value)


def header_frames(sid: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as one HEADERS frame, or HEADERS and CONTINUATION frames when it is larger
    than the peer's frame size."""
    flags = END_STREAM if end_stream else 0
    n = len(block)
    if n <= max_frame:
        return FRAME.pack(n >> 8, n & 0xFF, HEADERS, flags | END_HEADERS, sid) + block
    parts = [block[i:i + max_frame] for i in range(0, n, max_frame)]
    out = [frame(HEADERS, flags, sid, parts[0])]
    out += [frame(CONTINUATION, 0, sid, p) for p in parts[1:-1]]
    out.append(frame(CONTINUATION, END_HEADERS, sid, parts[-1]))
    return b"".join(out)


def indexed_only(block: bytes) -> bool:
    """Whether a header block is only indexed fields (decoding it leaves the HPACK table as it is)."""
    i, n = 0, len(block)
    while i < n:
        b = block[i]
        if not b & 0x80:
            return False
        i += 1
        if b & 0x7F == 0x7F:  # a multi-byte index
            while i < n and block[i] & 0x80:
                i += 1
            i += 1
    return True


_SINGLE_INDEXED = bytes(range(0x81, 0xFF))  # an indexed field in one byte: index 1 to 126


def _single_indexed(block: bytes) -> bool:
    """Whether every byte of a header block is an indexed field of its own."""
    return not block.translate(None, _SINGLE_INDEXED)


class HeaderListTooLarge(Exception):
    """A header block that decodes to more than the header-list limit."""


class Headers:
    """One connection's HPACK decoder: ``decode(block)`` gives ``shape`` of the block's (name, value)
    pairs (a dict, a tuple...); a block of indexed fields only (under 1 KiB) is remembered (at most
    64 of them) until a block that changes the table is decoded. Raises ``HeaderListTooLarge`` past
    ``max_list`` (every path: the one-byte-index fast path sums the table's entries before it builds
    anything), hpack's errors on a bad block."""

    __slots__ = ("_decoder", "_seen", "_shape", "max_list")

    def __init__(self, shape: Callable[[list[tuple[str, str]]], object], max_table: int = 4096,
                 max_list: int = MAX_HEADER_LIST):
        self._decoder = Decoder()
        self._decoder.max_allowed_table_size = max_table
        self._decoder.max_header_list_size = max_list
        self._seen: dict[bytes, object] = {}
        self._shape = shape
        self.max_list = max_list

    def decode(self, block: bytes):
        hit = self._seen.get(block)
        if hit is not None:
            return hit
        if _single_indexed(block):  # every field one table index under 127: read from the table itself
            get = self._decoder.header_table.get_by_index
            pairs = [get(b & 0x7F) for b in block]
            if 32 * len(pairs) + sum(len(n) + len(v) for n, v in pairs) > self.max_list:
                raise HeaderListTooLarge
            fields = self._shape([(n.decode(), v.decode()) for n, v in pairs])
        else:
            try:
                fields = self._shape(self._decoder.decode(block, raw=False))
            except Exception as exc:
                if type(exc).__name__ == "OversizedHeaderListError":
                    raise HeaderListTooLarge from None
                raise
        if not indexed_only(block):  # the table changed: what was remembered may read otherwise now
            self._seen.clear()
        elif len(block) <= 1024:
            if len(self._seen) > 64:
                self._seen.clear()
            self._seen[block] = fields
        return fields


# What a connection's peer may do per FLOOD_INTERVAL before it is told to calm down (GOAWAY
# ENHANCE_YOUR_CALM), by kind: streams it resets or that are refused (Rapid Reset, CVE-2023-44487),
# SETTINGS, PING acks nobody asked for, frames that carry nothing (empty DATA, zero-length header
# fragments), PRIORITY and unknown frames.
FLOOD_INTERVAL = 1.0
RESETS, SETTINGS_FLOOD, PINGS, EMPTY, CONTROL = range(5)
FLOOD_LIMITS = (200, 100, 100, 100, 1000)
FLOOD_REASONS = ("rapid_reset", "settings_flood", "ping_flood", "empty_frames", "control_flood")


def refused(reason: str) -> None:
    """One refusal counted (``gateway_h2_refused_total{reason}``)."""
    metrics.H2_REFUSED.labels(reason).inc()


class Joined:
    """A transport whose writes within one turn of the event loop leave in one write, at the turn's
    end: the frames of calls answered in the same turn (HEADERS, DATA, trailers, WINDOW_UPDATE,
    acks) share a syscall, as grpc core and nginx write what a read made in one go. One
    ``call_soon`` per turn that writes; ``close`` and ``abort`` write what waits first, in order.
    Once the turn's bytes reach the transport's high-water mark (its first part left out of the
    count, a write that is alone in its turn costing nothing more) they go at once, so that the
    transport pauses its protocol (``pause_writing``) in the write that fills it, as without
    joining: a handler writing answers in one turn to a client that reads slowly is stopped by it,
    not left to pile them up till the turn ends. The rest is the transport's
    (``get_write_buffer_size`` leaves out what waits for the turn's end: the mark and two parts at most;
    the connection core counts its own queue, ``Core.queued``). (No ``__slots__``: a test may wrap
    ``write`` on the instance.)"""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._parts: list | None = None  # written this turn, not yet given to the transport
        self._size = 0  # the bytes of its parts after the first (the first costs no count)
        self._loop = loop
        self._high = transport.get_write_buffer_limits()[1]

    def write(self, data) -> None:
        parts = self._parts
        if parts is None:
            self._parts = [data]
            self._loop.call_soon(self._flush)  # after a flush at the mark: one more, finding nothing
        else:
            parts.append(data)
            self._size += len(data)
            if self._size >= self._high:
                self._flush()

    def _flush(self) -> None:
        parts, self._parts = self._parts, None
        self._size = 0
        if parts and not self._transport.is_closing():
            self._transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._flush()
        self._transport.abort()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class Framing(asyncio.Protocol):
    """What both ends written on the loop do with the frames they read (gateway/h2/client.py's
    ``Connection``, gateway/h2/server.py's): whole frames cut from the bytes read (``frames``, at most
    FRAMES_PER_TURN before the loop's other work has its turn), each checked against RFC 9113 (a
    violation: the connection error with its code, GOAWAY, or a stream error, RST_STREAM), DATA
    counted against the window advertised, padding and priority taken off, a header block continued
    by CONTINUATION frames put together (bounded in frames, bytes and time), SETTINGS checked,
    applied and acknowledged, floods counted (``flood``). Reading stops while the transport's write
    buffer is over its high-water mark (``pause_writing``). No exception leaves ``frames``: one is
    GOAWAY INTERNAL_ERROR and a log line. What a frame means to one end is its ``on_*`` method's."""

    CONN_WINDOW = 64 << 20  # what the peer may send on the connection before it is given back
    MAX_FRAME = 1 << 18  # the largest frame taken (advertised as SETTINGS_MAX_FRAME_SIZE)
    MAX_HEADER_BLOCK = 1 << 17  # a larger header block (CONTINUATION after CONTINUATION) ends the connection
    MAX_CONTINUATIONS = 64  # CONTINUATION frames per header block (h2's cap)
    HEADER_BLOCK_TIMEOUT = 5.0  # seconds a header block may stay unfinished
    FRAMES_PER_TURN = 256  # frames parsed before the loop's other callbacks have their turn
    credit_on_read = True  # the connection's window given back as DATA is read (else: ``credit``)

    transport: asyncio.Transport | None = None
    loop: asyncio.AbstractEventLoop | None = None  # the loop it runs on (asyncio.get_running_loop() is a syscall a call in 3.11)
    lost = False  # the socket is gone (or going): nothing more is read
    conn_unacked = 0
    recv_window = DEFAULT_WINDOW  # what the peer may still send on the connection
    _buf = b""
    _block: list | None = None  # a header block being continued: [sid, flags, parts, size, frames]
    _block_timer: asyncio.TimerHandle | None = None
    _paused = 0  # why reading is paused: 1 the write buffer is full, 2 the frame budget is spent
    _floods: list | None = None  # counts per flood kind in this interval
    _flood_since = 0.0
    by_id: dict  # the open streams by id, each with its send ``window`` (set by the subclass)
    pending: collections.deque  # what waits for a window to be sent (``_pump``)
    send_window = DEFAULT_WINDOW  # the connection's send window
    peer_window = DEFAULT_WINDOW  # the peer's initial stream window (its SETTINGS)
    peer_frame = DEFAULT_FRAME  # the largest frame the peer takes
    peer_streams = 1 << 31  # the peer's MAX_CONCURRENT_STREAMS

    def connection_made(self, transport) -> None:
        self.loop = asyncio.get_running_loop()
        sock = transport.get_extra_info("socket")
        if sock is not None:  # a socket's: its writes joined per turn of the loop (``Joined``)
            transport = Joined(transport, self.loop)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - not TCP
                pass
        self.transport = transport

    # -- reading, paused and resumed ------------------------------------------------------------
    def pause_writing(self) -> None:
        """The transport's buffer is over its high-water mark: nothing more read (so nothing more
        answered: acks, resets) until the peer has taken it."""
        self._pause(1)

    def resume_writing(self) -> None:
        self._resume(1)
        if self.pending and not self.lost:
            self._pump()

    def _pause(self, why: int) -> None:
        if not self._paused and not self.lost:
            self.transport.pause_reading()
        self._paused |= why

    def _resume(self, why: int) -> None:
        if self._paused & why:
            self._paused &= ~why
            if not self._paused and not self.lost:
                self.transport.resume_reading()

    def _next_turn(self) -> None:
        """The frames left over by the last turn's budget."""
        if self.lost:
            return
        data, self._buf = self._buf, b""
        self._paused &= ~2
        self.frames(data)
        if not self._paused and not self.lost:
            self.transport.resume_reading()

    def frames(self, data: bytes) -> None:
        if self._buf:
            data = self._buf + data
        off, n, unpack = 0, len(data), FRAME.unpack_from
        limit = self.MAX_FRAME
        budget = self.FRAMES_PER_TURN
        try:
            while n - off >= 9:
                hi, lo, kind, flags, sid = unpack(data, off)
                length = hi << 8 | lo
                if length > limit:
                    return self.on_error(FRAME_SIZE_ERROR)
                end = off + 9 + length
                if end > n:
                    break
                self._frame(kind, flags, sid & LAST_STREAM_ID, data[off + 9:end], length)
                if self.lost:
                    return
                off = end
                budget -= 1
                if not budget and n - off >= 9:  # the rest on the loop's next turn, reading paused till then
                    self._buf = data[off:]
                    if not self._paused & 2:
                        self._pause(2)
                        self.loop.call_soon(self._next_turn)
                    return
        except Exception:  # noqa: BLE001 - the last guard: nothing leaves data_received
            log.exception("HTTP/2 connection ended on an internal error")
            if not self.lost:
                self.on_error(INTERNAL_ERROR)
            return
        self._buf = data[off:] if off < n else b""

    def _frame(self, kind: int, flags: int, sid: int, payload: bytes, length: int) -> None:
        if self._block is not None and kind != CONTINUATION:
            return self.on_error(PROTOCOL_ERROR)
        if kind == DATA:
            if not sid:
                return self.on_error(PROTOCOL_ERROR)
            self.recv_window -= length
            if self.recv_window < 0:
                return self.on_error(FLOW_CONTROL_ERROR)
            if flags & PADDED:
                if not length or payload[0] >= length:
                    return self.on_error(PROTOCOL_ERROR)
                payload = payload[1:length - payload[0]]
                if not self.credit_on_read:
                    self.credit(length - len(payload))  # the padding: nothing of it kept
            elif not length and not flags & END_STREAM and self.flood(EMPTY):
                return
            if self.credit_on_read:
                self.conn_unacked += length
                if self.conn_unacked >= self.CONN_WINDOW // 2:
                    self.credit(0)
            self.on_data(sid, flags, payload, length)
        elif kind == HEADERS:
            if not sid:
                return self.on_error(PROTOCOL_ERROR)
            if flags & PADDED:
                if not length or payload[0] >= length:
                    return self.on_error(PROTOCOL_ERROR)
                payload = payload[1:length - payload[0]]
            if flags & PRIORITY_FLAG:
                if len(payload) < 5:
                    return self.on_error(FRAME_SIZE_ERROR)
                if U32.unpack_from(payload)[0] & LAST_STREAM_ID == sid:  # a stream error, once the block is read
                    flags |= SELF_DEPENDENT
                payload = payload[5:]
            if flags & END_HEADERS:
                self.on_headers(sid, flags, payload)
            else:
                if not payload and self.flood(EMPTY):
                    return
                self._block = [sid, flags, [payload], len(payload), 0]
                self._block_timer = self.loop.call_later(self.HEADER_BLOCK_TIMEOUT,
                                                                         self._block_late)
        elif kind == CONTINUATION:
            block = self._block
            if block is None or block[0] != sid:
                return self.on_error(PROTOCOL_ERROR)
            block[2].append(payload)
            block[3] += length
            block[4] += 1
            if block[3] > self.MAX_HEADER_BLOCK or block[4] > self.MAX_CONTINUATIONS:
                return self.calm("continuation_flood")
            if flags & END_HEADERS:
                self._block = None
                self._block_timer.cancel()
                self.on_headers(sid, block[1], b"".join(block[2]))
        elif kind == SETTINGS:
            if sid:
                return self.on_error(PROTOCOL_ERROR)
            if flags & ACK:
                if length:
                    return self.on_error(FRAME_SIZE_ERROR)
                return
            if length % 6:
                return self.on_error(FRAME_SIZE_ERROR)
            if self.flood(SETTINGS_FLOOD):
                return
            pairs = read_settings(payload)
            for key, value in pairs:
                if key == INITIAL_WINDOW_SIZE and value > MAX_WINDOW:
                    return self.on_error(FLOW_CONTROL_ERROR)
                if (key == MAX_FRAME_SIZE and not DEFAULT_FRAME <= value <= 0xFFFFFF
                        or key == ENABLE_PUSH and value > 1):
                    return self.on_error(PROTOCOL_ERROR)
            self.transport.write(frame(SETTINGS, ACK, 0))  # first: a window it grows counts from the ack on
            self.on_settings(pairs)
        elif kind == WINDOW_UPDATE:
            if length != 4:
                return self.on_error(FRAME_SIZE_ERROR)
            increment = U32.unpack(payload)[0] & LAST_STREAM_ID
            if not increment:
                if not sid:
                    return self.on_error(PROTOCOL_ERROR)
                return self.stream_error(sid, PROTOCOL_ERROR)
            self.on_window(sid, increment)
        elif kind == PING:
            if sid:
                return self.on_error(PROTOCOL_ERROR)
            if length != 8:
                return self.on_error(FRAME_SIZE_ERROR)
            if flags & ACK and self.flood(PINGS):
                return
            self.on_ping(payload, bool(flags & ACK))
        elif kind == RST_STREAM:
            if not sid:
                return self.on_error(PROTOCOL_ERROR)
            if length != 4:
                return self.on_error(FRAME_SIZE_ERROR)
            if sid not in self.by_id and self.idle(sid):
                return self.on_error(PROTOCOL_ERROR)
            self.on_reset(sid, U32.unpack(payload)[0])
        elif kind == GOAWAY:
            if sid:
                return self.on_error(PROTOCOL_ERROR)
            if length < 8:
                return self.on_error(FRAME_SIZE_ERROR)
            self.on_goaway(payload)
        elif kind == PRIORITY:
            if not sid:
                return self.on_error(PROTOCOL_ERROR)
            if self.flood(CONTROL):
                return
            if length != 5:
                return self.stream_error(sid, FRAME_SIZE_ERROR)
            if U32.unpack_from(payload)[0] & LAST_STREAM_ID == sid:
                return self.stream_error(sid, PROTOCOL_ERROR)
        elif kind == PUSH_PROMISE:  # push is off both ways: a client never sends it, we asked for none
            return self.on_error(PROTOCOL_ERROR)
        else:  # an unknown kind: ignored (RFC 9113 4.1), counted
            self.flood(CONTROL)

    def _block_late(self) -> None:
        if self._block is not None and not self.lost:
            self.calm("header_timeout")

    # -- flow control --------------------------------------------------------------------------
    def credit(self, n: int) -> None:
        """``n`` bytes of DATA the connection's window is given back (WINDOW_UPDATE once a half of
        it is owed)."""
        self.conn_unacked += n
        if self.conn_unacked >= self.CONN_WINDOW // 2 and not self.lost:
            self.transport.write(frame(WINDOW_UPDATE, 0, 0, U32.pack(self.conn_unacked)))
            self.recv_window += self.conn_unacked
            self.conn_unacked = 0

    # -- floods ------------------------------------------------------------------------------------
    def flood(self, kind: int) -> bool:
        """One more frame of a kind floods are made of; True (the connection ended: GOAWAY
        ENHANCE_YOUR_CALM) once more than its limit came within FLOOD_INTERVAL."""
        counts = self._floods
        if counts is None:
            counts = self._floods = [0] * len(FLOOD_LIMITS)
            self._flood_since = time.monotonic()
        counts[kind] += 1
        if counts[kind] <= FLOOD_LIMITS[kind]:
            return False
        now = time.monotonic()
        if now - self._flood_since >= FLOOD_INTERVAL:  # a new interval
            self._floods = [0] * len(FLOOD_LIMITS)
            self._floods[kind] = 1
            self._flood_since = now
            return False
        self.calm(FLOOD_REASONS[kind])
        return True

    def calm(self, reason: str) -> None:
        """GOAWAY ENHANCE_YOUR_CALM, the connection closed, the refusal counted."""
        refused(reason)
        self.on_error(ENHANCE_YOUR_CALM)

    # -- what a frame means to one end ----------------------------------------------------------
    def idle(self, sid: int) -> bool:
        """Whether stream ``sid`` is idle (never opened): a frame other than HEADERS or PRIORITY on
        it is a connection error."""
        return False

    def stream_error(self, sid: int, code: int) -> None:
        """A stream error (RFC 9113 5.4.2): RST_STREAM with its code, the stream closed."""
        raise NotImplementedError

    def on_data(self, sid: int, flags: int, payload: bytes, length: int) -> None:
        raise NotImplementedError

    def on_headers(self, sid: int, flags: int, block: bytes) -> None:
        raise NotImplementedError

    def on_settings(self, pairs: list[tuple[int, int]]) -> None:
        """The peer's initial stream window (the open streams' windows moved by the change: past
        2^31-1, FLOW_CONTROL_ERROR) and frame size; then what waited for a window is sent."""
        for key, value in pairs:
            if key == INITIAL_WINDOW_SIZE:
                delta, self.peer_window = value - self.peer_window, value
                for st in self.by_id.values():
                    st.window += delta
                    if st.window > MAX_WINDOW:
                        return self.on_error(FLOW_CONTROL_ERROR)
            elif key == MAX_FRAME_SIZE:
                self.peer_frame = value
            elif key == MAX_CONCURRENT_STREAMS:
                self.peer_streams = value
        if self.pending:
            self._pump()

    def on_window(self, sid: int, increment: int) -> None:
        if sid == 0:
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                return self.on_error(FLOW_CONTROL_ERROR)
        elif (st := self.by_id.get(sid)) is not None:
            st.window += increment
            if st.window > MAX_WINDOW:
                return self.stream_error(sid, FLOW_CONTROL_ERROR)
        elif self.idle(sid):  # (the idle check only for streams not open: none on the common path)
            return self.on_error(PROTOCOL_ERROR)
        if self.pending:
            self._pump()

    def _pump(self) -> None:
        """Sends what waits in ``pending`` as far as the windows allow."""
        raise NotImplementedError

    def _unqueue(self, st, key) -> None:
        """A stream's bytes waiting for a window (``st.out``) dropped, ``key`` its entry in ``pending``."""
        if st.out is not None:
            st.out = None
            with contextlib.suppress(ValueError):
                self.pending.remove(key)

    def on_ping(self, payload: bytes, ack: bool) -> None:
        if not ack:
            self.transport.write(frame(PING, ACK, 0, payload))

    def on_reset(self, sid: int, code: int) -> None:
        pass

    def on_goaway(self, payload: bytes) -> None:
        pass

    def on_error(self, code: int) -> None:
        """A connection error (RFC 9113 5.4.1): GOAWAY with its code, the connection closed."""
        raise NotImplementedError
