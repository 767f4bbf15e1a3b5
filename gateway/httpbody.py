"""A large HTTP/1.1 body read once, into a buffer sized by its Content-Length; a large answer
written after its header, not joined to it.

Sanic's ``request.receive_body()`` copies each received chunk three times (out of the connection's
buffer into a slice, into ``bytes``, then all chunks joined): a 16 MiB body is copied 48 MiB more
than it needs. ``read_into_buffer`` copies each chunk once, out of the connection's receive buffer
into one buffer allocated up front and not zero-filled (its size bounded by
``limits.max_request_bytes``, checked first), and leaves the stream as sanic's own reader does at
the end of the body. Routes that take a large binary body (GRPS ``bin_data``) opt in
(``Edge.route(..., buffered=True)``); their handlers get ``request.body`` as a ``memoryview``
(bytes-like: ``len``, slices, ``bytes()``, orjson, ``b"".join`` take it). Chunked bodies,
HTTP/2+ and small bodies take sanic's reader.

``raw(body, ...)`` is ``sanic.response.raw`` but for a body of 64 KiB or more: ``Unjoined`` writes
the header, then the body as it is (sanic writes ``header + body``: a copy of the whole body); the
bytes on the wire are the same. The body is counted (the edge's access line, metrics) before
sanic calls ``send``.

It reads sanic 25.12's ``Http`` state (``recv_buffer``, ``request_bytes_left``, ...), which is
pinned; tests/unit/test_httpbody.py checks the bytes against sanic's reader through a real server.
"""

from __future__ import annotations

import numpy as np
from sanic import HTTPResponse
from sanic.exceptions import PayloadTooLarge
from sanic.http.http1 import HTTP_CONTINUE, Http

MIN_BYTES = 1 << 20  # smaller bodies: sanic's reader (the copies cost less than the difference)
UNJOINED_MIN = 1 << 16  # smaller answers: one write of header and body


def wants_buffer(stream) -> bool:
    """Whether ``read_into_buffer`` takes this request's body (HTTP/1.1, a Content-Length, large)."""
    return (type(stream) is Http and stream.request_body is True
            and (stream.request_bytes_left or 0) >= MIN_BYTES)


async def read_into_buffer(stream: Http) -> memoryview:
    """The rest of the body as one memoryview of bytes; PayloadTooLarge over the stream's size limit."""
    size = stream.request_bytes_left
    if stream.request_bytes > stream.request_max_size:
        stream.keep_alive = False
        raise PayloadTooLarge("Request body exceeds the size limit")
    if stream.expecting_continue:
        stream.expecting_continue = False
        await stream._send(HTTP_CONTINUE)
    out = memoryview(np.empty(size, dtype=np.uint8))  # as bytearray(size) without zero-filling it first
    buf = stream.recv_buffer
    pos = 0
    while pos < size:
        if not buf:
            await stream._receive_more()
            continue
        n = min(len(buf), size - pos)
        with memoryview(buf) as received:
            out[pos : pos + n] = received[:n]
        del buf[:n]
        pos += n
        stream.request_bytes_left = size - pos
    stream.request_body = None  # the body is consumed, as at the end of sanic's reader
    return out


class Unjoined(HTTPResponse):
    """An answer whose body is written after its header, not concatenated to it first."""

    async def send(self, data=None, end_stream=None):
        body = self.body
        if data is not None or end_stream is False or not body:
            return await super().send(data, end_stream)
        self.body = b""
        self.headers["content-length"] = len(body)
        await super().send(b"", end_stream=False)  # the header alone (sanic: a body of known length follows)
        if self.stream is not None and self.stream.send is not None:  # None: a HEAD request's answer is complete
            await super().send(body, end_stream=True)


def raw(body, status: int = 200, headers: dict | None = None,
        content_type: str = "application/octet-stream") -> HTTPResponse:
    """``sanic.response.raw``; a large body (bytes or a byte memoryview) is not joined to the header."""
    cls = Unjoined if len(body) >= UNJOINED_MIN else HTTPResponse
    return cls(body, status=status, headers=headers, content_type=content_type)
