"""Raw HTTP/2 frames as a hostile client writes them (any length, any stream, any payload), what
the server answers read back frame by frame, and one well-behaved gRPC call on a fresh connection.
Written apart from gateway/ on purpose: nothing here comes from the code it attacks.
Used by tests/fuzz/test_h2frames.py and bench/h2flood.py."""

from __future__ import annotations

import socket
import struct
import time
from typing import NamedTuple

from hpack import Decoder

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x6, 0x7, 0x8, 0x9, 0xB
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = range(1, 7)
_HEAD = struct.Struct(">I B B I")


def frame(kind: int, flags: int, sid: int, payload: bytes = b"", length: int | None = None) -> bytes:
    """A frame; ``length`` the one its head claims (default: the payload's, which may lie)."""
    n = len(payload) if length is None else length
    return (n & 0xFFFFFF).to_bytes(3, "big") + bytes((kind & 0xFF, flags & 0xFF)) + (sid & 0xFFFFFFFF).to_bytes(4, "big") + payload


def settings(*pairs: tuple[int, int], ack: bool = False) -> bytes:
    return frame(SETTINGS, ACK if ack else 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def window_update(sid: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", increment))


def rst(sid: int, code: int = CANCEL) -> bytes:
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def _int(value: int, prefix: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1) with a ``prefix``-bit prefix, ``first`` the high bits."""
    top = (1 << prefix) - 1
    if value < top:
        return bytes((first | value,))
    out, value = [first | top], value - top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _str(raw: bytes) -> bytes:
    return _int(len(raw), 7) + raw


def literal(name: str | bytes, value: str | bytes, indexed: bool = False) -> bytes:
    """A literal field with a new name: without indexing, or with incremental indexing (it enters
    the decoder's dynamic table)."""
    name = name.encode() if isinstance(name, str) else name
    value = value.encode() if isinstance(value, str) else value
    return (b"\x40" if indexed else b"\x00") + _str(name) + _str(value)


def request_block(path: str, extra: tuple = ()) -> bytes:
    """A gRPC request's header block: POST, http, ``path``, content-type, te (and ``extra`` fields)."""
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
              ("content-type", "application/grpc"), ("te", "trailers"), *extra]
    return b"".join(literal(k, v) for k, v in fields)


def message(body: bytes) -> bytes:
    """One gRPC length-prefixed message."""
    return b"\x00" + struct.pack(">I", len(body)) + body


class Frame(NamedTuple):
    kind: int
    flags: int
    sid: int
    payload: bytes


def read_frames(sock: socket.socket, quiet: float, limit: float) -> tuple[list[Frame], bool]:
    """The server's frames until it is ``quiet`` seconds silent, ``limit`` seconds pass or it
    closes: (frames, closed). The 9-byte preface-less stream is cut into frames as it comes."""
    buf, out, closed = b"", [], False
    end = time.monotonic() + limit
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(min(quiet, left))
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            break
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            out.append(Frame(buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]))
            buf = buf[9 + n:]
    return out, closed


def goaway_code(frames: list[Frame]) -> int | None:
    for f in frames:
        if f.kind == GOAWAY and len(f.payload) >= 8:
            return int.from_bytes(f.payload[4:8], "big")
    return None


class CallFailed(Exception):
    pass


def good_call(port: int, body: bytes, path: str = "/h2proof.Echo/Unary", timeout: float = 10.0) -> bytes:
    """One unary gRPC call as a well-behaved client makes it, on a fresh connection: the answer's
    message, or CallFailed (no answer within ``timeout``, a reset, GOAWAY, a grpc-status other than 0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(PREFACE + settings() + frame(HEADERS, END_HEADERS, 1, request_block(path))
                     + frame(DATA, END_STREAM, 1, message(body)))
        buf, data, decoder = b"", b"", Decoder()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError as exc:
                raise CallFailed(f"no answer in {timeout} s") from exc
            if not chunk:
                raise CallFailed("connection closed before the answer")
            buf += chunk
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                kind, flags, sid, payload = buf[3], buf[4], int.from_bytes(buf[5:9], "big"), buf[9:9 + n]
                buf = buf[9 + n:]
                if kind == SETTINGS and not flags & ACK:
                    sock.sendall(settings(ack=True))
                elif kind == GOAWAY:
                    raise CallFailed(f"GOAWAY {payload[4:8].hex()}")
                elif kind == RST_STREAM and sid == 1:
                    raise CallFailed(f"RST_STREAM {payload.hex()}")
                elif kind == DATA and sid == 1:
                    data += payload
                    if payload:
                        sock.sendall(window_update(0, len(payload)) + window_update(1, len(payload)))
                elif kind == HEADERS and sid == 1:
                    fields = dict(decoder.decode(payload))
                    if flags & END_STREAM:
                        status = fields.get("grpc-status", "?")
                        if status != "0":
                            raise CallFailed(f"grpc-status {status} {fields.get('grpc-message', '')}")
                        return data[5:]
        raise CallFailed(f"no answer in {timeout} s")
