"""One gRPC call served by gateway/h2/server.py: its state on the connection and the context its
handler gets, with what our handlers and grpc's own servicers (health, reflection) use of
``grpc.aio.ServicerContext``, answering as grpc.aio's server does.

The answer on the wire: response headers with the first message, then trailers (``grpc-status``,
``grpc-message`` percent-encoded, the trailing metadata, ``-bin`` values in base64 without padding);
a call that ends before any message is answered "trailers-only" (one HEADERS frame with
``:status``, ``content-type`` and the status), as grpc core answers it. A handler that raises is
UNKNOWN "Unexpected <class ...>: ..." (grpc.aio's words); ``abort`` ends it with its code.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import math
import time
import zlib
from collections.abc import Callable

import grpc

from gateway.h2.core import LOCAL, OPEN
from gateway.h2.wire import literal, string

_STATUS = {c: str(c.value[0]).encode() for c in grpc.StatusCode}
RESPONSE_HEADERS = b"\x88" + literal(31, "application/grpc") + literal("grpc-accept-encoding", "identity, deflate, gzip")
TRAILERS_ONLY = b"\x88" + literal(31, "application/grpc")  # :status 200 (static index 8), content-type
_STATUS_NAME = b"\x00" + string("grpc-status")
_MESSAGE_NAME = b"\x00" + string("grpc-message")
OK_TRAILERS = _STATUS_NAME + string("0") + _MESSAGE_NAME + string("")
# what grpc core keeps out of a call's invocation metadata (pseudo-headers are left out too)
_NOT_METADATA = frozenset({"te", "content-type", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding",
                           "grpc-internal-encoding-request"})
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_KEEP = frozenset(b" !\"#$&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~")


def percent_encode(text: str) -> bytes:
    """``grpc-message`` as grpc writes it: UTF-8, every byte outside printable ASCII and ``%`` as %XX."""
    raw = text.encode("utf-8", "replace")
    if all(b in _KEEP for b in raw):
        return raw
    return b"".join(bytes((b,)) if b in _KEEP else b"%%%02X" % b for b in raw)


def metadata_fields(metadata) -> bytes:
    """Metadata as header fields: keys lowercase, a ``-bin`` key's value in base64 without padding."""
    out = []
    for key, value in metadata or ():
        key = key.lower()
        if key.endswith("-bin"):
            raw = value if isinstance(value, bytes) else value.encode()
            value = base64.b64encode(raw).rstrip(b"=")
        out.append(literal(key, value))
    return b"".join(out)


def trailers(code: grpc.StatusCode, details: str, metadata) -> bytes:
    if code is grpc.StatusCode.OK and not details:
        block = OK_TRAILERS
    else:
        block = _STATUS_NAME + string(_STATUS[code]) + _MESSAGE_NAME + string(percent_encode(details or ""))
    return block + metadata_fields(metadata) if metadata else block


_PSEUDO = frozenset({":method", ":scheme", ":path", ":authority"})
_CONNECTION_FIELDS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})


def read_metadata(fields) -> tuple[dict[str, str], tuple[tuple[str, str | bytes], ...]]:
    """(the pseudo-headers and gRPC's own fields, the invocation metadata) of a request's headers.
    A malformed request (RFC 9113 8.2, 8.3: a name with capitals, a pseudo-header unknown,
    repeated or after a regular field, a connection-specific field, ``te`` other than
    ``trailers``, ``:method``, ``:scheme`` or ``:path`` missing or empty) has ``"!bad"`` among its
    own fields (decoded blocks are remembered: the checks cost once per block)."""
    own, md = {}, []
    regular = False
    for key, value in fields:
        if key[0] == ":":
            if regular or key not in _PSEUDO or key in own:
                own["!bad"] = key
            own[key] = value
            continue
        regular = True
        if key in _NOT_METADATA:
            if key == "te" and value != "trailers":
                own["!bad"] = key
            own[key] = value
            continue
        if not key.islower() and key != key.lower() or key in _CONNECTION_FIELDS:
            own["!bad"] = key
        if key.endswith("-bin"):
            md.append((key, base64.b64decode(value + "=" * (-len(value) % 4))))
        else:
            md.append((key, value))
    if not own.get(":path") or ":method" not in own or ":scheme" not in own:
        own["!bad"] = ":path"
    return own, tuple(md)


def timeout(text: str | None) -> float | None:
    """``grpc-timeout`` in seconds (None: absent or not one)."""
    if (not text or len(text) < 2 or not text.isascii() or not text[:-1].isdigit()
            or text[-1] not in _TIMEOUT_UNITS):
        return None
    return int(text[:-1]) * _TIMEOUT_UNITS[text[-1]]


def decompress(encoding: str, data: bytes, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of the message decompressed (a longer one is refused by its size,
    not inflated whole: a gzip bomb)."""
    return zlib.decompressobj(31 if encoding == "gzip" else 15).decompress(data, limit + 1)


class Rpc:
    """A call on a stream, and its handler's context (``grpc.aio.ServicerContext``'s methods)."""

    __slots__ = ("conn", "sid", "method", "handler", "metadata", "deadline", "encoding", "buf", "messages",
                 "reader", "state", "task", "timer", "window", "out", "unacked", "status", "message",
                 "trailing", "headers_sent", "cancelled_", "expired", "callbacks", "drained",
                 "held", "inwin", "big", "need", "flag", "__weakref__")
    fin = False  # its answer's DATA never ends the stream: the trailers do (gateway/h2/core.py)

    def __init__(self, conn, sid: int, method: str, handler, metadata, deadline: float | None,
                 encoding: str | None, window: int):
        self.conn = conn
        self.sid = sid
        self.method = method
        self.handler = handler
        self.metadata = metadata
        self.deadline = deadline  # time.monotonic() at which it expires, or None
        self.encoding = encoding  # the request's grpc-encoding (None: identity)
        self.buf = b""  # request bytes not yet a whole message
        self.messages: collections.deque = collections.deque()  # whole request messages not yet read
        self.reader: asyncio.Future | None = None  # the handler waiting for a request message
        self.state = OPEN  # RFC 9113 5.1 (gateway/h2/core.py): REMOTE once the client's END_STREAM came,
        #                  LOCAL once our trailers are written or queued, or the stream reset
        self.task: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.window = window  # what we may still send on this stream
        self.out: collections.deque | None = None  # answer bytes (and the trailers) waiting for a window
        self.unacked = 0  # request bytes read by the handler, not yet given back (WINDOW_UPDATE)
        self.status = grpc.StatusCode.OK  # code() and details(): the call's status so far
        self.message = ""
        self.trailing = ()
        self.headers_sent = False
        self.cancelled_ = False
        self.expired = False
        self.callbacks: list | None = None
        self.drained: asyncio.Future | None = None  # a streaming handler waiting for its answers to go out
        self.held = 0  # request bytes held (partial and unread messages)
        self.inwin = 0  # what the client may still send on this stream (our window)
        self.big = None  # a large message being gathered (io.BytesIO; server.BIG), ``need`` bytes short,
        #                  ``flag`` its compressed flag (both set with it)

    # -- the request's messages (stream_unary, stream_stream) -------------------------------
    async def read(self):
        """The next request message, or ``grpc.aio.EOF`` after the client's last."""
        while not self.messages:
            if self.state:  # the client's last came, or the call is over
                return grpc.aio.EOF
            self.reader = self.conn.loop.create_future()
            await self.reader
        data = self.messages.popleft()
        self.conn.consumed(self, len(data) + 5)
        deserialize = self.handler.request_deserializer
        return data if deserialize is None else deserialize(data)

    def __aiter__(self):
        return self

    async def __anext__(self):
        msg = await self.read()
        if msg is grpc.aio.EOF:
            raise StopAsyncIteration
        return msg

    # -- answering -----------------------------------------------------------------------------
    async def write(self, message) -> None:
        serialize = self.handler.response_serializer
        data = message if serialize is None else serialize(message)
        self.conn.send_message(self, data)
        if self.out:  # the client's window is spent: wait until it takes them
            self.drained = self.conn.loop.create_future()
            await self.drained

    async def send_initial_metadata(self, metadata) -> None:
        self.conn.send_headers(self, metadata_fields(metadata))

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()) -> None:
        self._status(code, details, trailing_metadata)
        raise grpc.aio.AbortError()

    def _status(self, code: grpc.StatusCode, details: str, trailing) -> None:
        """The status a call ends with, as grpc.aio's ``abort`` sets it (OK: UNKNOWN, abort ends a call in error)."""
        self.status, self.message = grpc.StatusCode.UNKNOWN if code is grpc.StatusCode.OK else code, details
        if trailing:
            self.trailing = tuple(trailing)

    # -- answering from a callback (a handler's ``now``: no task) --------------------------------
    def reply(self, answer: bytes, trailing=()) -> None:
        """The call answered: ``answer`` (serialized) and trailers with ``trailing`` (nothing once the call is over)."""
        if not self.state & LOCAL:
            self.trailing = trailing
            self.conn.send_message(self, answer, True)

    def end(self, code: grpc.StatusCode, details: str, trailing=()) -> None:
        """The call ended with ``code`` as ``abort`` ends it (nothing once the call is over)."""
        if not self.state & LOCAL:
            self._status(code, details, trailing)
            self.conn.finish(self)

    def end_cancelled(self) -> None:
        """The call's task (or ``now``'s stand-in) cancelled: DEADLINE_EXCEEDED once its deadline
        passed, else CANCELLED (the server stopping); nothing once the call is over (the client reset
        the stream, or the connection is gone)."""
        if self.expired:
            self.end(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        else:
            self.end(grpc.StatusCode.CANCELLED, "Cancelled")

    # -- grpc.aio.ServicerContext ------------------------------------------------------------
    def invocation_metadata(self):
        return self.metadata

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def set_trailing_metadata(self, metadata) -> None:
        self.trailing = tuple(metadata)

    def trailing_metadata(self):
        return self.trailing

    def set_code(self, code: grpc.StatusCode) -> None:
        self.status = code

    def set_details(self, details: str) -> None:
        self.message = details

    def code(self) -> grpc.StatusCode:
        return self.status

    def details(self) -> str:
        return self.message

    def peer(self) -> str:
        return self.conn.peer

    def peer_identities(self):
        return None

    def peer_identity_key(self):
        return None

    def auth_context(self) -> dict:
        return {}

    def set_compression(self, _compression) -> None:
        pass  # answers go uncompressed

    def disable_next_message_compression(self) -> None:
        pass

    def cancelled(self) -> bool:
        return self.cancelled_

    def done(self) -> bool:
        return bool(self.state & LOCAL)

    def add_done_callback(self, callback: Callable) -> None:
        if self.state & LOCAL:
            callback(self)
        else:
            (self.callbacks if self.callbacks is not None else self._callbacks()).append(callback)

    def _callbacks(self) -> list:
        self.callbacks = []
        return self.callbacks

    def run_callbacks(self) -> None:
        callbacks, self.callbacks = self.callbacks, None
        for callback in callbacks or ():
            try:
                callback(self)
            except Exception:  # noqa: BLE001 - as grpc.aio: a callback's failure ends nothing else
                pass


async def serve(rpc: Rpc) -> None:
    """Runs one call's handler and answers with what it returned or raised (the task of the call)."""
    handler = rpc.handler
    conn = rpc.conn
    try:
        if conn.queued > conn.SEND_CAP:  # the client takes no answers: none more made for it till it does
            await conn.room()
            if rpc.state & LOCAL:
                return
        if handler.request_streaming:
            request = rpc
        else:
            deserialize = handler.request_deserializer
            request = rpc.messages.popleft() if deserialize is None else deserialize(rpc.messages.popleft())
        if handler.unary_unary is not None or handler.stream_unary is not None:
            fn = handler.unary_unary if handler.unary_unary is not None else handler.stream_unary
            answer = await fn(request, rpc)
            if answer is not None and not rpc.state & LOCAL:
                serialize = handler.response_serializer
                conn.send_message(rpc, answer if serialize is None else serialize(answer), True)
                return
        else:
            fn = handler.unary_stream if handler.unary_stream is not None else handler.stream_stream
            result = fn(request, rpc)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    await rpc.write(item)
            else:
                await result
    except grpc.aio.AbortError:
        pass
    except asyncio.CancelledError:
        return rpc.end_cancelled()
    except Exception as exc:  # noqa: BLE001 - as grpc.aio: the client hears UNKNOWN
        rpc.status, rpc.message = grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}"
    if not rpc.state & LOCAL:
        conn.finish(rpc)


def deadline_of(value: str | None) -> float | None:
    seconds = timeout(value)
    if seconds is None or seconds > 1e8 or math.isinf(seconds):
        return None
    return time.monotonic() + seconds
