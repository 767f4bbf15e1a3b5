"""gRPC calls to Triton written as HTTP/2 frames on the event loop itself (``upstream.transport: h2``):
unary calls (``Channel.call``), ModelStreamInfer with one request (``StreamCall``) and both ways
(``Channel.stream``, the V2 passthrough's relay), each with the caller's metadata.

A grpc.aio call crosses threads: grpc core's completion-queue poller picks the answer up and wakes
the asyncio loop, and each call is a batch of core operations. Here an ``asyncio.Protocol`` owns
one plain-TCP HTTP/2 connection per Triton address and a call is a HEADERS frame and a DATA frame
written by the caller's task, its answer parsed from ``data_received`` in the loop's own thread.
The request's header block is encoded once per method (HPACK literal fields without indexing
need no shared state; only ``grpc-timeout`` changes per call); the answer's header blocks are
decoded with ``hpack`` (h2's own), and a block made only of indexed fields (every block, once
Triton's encoder has its table filled) is remembered until a block that changes the table comes.

What a caller sees is what grpc.aio's unary call gives: the answer's bytes, or ``grpc.aio.AioRpcError``
with the code and details grpc would give (Triton's ``grpc-status``/``grpc-message``; a deadline:
DEADLINE_EXCEEDED "Deadline Exceeded", sent to Triton as ``grpc-timeout`` and kept by a local
timer; a connection that breaks: UNAVAILABLE for the calls in flight, never retried, and a new
connection for the next call; a call Triton never started, past a GOAWAY's last stream id or
refused, or whose connection closed since it was picked, sent once more on a new connection, as
grpc's transparent retry). A connection is Triton's once Triton's SETTINGS (its preface) came, as
grpc's connector has it: a peer that closes or speaks no HTTP/2 before failed to connect. A
cancelled caller resets its stream (RST_STREAM CANCEL), so Triton stops; a unary call is left to
finish instead where ``upstream.cancel`` says so (gateway/upstream/cancel.py). Flow control both ways (windows opened with
WINDOW_UPDATE as answers are read; requests wait for Triton's windows), SETTINGS and PING
acknowledged, Triton's MAX_CONCURRENT_STREAMS kept. Keepalive as grpc's client keeps it
(``Keepalive``, the grpc.aio channel's own figures): a PING once nothing has been read for the
keepalive time, the connection broken (UNAVAILABLE for the calls in flight) if its ack does not
come within the timeout; a GOAWAY ENHANCE_YOUR_CALM "too_many_pings" doubles the time for the
address's next connection. A stream (``StreamCall``) is what a unary call is, its request sent
the same way (END_STREAM: the half-close), its answer messages read one by one as they come; a
bidi stream's messages are written as they come, each waiting for Triton's windows. A call's
metadata (``request_metadata``: validated, ``-bin`` values in base64) follows its header block; an
error carries Triton's details (percent-decoded) and its initial and trailing metadata as grpc.aio
hands them over (``answer_metadata``), for the passthrough to pass on unchanged.
Over TCP, TLS (ALPN h2) or a unix socket, to every address of the target (``Channel``); an answer
message over ``max_message`` refused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import ipaddress
import logging
import math
import socket
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple
from urllib.parse import unquote

import grpc

from gateway.h2.core import CLOSED, LOCAL, OPEN, REMOTE, Closed, Core
from gateway.h2.rpc import metadata_fields
from gateway.h2.wire import (
    ACK,
    CANCEL,
    COMPRESSION_ERROR,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    GOAWAY,
    HEADERS,
    LAST_STREAM_ID,
    PING,
    PREFACE,
    PROTOCOL_ERROR,
    RST_STREAM,
    SETTINGS,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    Decoder,
    HeaderListTooLarge,
    Headers,
    frame,
    literal,
    string,
)
from gateway.h2.wire import FRAME as _FRAME
from gateway.h2.wire import SETTING as _SETTING
from gateway.h2.wire import U32 as _U32
from gateway.observe import fastpaths

log = logging.getLogger("gateway")
ON = fastpaths.declare("upstream_h2", [] if Decoder is not None else ["hpack"])

STREAM_WINDOW = 8 << 20  # what Triton may send on one stream before we read it
CONN_WINDOW = 64 << 20  # and on the connection
MAX_FRAME = 1 << 18  # the largest frame we accept (Triton's DATA frames up to this)
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
MAX_MESSAGE = 2**31 - 1  # the largest answer message taken: Triton's own gRPC maximum (INT32_MAX)
_STATUS_BY_RST = {7: grpc.StatusCode.UNAVAILABLE, 8: grpc.StatusCode.CANCELLED,
                  11: grpc.StatusCode.RESOURCE_EXHAUSTED, 12: grpc.StatusCode.PERMISSION_DENIED}
_STATUS_BY_HTTP = {400: grpc.StatusCode.INTERNAL, 401: grpc.StatusCode.UNAUTHENTICATED,
                   403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.UNIMPLEMENTED,
                   429: grpc.StatusCode.UNAVAILABLE, 502: grpc.StatusCode.UNAVAILABLE,
                   503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.UNAVAILABLE}
_CODES = {c.value[0]: c for c in grpc.StatusCode}
_KEEPALIVE_PING = b"gw-keep\x00"  # the payload of our PINGs (their acks echo it)
_MAX_KEEPALIVE = (2**31 - 1) / 2 / 1000  # grpc core: a keepalive time past this is not doubled but off


class Keepalive(NamedTuple):
    """grpc's client keepalive, in seconds: a PING after ``time`` without a frame read, the connection
    broken if its ack has not come within ``timeout``; ``without_calls``: also with no call in
    flight (grpc.keepalive_permit_without_calls). gateway/upstream/client.py ``keepalive()`` reads
    them from the grpc.aio channel's options."""

    time: float
    timeout: float
    without_calls: bool = True


def request_block(path: str, authority: str) -> bytes:
    """A unary call's header block without ``grpc-timeout`` (``timeout_field`` is appended)."""
    return (b"\x83\x86"  # :method POST, :scheme http (static table, indexed)
            + literal(4, path) + literal(1, authority) + literal(31, "application/grpc")
            + literal("te", "trailers") + literal("user-agent", "gateway-h2"))


_TIMEOUT_NAME = b"\x00" + string("grpc-timeout")


def timeout_field(seconds: float) -> bytes:
    """``grpc-timeout`` (at most 8 digits and a unit), rounded up as grpc does."""
    us = max(1, math.ceil(seconds * 1e6))
    if us < 100_000_000:
        raw = b"%du" % us
    elif (ms := math.ceil(us / 1000)) < 100_000_000:
        raw = b"%dm" % ms
    else:
        raw = b"%dS" % min(99_999_999, math.ceil(us / 1e6))
    return _TIMEOUT_NAME + bytes((len(raw),)) + raw  # (at most 9 bytes: a one-byte HPACK length)


def error(code: grpc.StatusCode, details: str, trailing: grpc.aio.Metadata | None = None,
          initial: grpc.aio.Metadata | None = None) -> grpc.aio.AioRpcError:
    """The error grpc.aio raises for a call that ended with ``code``, as ``_translate`` reads it;
    ``trailing``/``initial``: the metadata Triton sent with it (``trailing_metadata()``)."""
    return grpc.aio.AioRpcError(code, initial or grpc.aio.Metadata(), trailing or grpc.aio.Metadata(), details)


# what grpc core keeps out of the metadata it hands an application (the status, HTTP/2's and gRPC's own fields)
_NOT_METADATA = frozenset({"grpc-status", "grpc-message", "content-type", "te", "user-agent", "grpc-encoding",
                           "grpc-accept-encoding", "grpc-timeout", "grpc-internal-encoding-request",
                           "grpc-previous-rpc-attempts"})
_KEY_CHARS = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyz-_.")


def answer_metadata(pairs) -> grpc.aio.Metadata:
    """An answer's header or trailer fields as grpc.aio hands them to its caller: in Triton's order,
    repeated keys kept, gRPC's and HTTP/2's own fields left out, a ``-bin`` key's value decoded
    from base64 (a value that is not base64 is left out, as grpc core drops it)."""
    out = []
    for key, value in pairs:
        if key[0] == ":" or key in _NOT_METADATA:
            continue
        if key.endswith("-bin"):
            try:
                value = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
            except (binascii.Error, ValueError):
                continue
        out.append((key, value))
    return grpc.aio.Metadata(*out)


def request_metadata(metadata) -> bytes:
    """A call's metadata as header fields (``Channel.call``'s ``metadata``): keys of lowercase
    letters, digits, ``-_.``, not gRPC's own (``grpc-``) nor pseudo-headers; a ``-bin`` key's value
    bytes, sent in base64 without padding as grpc sends it; any other value printable ASCII. A
    pair that breaks these is INTERNAL before anything is sent (grpc's "Metadata was invalid")."""
    if not metadata:
        return b""
    for key, value in metadata:
        raw = key.encode() if isinstance(key, str) else key
        if not raw or not _KEY_CHARS.issuperset(raw) or raw.startswith(b"grpc-"):
            raise error(grpc.StatusCode.INTERNAL, f"Metadata was invalid: key {key!r}")
        if not raw.endswith(b"-bin"):
            text = value.encode() if isinstance(value, str) else value
            if not isinstance(text, bytes) or any(c < 0x20 or c > 0x7E for c in text):
                raise error(grpc.StatusCode.INTERNAL, f"Metadata was invalid: value of {key!r}")
        elif not isinstance(value, (bytes, str)):
            raise error(grpc.StatusCode.INTERNAL, f"Metadata was invalid: value of {key!r}")
    return metadata_fields(metadata)


def _fields(pairs: list[tuple[str, str]]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """A decoded header block: by name (the status), and as sent (the metadata)."""
    return dict(pairs), pairs


class Unprocessed(grpc.aio.AioRpcError):
    """A call Triton says it never started (a GOAWAY's last stream id below it, REFUSED_STREAM):
    ``Channel.call`` sends it once more on a new connection, as grpc's transparent retry does."""


RESET = 4  # a _Stream's state bit: we sent RST_STREAM (what Triton still sends on it is ignored, RFC 9113 5.1)


class _Stream:
    __slots__ = ("future", "chunks", "headers", "unacked", "window", "out", "streaming", "end", "inwin", "state",
                 "sent", "sid", "got", "check")

    def __init__(self, future: asyncio.Future, window: int, streaming: bool = False):
        self.future = future  # a streaming call's: set when DATA or the end comes, made anew by its reader
        self.streaming = streaming  # a ModelStreamInfer (StreamCall): many messages, read as they come
        self.end = None  # a streaming call's end once it came: True (OK), or the AioRpcError
        self.chunks: list[bytes] = []
        self.headers: dict[str, str] | None = None  # the answer's first header block, once read
        self.unacked = 0  # DATA bytes read and not yet given back with WINDOW_UPDATE
        self.window = window  # what we may still send
        self.out: collections.deque[memoryview] | None = None  # request bytes waiting for a window
        self.inwin = STREAM_WINDOW  # what Triton may still send on it (our window)
        self.state = OPEN  # RFC 9113 5.1 (gateway/h2/core.py): LOCAL once our END_STREAM is written or
        #                  queued (a unary call's with its request, a bidi stream's at done_writing), REMOTE
        #                  once Triton's came (or its RST_STREAM); RESET (with LOCAL) once we sent RST_STREAM
        self.sent: asyncio.Future | None = None  # a bidi stream's writer, waiting for ``out`` to go
        self.got = 0  # a unary answer's bytes read so far
        self.check = 4  # past this many, the answer's size is checked (``Connection._too_large``)

    @property
    def fin(self) -> bool:
        """END_STREAM goes with the last bytes of ``out`` (gateway/h2/core.py's ``_pump``): we have half-closed."""
        return bool(self.state & LOCAL)


class Started:
    """A unary call ``Channel.start`` began: it stands in for the stream's future (``done``,
    ``set_result``, ``set_exception``) and hands the call's end to ``done`` at once, with what
    ``Channel.call`` would have given: the answer's bytes, or the AioRpcError (a call Triton never
    started, Unprocessed, is sent once more as ``call`` does, and its end handed on). ``cancel``: the
    caller went away, as an awaiting caller's task is cancelled: the stream reset (``cancel`` True),
    or left to finish at its deadline, its answer dropped."""

    __slots__ = ("channel", "fn", "again", "resets", "conn", "sid", "st", "timer", "settled", "ended", "retry")

    def __init__(self, channel: Channel, fn: Callable[[bytes | grpc.aio.AioRpcError], None], again: tuple,
                 resets: bool):
        self.channel, self.fn, self.resets = channel, fn, resets
        self.again = again  # ``Channel._again``'s arguments (data, deadline, blocks, extra), should it be sent again
        self.conn: Connection | None = None  # its connection, stream id and stream (``Connection.start``)
        self.sid, self.st, self.timer = 0, None, None
        self.settled = False  # the stream's end came
        self.ended = False  # ``fn`` called, or the caller gone
        self.retry: asyncio.Task | None = None

    def done(self) -> bool:
        return self.settled

    def set_result(self, result) -> None:
        self.settled = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.ended:  # the caller went away: the answer dropped
            return
        if isinstance(result, Unprocessed):  # Triton never started it: once more, on a new connection
            self.retry = asyncio.ensure_future(self.channel._again(*self.again, self.resets, 1))
            self.retry.add_done_callback(self._retried)
            return
        self._end(result)

    set_exception = set_result

    def _retried(self, task: asyncio.Task) -> None:
        if not self.ended and not task.cancelled():
            self._end(task.exception() or task.result())

    def _end(self, result) -> None:
        self.ended = True
        try:
            self.fn(result)
        except Exception:  # noqa: BLE001 - the caller's failure is its own, never the connection's
            log.exception("a call's answer could not be handed on")

    def cancel(self) -> None:
        if self.ended:
            return
        self.ended = True
        if self.retry is not None:
            self.retry.cancel()
        elif self.resets and not self.settled and self.conn.streams.get(self.sid) is self.st:
            self.timer.cancel()
            self.conn._reset(self.sid, self.st)


class Connection(Core):
    """One HTTP/2 connection to one Triton address: its streams, windows and HPACK decoder, and
    with ``keepalive`` its keepalive timer (one per connection, ticking at a quarter of the time:
    a read only sets ``heard``, so a PING goes between one and one and a quarter keepalive times
    after the last frame read)."""

    def __init__(self, keepalive: Keepalive | None = None, max_message: int = MAX_MESSAGE):
        self.transport: asyncio.Transport | None = None
        self.keepalive = keepalive
        self.max_message = max_message  # the largest answer message taken (larger: RESOURCE_EXHAUSTED)
        self.keepalive_time = keepalive.time if keepalive is not None else math.inf  # doubled by too_many_pings
        self.heard = False  # a frame read since the keepalive timer's last tick
        self._idle = 0.0  # seconds of ticks with nothing read
        self._ticker: asyncio.TimerHandle | None = None
        self._watchdog: asyncio.TimerHandle | None = None  # a keepalive PING waiting for its ack
        self.streams: dict[int, _Stream] = {}
        self.by_id = self.streams
        self.next_sid = 1
        self.closed = False  # no new streams (GOAWAY read, the socket gone, ids spent)
        self.lost = False  # the socket is gone
        self.waiting: collections.deque[asyncio.Future] = collections.deque()  # calls waiting for a stream slot
        self.ready: asyncio.Future | None = None  # Triton's preface (its SETTINGS) read: None; else why it never came
        self.pending: collections.deque[_Stream] = collections.deque()  # streams with request bytes to send
        self.past = Closed()  # the streams closed lately, and how (a frame late on one told from one on an idle stream)
        self._headers_in = Headers(_fields)

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        super().connection_made(transport)  # TCP_NODELAY
        settings = b"".join(_SETTING.pack(k, v) for k, v in (
            (2, 0), (4, STREAM_WINDOW), (5, MAX_FRAME)))  # no push, our window, our frame size
        self.recv_window = CONN_WINDOW
        transport.write(PREFACE + frame(SETTINGS, 0, 0, settings)
                        + frame(WINDOW_UPDATE, 0, 0, _U32.pack(CONN_WINDOW - 65535)))
        loop = self.loop
        self.ready = loop.create_future()
        if self.keepalive_time < math.inf:
            self._ticker = loop.call_later(self.keepalive.time / 4, self._tick)

    def _not_ready(self, why: str) -> None:
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(why)

    def connection_lost(self, exc) -> None:
        self._not_ready("Socket closed" if exc is None else f"Connection lost: {exc}")
        self.closed = self.lost = True
        self._stop_keepalive()
        self._fail_all(grpc.StatusCode.UNAVAILABLE, "Socket closed" if exc is None else f"Connection lost: {exc}")

    def data_received(self, data: bytes) -> None:
        self.heard = True
        self.frames(data)

    # -- frames read (wire.Framing) -------------------------------------------------------------
    def idle(self, sid: int) -> bool:
        return not sid & 1 or sid >= self.next_sid  # (even: no push was asked for)

    def stream_error(self, sid: int, code: int) -> None:
        """A stream Triton broke the rules on: RST_STREAM with ``code``, its call INTERNAL."""
        st = self.streams.get(sid)
        if not self.lost:
            self.transport.write(frame(RST_STREAM, 0, sid, _U32.pack(code)))
        if st is not None:
            st.state |= LOCAL | RESET
            st.chunks.clear()  # nothing of it is to be believed
            self._finish(sid, st, error(grpc.StatusCode.INTERNAL, f"HTTP/2 stream error {code} from the server"))

    def on_data(self, sid: int, flags: int, payload: bytes, length: int) -> None:
        st = self.streams.get(sid)
        if st is None:
            return self._late(sid)
        st.inwin -= length
        if st.inwin < 0:
            return self.stream_error(sid, FLOW_CONTROL_ERROR)
        st.chunks.append(payload)
        if not st.streaming:
            st.got += len(payload)
            if st.got > st.check and self._too_large(sid, st):
                return
        if flags & END_STREAM:  # an answer without trailers
            self._end(sid, st, None)
            return
        if st.streaming:  # its window given back as its messages are read (StreamCall.read)
            st.unacked += length - len(payload)
            if not st.future.done():
                st.future.set_result(None)
            return
        st.unacked += length
        if st.unacked >= STREAM_WINDOW // 2:
            self.transport.write(frame(WINDOW_UPDATE, 0, sid, _U32.pack(st.unacked)))
            st.inwin += st.unacked
            st.unacked = 0

    def _too_large(self, sid: int, st: _Stream) -> bool:
        """A unary answer's size, checked once its length prefix has come and again should more
        come than the largest message taken: one larger than ``max_message`` (or more bytes than
        one message) is refused, its stream reset, before it is held (True)."""
        if st.check == 4:
            head = st.chunks[0] if len(st.chunks[0]) >= 5 else b"".join(st.chunks)
            size = _U32.unpack_from(head, 1)[0]
            if size > self.max_message:
                err = error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"Received message larger than max ({size} vs. {self.max_message})")
            else:
                st.check = self.max_message + 5
                if st.got <= st.check:
                    return False
                err = error(grpc.StatusCode.INTERNAL, "Failed to parse server response")
        else:  # more than one message's bytes in a unary answer
            err = error(grpc.StatusCode.INTERNAL, "Failed to parse server response")
        st.chunks.clear()
        self._reset(sid, st)
        if not st.future.done():
            st.future.set_exception(err)
        return True

    def on_ping(self, payload: bytes, ack: bool) -> None:
        if not ack:
            self.transport.write(frame(PING, ACK, 0, payload))
        elif payload == _KEEPALIVE_PING and self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def on_reset(self, sid: int, code: int) -> None:
        st = self.streams.get(sid)
        if st is not None:
            st.state |= REMOTE
            details = f"Received RST_STREAM with error code {code}"
            self._finish(sid, st, Unprocessed(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                              grpc.aio.Metadata(), details) if code == 7 else
                         error(_STATUS_BY_RST.get(code, grpc.StatusCode.INTERNAL), details))

    def on_goaway(self, payload: bytes) -> None:
        last = _U32.unpack_from(payload)[0] & LAST_STREAM_ID
        self.closed = True
        if payload[8:] == b"too_many_pings" and _U32.unpack_from(payload, 4)[0] == ENHANCE_YOUR_CALM:
            # as grpc core: the keepalive time doubled (off past INT_MAX/2 ms), kept by the
            # channel for the address's next connection (Channel._connect)
            t = self.keepalive_time
            self.keepalive_time = t * 2 if t <= _MAX_KEEPALIVE else math.inf
        for sid in [s for s in self.streams if s > last]:
            self._finish(sid, self.streams[sid], Unprocessed(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                                             grpc.aio.Metadata(), "GOAWAY received"))
        self._wake_all()
        if not self.streams:
            self.transport.close()

    def on_error(self, code: int) -> None:
        """A frame Triton should not have sent: the connection given up (UNAVAILABLE for its calls)."""
        if self.lost:
            return
        self._not_ready(f"HTTP/2 error {code} from the server")
        self.transport.write(frame(GOAWAY, 0, 0, _U32.pack(0) + _U32.pack(code)))
        self.closed = self.lost = True
        self._stop_keepalive()
        self._fail_all(grpc.StatusCode.UNAVAILABLE, f"HTTP/2 error {code} from the server")
        self.transport.abort()

    def on_settings(self, pairs: list[tuple[int, int]]) -> None:
        super().on_settings(pairs)
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(None)  # Triton's half of the preface: the connection is usable
        while self.waiting and len(self.streams) < self.peer_streams:
            self._wake_one()

    def on_headers(self, sid: int, flags: int, block: bytes) -> None:
        try:
            fields = self._headers_in.decode(block)  # every block, the HPACK table follows Triton's
        except HeaderListTooLarge:
            return self.calm("header_list")
        except Exception:  # noqa: BLE001 - hpack's errors: the connection's table is lost
            return self.on_error(COMPRESSION_ERROR)
        st = self.streams.get(sid)
        if st is None:
            return self._late(sid)
        if st.headers is None and not flags & END_STREAM:
            st.headers = fields
            return
        if st.headers is None:  # trailers only
            st.headers = fields
        self._end(sid, st, fields)

    def _late(self, sid: int) -> None:
        """DATA or HEADERS (decoded already: the HPACK table holds) on a stream that is not open: on
        an idle one, a connection error; on one both ends closed, RST_STREAM STREAM_CLOSED (RFC 9113
        5.1 allows ending the connection for it; a stream error costs no other call); on one we
        reset, dropped (grpc core's server may still send its trailers twice: the RFC has them
        ignored); on one long forgotten, dropped (as grpc core's client drops them all)."""
        if self.idle(sid):
            return self.on_error(PROTOCOL_ERROR)
        if self.past.get(sid) == CLOSED:
            self.stream_error(sid, STREAM_CLOSED)

    # -- a stream's end -----------------------------------------------------------------------
    def _end(self, sid: int, st: _Stream, trailers: tuple[dict[str, str], list] | None) -> None:
        st.state |= REMOTE  # Triton's END_STREAM
        # ended before our END_STREAM went (a bidi stream before its half-close, a request still waiting
        # for a window: what waits is dropped): our half closed too, or Triton's stream would stay open
        if (not st.state & LOCAL or st.out is not None) and not self.lost:
            self.transport.write(frame(RST_STREAM, 0, sid, _U32.pack(0)))
            st.state |= LOCAL | RESET
        head = st.headers[0] if st.headers is not None else {}
        status = head.get(":status", "200")
        if status != "200":
            code = _STATUS_BY_HTTP.get(int(status) if status.isascii() and status.isdigit() else 0,
                                       grpc.StatusCode.UNKNOWN)
            return self._finish(sid, st, error(code, f"Received http2 header with status: {status}"))
        if trailers is None or "grpc-status" not in trailers[0]:
            return self._finish(sid, st, error(grpc.StatusCode.UNKNOWN, "Stream removed"))
        fields = trailers[0]
        text = fields["grpc-status"]
        code = int(text) if text.isascii() and text.isdigit() else 2
        if code:  # Triton's words and metadata as it sent them (the passthrough hands them on)
            initial = answer_metadata(st.headers[1]) if st.headers is not trailers else None
            return self._finish(sid, st, error(_CODES.get(code, grpc.StatusCode.UNKNOWN),
                                               unquote(fields.get("grpc-message", "")),
                                               answer_metadata(trailers[1]), initial))
        if st.streaming:
            return self._finish(sid, st, True)
        body = st.chunks[0] if len(st.chunks) == 1 else b"".join(st.chunks)
        if len(body) < 5 or body[0] != 0 or _U32.unpack_from(body, 1)[0] != len(body) - 5:
            return self._finish(sid, st, error(grpc.StatusCode.INTERNAL, "Failed to parse server response"))
        self._finish(sid, st, body[5:])

    def _finish(self, sid: int, st: _Stream, result) -> None:
        self._drop(sid, st)
        if st.streaming:
            st.end = result
            if not st.future.done():
                st.future.set_result(None)
        elif not st.future.done():
            if isinstance(result, BaseException):
                st.future.set_exception(result)
            else:
                st.future.set_result(result)

    def _drop(self, sid: int, st: _Stream) -> None:
        """The stream forgotten: its place given to a call waiting for one; a closing connection
        with nothing left in flight closed."""
        del self.streams[sid]
        self.past.add(sid, LOCAL if st.state & RESET else st.state)
        self.unqueue(st)
        if st.sent is not None:  # a bidi stream's writer: its stream has ended
            st.sent.set_result(None)
            st.sent = None
        if self.waiting:
            self._wake_one()
        if self.closed and not self.streams and not self.lost:
            self.transport.close()

    def _fail_all(self, code: grpc.StatusCode, details: str) -> None:
        for sid, st in list(self.streams.items()):
            self._finish(sid, st, error(code, details))
        self._wake_all()

    def _wake_one(self) -> None:
        while self.waiting:
            w = self.waiting.popleft()
            if not w.done():
                w.set_result(None)
                return

    def _wake_all(self) -> None:
        while self.waiting:
            w = self.waiting.popleft()
            if not w.done():
                w.set_result(None)

    # -- sending (what waits for a window: gateway/h2/core.py) ------------------------------------
    def sent(self, st: _Stream) -> None:
        """A stream's queued request bytes have gone: a bidi stream's writer waiting on them woken."""
        if st.sent is not None:
            st.sent.set_result(None)
            st.sent = None

    async def open(self, block: bytes, data: bytes | None, deadline: float, streaming: bool = False,
                   extra: bytes = b"") -> tuple[int, _Stream]:
        """A stream for one request: ``block`` its header block (``request_block``), ``extra`` the
        call's metadata as header fields (``request_metadata``), ``data`` the message, sent with
        END_STREAM (a streaming call's half-close too) once a stream slot is free; ``data`` None: the
        header block alone, the stream left open for ``send``."""
        loop = self.loop
        while len(self.streams) >= self.peer_streams and not self.closed:
            w = loop.create_future()
            self.waiting.append(w)
            try:
                await asyncio.wait_for(w, max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        return self._open(block, data, deadline - time.monotonic(), streaming, extra)

    def _open(self, block: bytes, data: bytes | None, left: float, streaming: bool, extra: bytes,
              future=None) -> tuple[int, _Stream]:
        """``open`` once a stream slot is free, ``left`` seconds before the call's deadline."""
        if self.closed:  # GOAWAY or the socket gone since it was picked: never started, sent again (Channel.call)
            raise Unprocessed(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                              "Socket closed" if self.lost else "GOAWAY received")
        if left <= 0:  # spent before it was sent: nothing for Triton to do
            raise error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        sid = self.next_sid
        self.next_sid += 2
        if self.next_sid > LAST_STREAM_ID:
            self.closed = True  # ids spent: the next call opens another connection
        st = self.streams[sid] = _Stream(future or self.loop.create_future(), self.peer_window, streaming)
        st.sid = sid
        block += extra + timeout_field(left) if extra else timeout_field(left)
        n = len(block)
        head = _FRAME.pack(n >> 8, n & 0xFF, HEADERS, END_HEADERS, sid) + block
        if data is None:  # a bidi stream: its messages follow (``send``)
            self.transport.write(head)
            return sid, st
        st.state = LOCAL  # our END_STREAM with the request (written now, or queued with it)
        size = len(data) + 5
        prefix = b"\x00" + _U32.pack(len(data))
        if size <= self.send_window and size <= st.window and size <= self.peer_frame and not self.pending:
            self.transport.write(b"".join((head, _FRAME.pack(size >> 8, size & 0xFF, DATA, END_STREAM, sid),
                                           prefix, data)))
            st.window -= size
            self.send_window -= size
        else:
            self.transport.write(head)
            self.queue(st, memoryview(prefix), memoryview(data))
        return sid, st

    def send(self, sid: int, st: _Stream, data: bytes, fin: bool) -> asyncio.Future | None:
        """One message of a bidi stream (``data``: the message's bytes, prefix included; empty: none),
        with ``fin`` the half-close: written at once where the windows allow, else queued (gateway/h2/core.py's ``queue``); the future its writer waits on until the queue has gone (None: gone already)."""
        size = len(data)
        if st.out is None and not self.pending and size <= self.send_window and size <= st.window \
                and size <= self.peer_frame:
            self.transport.write(_FRAME.pack(size >> 8, size & 0xFF, DATA, END_STREAM if fin else 0, sid) + data)
            st.window -= size
            self.send_window -= size
            if fin:
                st.state |= LOCAL
            return None
        if fin:
            st.state |= LOCAL
        if st.out is None and not size:  # the half-close alone, nothing of the stream's waiting: no window needed
            self.transport.write(_FRAME.pack(0, 0, DATA, END_STREAM, sid))
            return None
        if size:  # (empty: the half-close goes with the last of what waits)
            self.queue(st, memoryview(data))
        if st.out is None:
            return None
        if st.sent is None:  # (a half-close behind a message still waiting shares its writer's wait)
            st.sent = self.loop.create_future()
        return st.sent

    async def call(self, block: bytes, data: bytes, timeout: float, cancel: bool = True, extra: bytes = b"") -> bytes:
        """One unary call: ``block`` the request's header block (``request_block``), ``data`` the
        message; the answer message's bytes, or AioRpcError. A cancelled caller resets the stream;
        with ``cancel`` False (``upstream.cancel`` streams or none) the call is left to finish, its
        answer dropped (its deadline still resets it). ``extra``: the call's metadata (``open``)."""
        loop = self.loop
        if len(self.streams) < self.peer_streams:  # a stream slot free: sent now, no await before it
            sid, st = self._open(block, data, timeout, False, extra)
            timer = loop.call_later(timeout, self._expire, sid, st)
        else:
            deadline = time.monotonic() + timeout
            sid, st = await self.open(block, data, deadline, False, extra)
            timer = loop.call_later(deadline - time.monotonic(), self._expire, sid, st)
        try:
            return await st.future
        except asyncio.CancelledError:
            if self.streams.get(sid) is st:
                if cancel:
                    self._reset(sid, st)
                else:  # a future of its own, which its end settles: the timer stopped, the answer dropped
                    st.future = loop.create_future()
                    st.future.add_done_callback(lambda f, t=timer: (t.cancel(), f.cancelled() or f.exception()))
                    timer = None
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def start(self, block: bytes, data: bytes, timeout: float, extra: bytes, started: Started) -> None:
        """``call`` begun at once (a stream slot is free), its end handed to ``started`` (``Channel.start``)."""
        sid, st = self._open(block, data, timeout, False, extra, started)
        started.conn, started.sid, started.st = self, sid, st
        started.timer = self.loop.call_later(timeout, self._expire, sid, st)

    def _expire(self, sid: int, st: _Stream) -> None:
        if self.streams.get(sid) is st:
            self._reset(sid, st)
            err = error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            if st.streaming:
                st.end = err
                if not st.future.done():
                    st.future.set_result(None)
            else:
                st.future.set_exception(err)

    def _reset(self, sid: int, st: _Stream) -> None:
        """RST_STREAM(CANCEL): Triton stops the call; the stream is forgotten here."""
        if not self.lost:
            self.transport.write(frame(RST_STREAM, 0, sid, _U32.pack(CANCEL)))
        st.state |= LOCAL | RESET
        self._drop(sid, st)

    # -- keepalive ------------------------------------------------------------------------------
    def _tick(self) -> None:
        """The keepalive timer: a PING once nothing has been read for the keepalive time (and a
        call is in flight, unless pings without calls are allowed), unless one is out already."""
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self.lost or self.keepalive_time == math.inf:
            return
        step = self.keepalive.time / 4
        if self.heard:
            self.heard = False
            self._idle = 0.0
        else:
            self._idle += step
        loop = asyncio.get_running_loop()
        if (self._watchdog is None and self._idle >= self.keepalive_time
                and (self.streams or self.keepalive.without_calls)):
            self._idle = 0.0
            self.transport.write(frame(PING, 0, 0, _KEEPALIVE_PING))
            self._watchdog = loop.call_later(self.keepalive.timeout, self._ping_lost)
        self._ticker = loop.call_later(step, self._tick)

    def _ping_lost(self) -> None:
        """No ack within the keepalive timeout: the connection is broken (grpc core's keepalive
        watchdog); the calls in flight fail UNAVAILABLE, never sent again; the next call opens
        a new connection."""
        self._watchdog = None
        if self.lost:
            return
        self.closed = self.lost = True
        self._stop_keepalive()
        self._fail_all(grpc.StatusCode.UNAVAILABLE, "keepalive watchdog timeout")
        self.transport.abort()

    def _stop_keepalive(self) -> None:
        for timer in (self._ticker, self._watchdog):
            if timer is not None:
                timer.cancel()
        self._ticker = self._watchdog = None

    def close(self) -> None:
        self.closed = True
        self._stop_keepalive()
        if self.transport is not None and not self.lost:
            self.transport.write(frame(GOAWAY, 0, 0, _U32.pack(0) + _U32.pack(0)))
            self.transport.close()


class Address(NamedTuple):
    """Where one connection goes: a TCP ``host`` (a name or an address) and ``port``, or with
    ``unix`` a unix socket's path in ``host``; ``name`` the index of the configured entry it comes
    from (its ``:authority``, its TLS server name)."""

    host: str
    port: int
    name: int = 0
    unix: bool = False


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class Channel:
    """Calls to Triton's addresses (``settings.upstream_addresses``, or a unix socket: ``unix``):
    one connection per address, opened at the first call that needs it and again after it breaks;
    ``round_robin`` spreads calls over the addresses, ``pick_first`` keeps to the first that
    answers. With ``round_robin`` a name (``dns:///triton:8001``, ``triton:8001``) stands for every
    address it resolves to, as grpc's dns resolver has it (``resolve``: by a resolver of the
    caller's, a dns: target's own DNS server; else the system's): resolved at the first call and again
    when a connection must be opened anew (at most once in RESOLVE_S; addresses gone are closed
    once their calls are done); with ``pick_first`` the connection tries the name's addresses in
    turn. ``ssl``: TLS (asyncio's, ALPN "h2", as ``gateway.access.client_ssl`` makes it for
    ``upstream.tls``), the certificate checked against ``server_name`` or else the configured host
    (``localhost`` for a unix socket), which is also the calls' ``:authority``, as grpc's
    ``ssl_target_name_override`` has it. An address that refused a connection is passed over for a
    moment (the backoff grpc's channel keeps). ``keepalive``: each connection's (``Keepalive``;
    None: no pings), its time kept per address as a GOAWAY "too_many_pings" doubled it (grpc's
    subchannel does the same). ``max_message``: the largest answer message taken."""

    BACKOFF = 0.25
    CONNECT_S = 20.0  # to connect (TLS handshake included) and read Triton's preface
    RESOLVE_S = 1.0  # a name resolved again at most this often

    def __init__(self, addresses: list[tuple[str, int]], lb_policy: str = "pick_first",
                 path: str = "/inference.GRPCInferenceService/ModelInfer", keepalive: Keepalive | None = None,
                 cancel_unary: bool = True, *, unix: str | None = None, ssl: _ssl.SSLContext | None = None,
                 server_name: str | None = None, max_message: int = MAX_MESSAGE,
                 resolve: Callable[[str, int], Awaitable[list[str]]] | None = None):
        if not addresses and unix is None:
            raise ValueError("an h2 channel needs host:port addresses or a unix socket")
        self.cancel_unary = cancel_unary  # False: a unary call whose caller went away is left to finish (upstream.cancel)
        self.round_robin = lb_policy == "round_robin"
        self.ssl = ssl
        self.max_message = max_message
        if unix is not None:
            self.addresses = [(unix, 0)]
            authorities = [server_name or "localhost"]
            slots = [Address(unix, 0, 0, True)]
        else:
            self.addresses = [(h.strip("[]"), p) for h, p in addresses]
            authorities = [server_name or f"{h}:{p}" for h, p in addresses]
            slots = [Address(h, p, k) for k, (h, p) in enumerate(self.addresses)]
        self._server_names = [server_name or ("localhost" if unix is not None else h) for h, _ in self.addresses]
        # round_robin over a name, or a name resolved by ``resolve`` (a dns: target's own DNS server): its
        # addresses resolved (``_resolve``), the slots made from them
        self._resolver = resolve
        self._names = (self.round_robin or resolve is not None) and any(
            not _literal(h) for h, _ in self.addresses) and unix is None
        self._resolved_at = -math.inf
        self._resolving: asyncio.Future | None = None
        self._authorities = authorities
        self._blocks = [request_block(path, a) for a in authorities]
        self._method_blocks = {path: self._blocks}  # other unary methods' (``blocks``)
        self._stream_blocks = [request_block(STREAM_PATH, a) for a in authorities]
        self.keepalive = keepalive
        self._next = 0
        self._slots: list[Address] = []
        self._conns: list[Connection | None] = []
        self._opening: list[asyncio.Future | None] = []
        self._down: list[float] = []  # monotonic time until which an address is passed over
        self._keepalive_time: list[float] = []
        self._place([] if self._names else slots)

    def _place(self, slots: list[Address]) -> None:
        """The addresses calls go to: connections (and their backoff, keepalive time) kept for those
        still there; those gone closed once their calls are done."""
        old = dict(zip(self._slots, zip(self._conns, self._opening, self._down, self._keepalive_time, strict=True),
                       strict=True))
        default = (None, None, 0.0, self.keepalive.time if self.keepalive is not None else math.inf)
        kept = [old.pop(a, default) for a in slots]
        for conn, opening, _, _ in old.values():
            if opening is not None:
                opening.cancel()
            if conn is not None and not conn.closed:
                conn.closed = True
                if not conn.streams:
                    conn.close()
        self._slots = slots
        self._conns = [k[0] for k in kept]
        self._opening = [k[1] for k in kept]
        self._down = [k[2] for k in kept]
        self._keepalive_time = [k[3] for k in kept]
        self._next %= max(1, len(slots))

    async def _resolve(self, deadline: float) -> None:
        """Every address of the configured names (round_robin over a name), as grpc's dns resolver
        finds them; a name that does not resolve: UNAVAILABLE, unless earlier addresses are kept."""
        if self._resolving is None:
            self._resolving = asyncio.ensure_future(self._lookup())
            self._resolving.add_done_callback(lambda f: (setattr(self, "_resolving", None),
                                                         f.cancelled() or f.exception()))
        try:
            slots = await asyncio.wait_for(asyncio.shield(self._resolving), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        self._resolved_at = time.monotonic()
        if isinstance(slots, grpc.aio.AioRpcError):
            if not self._slots:
                raise slots
            return
        if slots != self._slots:
            self._place(slots)

    async def _lookup(self) -> list[Address] | grpc.aio.AioRpcError:
        loop = asyncio.get_running_loop()
        slots: list[Address] = []
        for k, (host, port) in enumerate(self.addresses):
            if _literal(host):
                slots.append(Address(host, port, k))
                continue
            try:
                if self._resolver is not None:
                    found = await self._resolver(host, port)
                else:
                    found = [sockaddr[0] for *_, sockaddr in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
            except OSError as exc:
                return error(grpc.StatusCode.UNAVAILABLE, f"DNS resolution failed for {host}:{port}: {exc}")
            for ip in found:
                a = Address(ip, port, k)
                if a not in slots:
                    slots.append(a)
        if not slots:
            return error(grpc.StatusCode.UNAVAILABLE, f"DNS resolution failed for {self.addresses[0][0]}: no address")
        return slots

    def _stale(self) -> bool:
        """A name to resolve: never resolved, or a connection to be opened anew (one closed, or one
        that failed to connect: a replica gone or restarted) and the last resolution RESOLVE_S old."""
        if not self._slots:
            return True
        if time.monotonic() - self._resolved_at < self.RESOLVE_S:
            return False
        return any(c is not None and c.closed for c in self._conns) or any(self._down)

    def _order(self) -> list[int]:
        n = len(self._slots)
        if self.round_robin:
            start, self._next = self._next, (self._next + 1) % n
        else:
            start = 0
        order = [(start + k) % n for k in range(n)]
        now = time.monotonic()
        return [i for i in order if self._down[i] <= now] or order

    def blocks(self, path: str, keep: bool = True) -> list[bytes]:
        """Each configured address's header block for unary calls of ``path`` (``call``'s ``blocks``);
        ``keep`` False: not kept (a method a client named, outside Triton's service: the map stays
        bounded)."""
        found = self._method_blocks.get(path)
        if found is None:
            found = [request_block(path, a) for a in self._authorities]
            if keep:
                self._method_blocks[path] = found
        return found

    async def call(self, data: bytes, timeout: float, blocks: list[bytes] | None = None, metadata=None,
                   cancel: bool | None = None) -> bytes:
        """ModelInfer of ``data`` (a request's wire bytes), or the unary method ``blocks`` names
        (``blocks(path)``): the answer's bytes, or AioRpcError (Triton's code, details and
        metadata). ``metadata``: (key, value) pairs sent as header fields (``request_metadata``);
        ``cancel``: whether a caller that goes away resets the call (None: ``cancel_unary``)."""
        conns = self._conns
        blocks = blocks or self._blocks
        extra = request_metadata(metadata) if metadata else b""
        if cancel is None:
            cancel = self.cancel_unary
        deadline = time.monotonic() + timeout
        if len(conns) == 1:
            conn = conns[0]
            if conn is not None and not conn.closed:
                try:
                    return await conn.call(blocks[0], data, timeout, cancel, extra)
                except Unprocessed:  # Triton never started it: once more, on a new connection
                    return await self._again(data, deadline, blocks, extra, cancel, 1)
        return await self._again(data, deadline, blocks, extra, cancel, 0)

    def start(self, data: bytes, timeout: float, blocks: list[bytes], metadata, cancel: bool | None,
              done: Callable[[bytes | grpc.aio.AioRpcError], None]) -> Started | None:
        """``call`` begun at once, not awaited: ``done`` gets what ``call`` would give (the answer's
        bytes or the AioRpcError) as soon as it is read, in that turn of the loop; the ``Started``
        returned is cancelled as an awaiting caller's task is. None where the call cannot begin at
        once (several addresses, the connection not open, no stream slot free): ``call`` it then."""
        conns = self._conns
        if len(conns) != 1:
            return None
        conn = conns[0]
        if conn is None or conn.closed or len(conn.streams) >= conn.peer_streams:
            return None
        resets = self.cancel_unary if cancel is None else cancel
        try:
            extra = request_metadata(metadata) if metadata else b""
        except grpc.aio.AioRpcError as err:  # metadata that cannot be sent
            started = Started(self, done, (), resets)
            started.set_exception(err)
            return started
        started = Started(self, done, (data, time.monotonic() + timeout, blocks, extra), resets)
        try:
            conn.start(blocks[0], data, timeout, extra, started)
        except grpc.aio.AioRpcError as err:  # a deadline already spent
            started.set_exception(err)
        return started

    async def _again(self, data: bytes, deadline: float, blocks: list[bytes], extra: bytes, cancel: bool,
                     tries: int) -> bytes:
        """``call`` on the connection ``_pick`` gives, ``tries`` made already (Unprocessed: one more)."""
        while True:
            try:
                i, conn = await self._pick(deadline)
                return await conn.call(blocks[i], data, max(0.0, deadline - time.monotonic()), cancel, extra)
            except Unprocessed as err:
                tries += 1
                if tries >= 2:
                    raise error(err.code(), err.details()) from None

    async def _pick(self, deadline: float) -> tuple[int, Connection]:
        """The configured address a call goes to (its index: its header blocks) and its connection,
        opened if it must be."""
        if self._names and self._stale():
            await self._resolve(deadline)
        failure = None
        for i in self._order():
            conn = self._conns[i]
            if conn is None or conn.closed:
                slot = self._slots[i]
                try:
                    conn = await self._open(i, deadline)
                except grpc.aio.AioRpcError as err:
                    if err.code() is not grpc.StatusCode.UNAVAILABLE:
                        raise
                    failure = err
                    continue
                return slot.name, conn
            return self._slots[i].name, conn
        raise failure

    def stream_call(self, deserialize: Callable[[bytes], object], timeout: float, metadata=None) -> StreamCall:
        """ModelStreamInfer for one request, used as a grpc.aio stream call is (``StreamCall``)."""
        return StreamCall(self, deserialize, timeout, metadata)

    async def stream(self, timeout: float, metadata=None) -> StreamCall:
        """ModelStreamInfer both ways (``StreamCall`` bidi), its messages and answers as bytes, its
        header block sent: the V2 passthrough's relay."""
        return await StreamCall(self, None, timeout, metadata, True).open()

    async def _open(self, i: int, deadline: float) -> Connection:
        opening = self._opening[i]
        if opening is None:
            slot = self._slots[i]
            opening = self._opening[i] = asyncio.ensure_future(self._connect(slot))

            def opened(f: asyncio.Future) -> None:
                if i < len(self._opening) and self._opening[i] is f:
                    self._opening[i] = None
                if not f.cancelled():
                    f.exception()

            opening.add_done_callback(opened)
        try:
            return await asyncio.wait_for(asyncio.shield(opening), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None

    async def _connect(self, slot: Address) -> Connection:
        """A connection to ``slot``, Triton's once its preface came: TCP or a unix socket, TLS with
        ALPN "h2" where ``ssl`` says so; anything short of that failed to connect (UNAVAILABLE, the
        address backed off)."""
        i = self._slots.index(slot)
        where = f"unix:{slot.host}" if slot.unix else f"{slot.host}:{slot.port}"
        loop = asyncio.get_running_loop()
        keepalive = self.keepalive
        if keepalive is not None:
            old = self._conns[i]
            if old is not None and old.keepalive_time > self._keepalive_time[i]:
                self._keepalive_time[i] = old.keepalive_time  # too_many_pings on the last one
            if self._keepalive_time[i] != keepalive.time:
                keepalive = keepalive._replace(time=self._keepalive_time[i])
        tls = {} if self.ssl is None else {"ssl": self.ssl, "server_hostname": self._server_names[slot.name],
                                           "ssl_handshake_timeout": self.CONNECT_S}

        def protocol() -> Connection:
            return Connection(keepalive, self.max_message)

        # connected once Triton's SETTINGS came (the preface both ways, as grpc's connector waits for
        # them): a socket that closes or speaks no HTTP/2 before (a TLS-only Triton) failed to connect
        start = loop.time()
        try:
            if slot.unix:
                opening = loop.create_unix_connection(protocol, slot.host, **tls)
            else:
                opening = loop.create_connection(protocol, slot.host, slot.port, **tls)
            _, conn = await asyncio.wait_for(opening, self.CONNECT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            why = exc if str(exc) else "timed out"
        else:
            why = self._alpn(conn)
            if why is None:
                try:
                    why = await asyncio.wait_for(asyncio.shield(conn.ready),
                                                 max(0.0, start + self.CONNECT_S - loop.time()))
                except asyncio.TimeoutError:
                    why = "no HTTP/2 preface (SETTINGS) from the server"
                except asyncio.CancelledError:
                    conn.transport.abort()
                    raise
                if why is not None and "preface" not in why:
                    why = f"{why} before the HTTP/2 preface"
            if why is not None:
                conn.transport.abort()
        i = self._slots.index(slot) if slot in self._slots else -1  # (the slots may have changed meanwhile)
        if why is not None:
            if i >= 0:
                self._down[i] = time.monotonic() + self.BACKOFF
            raise error(grpc.StatusCode.UNAVAILABLE, f"failed to connect to all addresses; last error: {where}: {why}")
        if i < 0:  # resolved away while it connected
            conn.close()
            raise Unprocessed(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                              "address resolved away")
        self._down[i] = 0.0
        self._conns[i] = conn
        return conn

    def _alpn(self, conn: Connection) -> str | None:
        """Why a TLS connection is not HTTP/2 (grpc's words), or None."""
        if self.ssl is None:
            return None
        tls = conn.transport.get_extra_info("ssl_object")
        if tls is None or tls.selected_alpn_protocol() != "h2":
            return "Cannot check peer: missing selected ALPN property."
        return None

    async def close(self) -> None:
        if self._resolving is not None:
            self._resolving.cancel()
        for opening in self._opening:
            if opening is not None:
                opening.cancel()
        for conn in self._conns:
            if conn is not None:
                conn.close()
        self._conns = [None] * len(self._conns)


class StreamCall:
    """ModelStreamInfer, used as a grpc.aio stream call is. With one request message (for
    TritonUpstream.stream): ``write`` the request (sent with END_STREAM: the half-close grpc
    clients send after their last write; Triton answers on, a decoupled model's responses all).
    ``bidi`` (the V2 passthrough's relay, ``Channel.stream``): ``open`` sends the header block
    (the caller's ``metadata``, the deadline), each ``write`` one message as it comes (waiting, as
    grpc.aio's does, until Triton's stream and connection windows have taken it), ``done_writing``
    the half-close; a write to a call that has ended is ``asyncio.InvalidStateError``, as grpc.aio's.
    Both: ``read`` each response message (``deserialize``d, or its bytes; several may share a DATA
    frame, one may span frames) and ``grpc.aio.EOF`` at trailers with grpc-status OK, else the
    AioRpcError the unary call raises (Triton's code, details and trailing metadata; deadline:
    DEADLINE_EXCEEDED, ``grpc-timeout`` and a local timer; the connection broken: UNAVAILABLE
    mid-stream). The stream's window is given back as its messages are read. ``cancel`` (the
    caller gone) resets the stream (RST_STREAM CANCEL): Triton cancels the model's request."""

    __slots__ = ("channel", "deserialize", "deadline", "conn", "sid", "st", "buf", "timer", "data", "tries",
                 "extra", "bidi", "counted")

    def __init__(self, channel: Channel, deserialize: Callable[[bytes], object] | None, timeout: float,
                 metadata=None, bidi: bool = False):
        self.channel, self.deserialize = channel, deserialize
        self.deadline = time.monotonic() + timeout
        self.extra = request_metadata(metadata) if metadata else b""
        self.bidi = bidi
        self.conn: Connection | None = None
        self.st: _Stream | None = None
        self.sid = 0
        self.buf = b""
        self.counted = 0  # bytes of a message read in part whose window was given back already
        self.timer: asyncio.TimerHandle | None = None
        self.data = None if bidi else b""
        self.tries = 0

    async def open(self) -> StreamCall:
        """A bidi stream's header block sent (grpc core sends a call's initial metadata at once)."""
        await self._start()
        return self

    async def write(self, message) -> None:
        data = message if isinstance(message, bytes) else message.SerializeToString()
        if not self.bidi:
            self.data = data
            return await self._start()
        await self._send(b"\x00" + _U32.pack(len(data)) + data if len(data) < 65536 else (data,), False)

    async def _send(self, data, fin: bool) -> None:
        st = self.st
        if st.end is not None or self.conn.streams.get(self.sid) is not st:
            raise asyncio.InvalidStateError("RPC already finished.")
        if type(data) is tuple:  # a large message: its prefix and its bytes as they are, not joined
            waiting = self.conn.send(self.sid, st, b"\x00" + _U32.pack(len(data[0])), False)
            if waiting is None:
                waiting = self.conn.send(self.sid, st, data[0], fin)
            else:
                if fin:
                    st.state |= LOCAL
                self.conn.queue(st, memoryview(data[0]))  # (counted in what waits, as every queued byte)
        else:
            waiting = self.conn.send(self.sid, st, data, fin)
        if waiting is not None:
            try:
                await waiting
            except asyncio.CancelledError:
                self.cancel()  # the writer gone mid-message: the call with it (grpc.aio's way)
                raise

    async def _start(self) -> None:
        i, conn = await self.channel._pick(self.deadline)
        try:
            self.sid, self.st = await conn.open(self.channel._stream_blocks[i], self.data, self.deadline, True,
                                                self.extra)
        except Unprocessed as err:  # its connection closed since it was picked: once more, on a new one
            self.tries += 1
            if self.tries >= 2:
                raise error(err.code(), err.details()) from None
            return await self._start()
        self.conn = conn
        loop = conn.loop
        self.timer = loop.call_at(loop.time() + (self.deadline - time.monotonic()), conn._expire, self.sid, self.st)

    async def done_writing(self) -> None:
        """The half-close (one request: nothing to do, it went with END_STREAM); a call that has
        ended, or was half-closed, is left as it is."""
        st = self.st
        if not self.bidi or st is None or st.fin or st.end is not None or self.conn.streams.get(self.sid) is not st:
            return
        await self._send(b"", True)

    def __aiter__(self):
        return self

    async def __anext__(self):  # (no async generator around ``read``: one step less per message)
        item = await self.read()
        if item is grpc.aio.EOF:
            raise StopAsyncIteration
        return item

    async def read(self):
        st = self.st
        buf = self.buf
        while True:
            if len(buf) >= 5:
                if buf[0]:
                    self.cancel()
                    raise error(grpc.StatusCode.INTERNAL, "Failed to parse server response")
                size = _U32.unpack_from(buf, 1)[0]
                if size > self.conn.max_message:  # refused before it is held (grpc's words)
                    self.cancel()
                    raise error(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"Received message larger than max ({size} vs. {self.conn.max_message})")
                end = 5 + size
                if len(buf) >= end:
                    self.buf = buf[end:]
                    st.unacked += end - self.counted
                    self.counted = 0
                    if st.unacked >= STREAM_WINDOW // 2 and self.conn.streams.get(self.sid) is st:
                        self.conn.transport.write(frame(WINDOW_UPDATE, 0, self.sid, _U32.pack(st.unacked)))
                        st.inwin += st.unacked
                        st.unacked = 0
                    return buf[5:end] if self.deserialize is None else self.deserialize(buf[5:end])
            if st.chunks:
                buf = buf + b"".join(st.chunks) if buf else b"".join(st.chunks)
                st.chunks.clear()
                continue
            self.buf = buf
            if len(buf) > self.counted + STREAM_WINDOW // 4:  # a large message in part: its window given back
                st.unacked += len(buf) - self.counted  # as it comes (its size is within max_message)
                self.counted = len(buf)
                if self.conn.streams.get(self.sid) is st:
                    self.conn.transport.write(frame(WINDOW_UPDATE, 0, self.sid, _U32.pack(st.unacked)))
                    st.inwin += st.unacked
                    st.unacked = 0
            if st.end is not None:
                return await self._ended(st.end)
            st.future = self.conn.loop.create_future()
            try:
                await st.future
            except asyncio.CancelledError:
                self.cancel()
                raise

    async def _ended(self, end):
        self.timer.cancel()
        if end is True:
            if self.buf:  # a message cut short
                raise error(grpc.StatusCode.INTERNAL, "Failed to parse server response")
            return grpc.aio.EOF
        if isinstance(end, Unprocessed):  # Triton never started it: once more, on a new connection
            self.tries += 1
            if self.tries < 2 and not self.bidi:  # (a bidi stream's messages are not kept to be sent again)
                await self._start()
                return await self.read()
            raise error(end.code(), end.details())
        raise end

    def done(self) -> bool:
        return self.st is None or self.st.end is not None

    def close(self, answered: bool) -> None:
        """The caller is through with the call. ``answered``: Triton's final response was read, so
        the request is done and its trailers are on their way (Triton writes them after it): the
        stream is left to end with them, not reset (RST_STREAM would cancel a finished request, and
        Triton logs the cancellation); its deadline timer goes once they come (if they never do, it
        resets the stream at the deadline). Otherwise ``cancel``."""
        st = self.st
        if st is None:
            return
        if st.end is not None:  # ended: only the deadline timer left to stop
            self.timer.cancel()
        elif not answered:
            self.cancel()
        else:  # woken by the trailers (or by DATA after the final response: not read, reset)
            st.future = self.conn.loop.create_future()
            st.future.add_done_callback(self._settled)

    def _settled(self, _future) -> None:
        if self.st.end is None:
            self.cancel()
        else:
            self.timer.cancel()

    def cancel(self) -> None:
        """The caller gone: RST_STREAM(CANCEL), Triton cancels the request."""
        st = self.st
        if st is None or st.end is not None:
            return
        if self.timer is not None:
            self.timer.cancel()
        if self.conn.streams.get(self.sid) is st:
            self.conn._reset(self.sid, st)
        st.end = error(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")
