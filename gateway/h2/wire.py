"""HTTP/2 as gRPC uses it, the pieces both ends written on the event loop share: the client of
Triton (gateway/h2/client.py) and the gRPC listener's server (gateway/h2/server.py).

Frame kinds, flags and error codes (RFC 9113), the 9-byte frame head, HPACK literal fields without
indexing (RFC 7541 6.2.2: no table state on either side, so a block can be encoded once and kept),
and ``Headers``: header blocks decoded with ``hpack`` (the pinned library h2 uses), a block made
only of indexed fields remembered until one that changes the table comes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import struct
from collections.abc import Callable

try:
    from hpack import Decoder
    from hpack.hpack import encode_integer
except ImportError:  # pragma: no cover - hpack is a pinned dependency
    Decoder = encode_integer = None

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR = 0x0, 0x1, 0x3, 0x6
REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x7, 0x8, 0xB
# SETTINGS identifiers
MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, ENABLE_PUSH = 0x3, 0x4, 0x5, 0x2
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


class Headers:
    """One connection's HPACK decoder: ``decode(block)`` gives ``shape`` of the block's (name, value)
    pairs (a dict, a tuple...); a block of indexed fields only is remembered (at most 64 of them)
    until a block that changes the table is decoded. Raises hpack's errors on a bad block."""

    __slots__ = ("_decoder", "_seen", "_shape")

    def __init__(self, shape: Callable[[list[tuple[str, str]]], object], max_table: int = 4096):
        self._decoder = Decoder()
        self._decoder.max_allowed_table_size = max_table
        self._seen: dict[bytes, object] = {}
        self._shape = shape

    def decode(self, block: bytes):
        hit = self._seen.get(block)
        if hit is not None:
            return hit
        if _single_indexed(block):  # every field one table index under 127: read from the table itself
            get = self._decoder.header_table.get_by_index
            fields = self._shape([(n.decode(), v.decode()) for n, v in [get(b & 0x7F) for b in block]])
        else:
            fields = self._shape(self._decoder.decode(block, raw=False))
        if indexed_only(block):
            if len(self._seen) > 64:
                self._seen.clear()
            self._seen[block] = fields
        else:  # the table changed: what was remembered may read otherwise now
            self._seen.clear()
        return fields


class Framing(asyncio.Protocol):
    """What both ends written on the loop do with the frames they read (gateway/h2/client.py's
    ``Connection``, gateway/h2/server.py's): whole frames cut from the bytes read (``frames``),
    the connection's window given back as DATA is read, padding and priority taken off, a header
    block continued by CONTINUATION frames put together, SETTINGS acknowledged. What a frame means
    to one end is its ``on_*`` method's."""

    CONN_WINDOW = 64 << 20  # what the peer may send on the connection before it is given back
    MAX_FRAME = 1 << 18  # the largest frame taken (advertised as SETTINGS_MAX_FRAME_SIZE)
    MAX_HEADER_BLOCK = 1 << 20  # a larger header block (CONTINUATION after CONTINUATION) ends the connection

    transport: asyncio.Transport | None = None
    lost = False  # the socket is gone (or going): nothing more is read
    conn_unacked = 0
    _buf = b""
    _block: list | None = None  # a header block being continued: [sid, flags, parts, size]
    by_id: dict  # the open streams by id, each with its send ``window`` (set by the subclass)
    pending: collections.deque  # what waits for a window to be sent (``_pump``)
    send_window = DEFAULT_WINDOW  # the connection's send window
    peer_window = DEFAULT_WINDOW  # the peer's initial stream window (its SETTINGS)
    peer_frame = DEFAULT_FRAME  # the largest frame the peer takes
    peer_streams = 1 << 31  # the peer's MAX_CONCURRENT_STREAMS

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - not TCP
                pass

    def frames(self, data: bytes) -> None:
        if self._buf:
            data = self._buf + data
        off, n, unpack = 0, len(data), FRAME.unpack_from
        limit = self.MAX_FRAME
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
        self._buf = data[off:] if off < n else b""

    def _frame(self, kind: int, flags: int, sid: int, payload: bytes, length: int) -> None:
        if self._block is not None and kind != CONTINUATION:
            return self.on_error(PROTOCOL_ERROR)
        if kind == DATA:
            self.conn_unacked += length
            if self.conn_unacked >= self.CONN_WINDOW // 2:
                self.transport.write(frame(WINDOW_UPDATE, 0, 0, U32.pack(self.conn_unacked)))
                self.conn_unacked = 0
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            self.on_data(sid, flags, payload, length)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            if flags & END_HEADERS:
                self.on_headers(sid, flags, payload)
            else:
                self._block = [sid, flags, [payload], len(payload)]
        elif kind == CONTINUATION:
            block = self._block
            if block is None or block[0] != sid:
                return self.on_error(PROTOCOL_ERROR)
            block[2].append(payload)
            block[3] += len(payload)
            if block[3] > self.MAX_HEADER_BLOCK:
                return self.on_error(ENHANCE_YOUR_CALM)
            if flags & END_HEADERS:
                self._block = None
                self.on_headers(sid, block[1], b"".join(block[2]))
        elif kind == SETTINGS:
            if not flags & ACK:
                self.on_settings(read_settings(payload))
                self.transport.write(frame(SETTINGS, ACK, 0))
        elif kind == WINDOW_UPDATE:
            self.on_window(sid, U32.unpack(payload)[0] & LAST_STREAM_ID)
        elif kind == PING:
            self.on_ping(payload, bool(flags & ACK))
        elif kind == RST_STREAM:
            self.on_reset(sid, U32.unpack(payload)[0])
        elif kind == GOAWAY:
            self.on_goaway(payload)
        # PRIORITY, PUSH_PROMISE (push is off), unknown kinds: nothing to do

    # -- what a frame means to one end ----------------------------------------------------------
    def on_data(self, sid: int, flags: int, payload: bytes, length: int) -> None:
        raise NotImplementedError

    def on_headers(self, sid: int, flags: int, block: bytes) -> None:
        raise NotImplementedError

    def on_settings(self, pairs: list[tuple[int, int]]) -> None:
        """The peer's initial stream window (the open streams' windows moved by the change) and
        frame size; then what waited for a window is sent."""
        for key, value in pairs:
            if key == INITIAL_WINDOW_SIZE:
                delta, self.peer_window = value - self.peer_window, value
                for st in self.by_id.values():
                    st.window += delta
            elif key == MAX_FRAME_SIZE:
                self.peer_frame = value
            elif key == MAX_CONCURRENT_STREAMS:
                self.peer_streams = value
        if self.pending:
            self._pump()

    def on_window(self, sid: int, increment: int) -> None:
        if sid == 0:
            self.send_window += increment
        elif (st := self.by_id.get(sid)) is not None:
            st.window += increment
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
