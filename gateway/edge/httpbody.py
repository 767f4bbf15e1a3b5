"""A large HTTP/1.1 body read once, into a buffer sized by its Content-Length; a large answer
written after its header, not joined to it.

Sanic's ``request.receive_body()`` copies each received chunk three times (out of the connection's
buffer into a slice, into ``bytes``, then all chunks joined), and its protocol two more before that
(uvloop's read buffer into ``bytes``, appended to the connection's buffer): a 16 MiB body is copied
about five times. ``read_into_buffer`` allocates one buffer up front, sized by the Content-Length
(bounded by ``limits.max_request_bytes``, checked first; not zero-filled), takes what sanic has
already received of the body, and has the socket read the rest straight into it: the connection's
protocol is swapped for a ``BufferedProtocol`` (``_Into``) that hands out the buffer's free part
and never more, so a pipelined request's bytes stay in the socket, and sanic's protocol is put back
at the end of the body (its idle clock kept, a lost connection passed on to it); over TLS the
decrypted chunks are copied once out of sanic's buffer instead. The stream is
left as sanic's own reader leaves it at the end of the body. Routes that take a large binary body
(GRPS ``bin_data``, V2 REST) opt in (``Edge.route(..., buffered=True)``); their handlers get
``request.body`` as a ``memoryview`` (bytes-like: ``len``, slices, ``bytes()``, orjson,
``b"".join`` take it). Chunked bodies, HTTP/2+ and small bodies take sanic's reader, but for a
small body that has already arrived whole (with its header, nearly always): that one is taken out
of sanic's buffer as it is (``received``, every route), without the reader's async generator and
its chunk list.

``raw(body, ...)`` is ``sanic.response.raw``, and every dialect's answers are made by it: an
``Answer``, whose header lines are encoded without sanic's character stripping where there is
nothing to strip (printable names and values: the same bytes); for a body of 64 KiB or more an ``Unjoined`` answer, which writes the header, then the
body as it is (sanic writes ``header + body``: a copy of the whole body); the bytes on the wire
are the same. The body is counted (the edge's access line, metrics) before sanic calls ``send``.

It reads sanic 25.12's ``Http`` state (``recv_buffer``, ``request_bytes_left``, ...) and its
protocol's (``transport``, ``_time``, ``connection_lost``), which are pinned;
tests/unit/loops/test_httpbody.py checks the bytes against sanic's reader through a real server, on
asyncio's loop and on uvloop (the workers').
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
from sanic import HTTPResponse
from sanic.exceptions import PayloadTooLarge
from sanic.helpers import has_message_body
from sanic.http import http1
from sanic.http.http1 import Http

from gateway.core.parts import part_size
from gateway.edge import sanicx

HTTP_CONTINUE = getattr(http1, "HTTP_CONTINUE", b"HTTP/1.1 100 Continue\r\n\r\n")

MIN_BYTES = 1 << 20  # smaller bodies: sanic's reader (the copies cost less than the difference)
UNJOINED_MIN = 1 << 16  # smaller answers: one write of header and body


def received(stream) -> bytes | None:
    """The whole body when sanic has already received all of it (a small request's body nearly
    always comes in the same read as its header), else None for sanic's reader to read: the bytes
    and the stream's state are what ``request.receive_body()`` leaves, without its async generator
    and its list of chunks. Not for a chunked
    body, one over the size limit (sanic's reader refuses it), nor one waiting for its ``100 Continue``.
    Sanic's reader would also dispatch the ``http.lifecycle.read_body`` signal, which no gateway
    app handles."""
    if (not sanicx.BODY_READER or type(stream) is not Http or stream.request_body is not True
            or stream.expecting_continue):
        return None
    left, buf = stream.request_bytes_left, stream.recv_buffer
    if not left or len(buf) < left or stream.request_bytes > stream.request_max_size:
        return None
    data = bytes(buf[:left])
    del buf[:left]
    stream.request_bytes_left = 0
    stream.request_body = None  # the body is consumed, as at the end of sanic's reader
    return data


def wants_buffer(stream) -> bool:
    """Whether ``read_into_buffer`` takes this request's body (HTTP/1.1, a Content-Length, large)."""
    return (sanicx.BODY_READER and type(stream) is Http and stream.request_body is True
            and (stream.request_bytes_left or 0) >= MIN_BYTES)


async def read_into_buffer(stream: Http, alloc: Callable[[int], memoryview | None] | None = None) -> memoryview:
    """The rest of the body as one memoryview of bytes; PayloadTooLarge over the stream's size limit.
    ``alloc(size)``: a writable buffer of exactly that size to read it into (None: one of its own)."""
    size = stream.request_bytes_left
    if stream.request_bytes > stream.request_max_size:
        stream.keep_alive = False
        raise PayloadTooLarge("Request body exceeds the size limit")
    if stream.expecting_continue:
        stream.expecting_continue = False
        await stream._send(HTTP_CONTINUE)
    out = alloc(size) if alloc is not None else None
    if out is None:
        out = memoryview(np.empty(size, dtype=np.uint8))  # as bytearray(size) without zero-filling it first
    buf = stream.recv_buffer
    pos = min(len(buf), size)  # what sanic has already received of the body
    if pos:
        with memoryview(buf) as received:
            out[:pos] = received[:pos]
        del buf[:pos]
    if pos < size and stream.protocol.transport.get_extra_info("sslcontext") is None:
        await _read_direct(stream.protocol, out, pos)
    else:  # TLS: the decrypted bytes come through sanic's buffer, each chunk copied once out of it
        while pos < size:
            if not buf:
                await stream._receive_more()
                continue
            n = min(len(buf), size - pos)
            with memoryview(buf) as received:
                out[pos : pos + n] = received[:n]
            del buf[:n]
            pos += n
    stream.request_bytes_left = 0
    stream.request_body = None  # the body is consumed, as at the end of sanic's reader
    return out


async def _read_direct(protocol, out: memoryview, pos: int) -> None:
    """The rest of the body read by the socket straight into ``out`` (``_Into``), then the
    connection handed back to sanic's protocol for whatever follows (a pipelined request)."""
    transport = protocol.transport
    into = _Into(protocol, out, pos, asyncio.get_running_loop().create_future())
    transport.pause_reading()  # reading restarts with the buffered protocol's callbacks (uvloop)
    transport.set_protocol(into)
    transport.resume_reading()
    try:
        await into.done
    finally:
        transport.pause_reading()
        transport.set_protocol(protocol)
        if not transport.is_closing():
            transport.resume_reading()


class _Into(asyncio.BufferedProtocol):
    """Receives into ``out[pos:]``, never past its end (the next request's bytes stay in the
    socket for sanic); the connection's other events go to sanic's protocol."""

    __slots__ = ("protocol", "out", "pos", "done")

    def __init__(self, protocol, out: memoryview, pos: int, done: asyncio.Future):
        self.protocol, self.out, self.pos, self.done = protocol, out, pos, done

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.out[self.pos :]

    def buffer_updated(self, nbytes: int) -> None:
        self.pos += nbytes
        self.protocol._time = time.monotonic()  # sanic's idle clock (request_timeout), as its data_received
        if self.pos >= len(self.out):  # the whole body: no more reads (an empty buffer is an error)
            self.protocol.transport.pause_reading()
            if not self.done.done():
                self.done.set_result(None)

    def eof_received(self):
        return None  # the transport closes; connection_lost follows

    def connection_lost(self, exc) -> None:
        self.protocol.connection_lost(exc)  # sanic's: cancels the handler (as in its own reader)
        self.done.cancel()

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()


class Answer(HTTPResponse):
    """``sanic.HTTPResponse`` whose header lines are encoded without a ``str.translate`` of each name
    and value. Sanic strips CR, LF and NUL from every name and value (``_sanitize_header_value``),
    most of what its header lines cost an answer. A printable name
    or value holds none of the three, so it is encoded as it is, and only one that is not goes
    through sanic's own stripping: the bytes are sanic's in every case
    (tests/unit/test_httpbody_answer.py holds them to sanic's for generated headers)."""

    __slots__ = ()

    @property
    def processed_headers(self) -> list[tuple[bytes, bytes]]:
        if not sanicx.ANSWER_HEADERS:
            return super().processed_headers
        headers = self.headers
        if has_message_body(self.status):
            headers.setdefault("content-type", self.content_type)
        strip = self._sanitize_header_value
        lines = []
        for name, value in headers.items():
            if value.__class__ is not str:
                value = f"{value}"
            # a printable str holds no CR, LF, NUL or lone surrogate: sanic's stripping and its
            # errors="surrogateescape" change nothing in it
            lines.append((name.encode("ascii") if name.isprintable() else strip(name).encode("ascii"),
                          value.encode() if value.isprintable() else strip(value).encode(errors="surrogateescape")))
        return lines


def _head_only(stream) -> bool:
    """A HEAD request's answer: sanic writes its header alone, and its later body writes are a plain
    function (``head_response_ignored``), which ``HTTPResponse.send`` cannot await."""
    return getattr(stream, "head_only", False)


class Unjoined(Answer):
    """An answer whose body is written after its header, not concatenated to it first (HEAD: as
    sanic answers it, the header alone)."""

    def _take_parts(self) -> list:
        """The body's parts, taken out of the answer: written one after another after its header."""
        body, self.body = self.body, b""
        return [body] if body else []

    async def send(self, data=None, end_stream=None):
        if data is not None or end_stream is False:
            return await super().send(data, end_stream)
        parts = self._take_parts()
        if not parts:
            return await super().send(data, end_stream)
        self.headers["content-length"] = part_size(parts)
        if _head_only(self.stream):  # the header alone, and the answer complete
            return await super().send(b"", end_stream=True)
        await super().send(b"", end_stream=False)  # the header alone (sanic: a body of known length follows)
        if self.stream is not None and self.stream.send is not None:
            for part in parts[:-1]:
                await super().send(part, end_stream=False)
            await super().send(parts[-1], end_stream=True)


class Pieces(Unjoined):
    """An answer whose body is several pieces (a V2 binary answer: its JSON header, then each
    output's bytes as gRPC received them), written one after another after the header, never
    joined. ``size`` is the body's length (``body`` stays empty)."""

    def __init__(self, pieces: list, status: int = 200, headers: dict | None = None,
                 content_type: str = "application/octet-stream"):
        super().__init__(b"", status=status, headers=headers, content_type=content_type)
        self.pieces = [p for p in pieces if len(p)]
        self.size = part_size(self.pieces)

    def _take_parts(self) -> list:
        parts, self.pieces = self.pieces, []
        return parts


def pieces(parts: list, status: int = 200, headers: dict | None = None,
           content_type: str = "application/octet-stream") -> HTTPResponse:
    """An answer of ``parts`` (bytes or byte memoryviews) one after another: a large one written piece
    by piece (``Pieces``), a small one joined into one write."""
    if part_size(parts) >= UNJOINED_MIN:
        return Pieces(parts, status=status, headers=headers, content_type=content_type)
    return Answer(b"".join(parts), status=status, headers=headers, content_type=content_type)


def raw(body, status: int = 200, headers: dict | None = None,
        content_type: str = "application/octet-stream") -> HTTPResponse:
    """``sanic.response.raw`` as an ``Answer``; a large body (bytes or a byte memoryview) is not
    joined to the header."""
    cls = Unjoined if len(body) >= UNJOINED_MIN else Answer
    return cls(body, status=status, headers=headers, content_type=content_type)
