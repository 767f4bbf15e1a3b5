"""The HTTP fast lane: a complete small POST to an inference route answered without sanic's
per-request machinery, every other request through sanic as before.

Sanic handles each HTTP/1.1 request in its connection's task: the received bytes wake the task
(an ``asyncio.Event``), ``http1_request_header`` parses the header, a ``Request`` is built (its URL
parsed again by httptools), ``handle_request`` routes it, runs the handler, connects the answer to
the stream and writes it through ``http1_response_header``. Against the floor of the stack
(``floor_ratio.sh small``, a minimal Sanic route) that machinery is a large share of a small
predict's CPU (docs/benchmarks.md).

``FastLane`` is sanic's ``HttpProtocol`` with one change in ``data_received``: when the connection
is idle (sanic's ``Http`` waiting for a request, nothing buffered, no fast request in flight) and
the bytes just received are exactly one whole request that sanic would parse the same way and that
needs nothing but its handler:

    POST <origin-form target without query or fragment, ASCII> HTTP/1.1
    a Content-Length (sanic's own parsing of it) and the whole body, nothing after it
    no Transfer-Encoding, Expect or Upgrade; Connection absent or keep-alive; no header line sanic
    would refuse; the header within limits.max_header_bytes, the body within max_request_bytes and
    under httpbody.MIN_BYTES (larger bodies take the one-copy reader)
    a route registered with ``fast`` (``Edge.route``): a handler that answers a POST with one
    response and never streams (TF Serving REST; KServe V2 REST but ``generate_stream``; GRPS
    predict where streaming is asked in the query, its default ``ctrl_mode``)

then the route's handler runs in a task of its own with a ``Light`` request (method, path, the
headers as sanic's ``Header``, the body, the app), and the answer is written with sanic's own
header formatting, in the order and with the bytes sanic writes (content-length, then connection,
no alt-svc: the worker runs sanic's TouchUp, without which the fast lane stays off). The edge
(request id, keys, admission, deadline, metrics, access line, errors) runs as for any request:
it is the route's handler. Anything else, the first byte not matching included, goes to sanic
untouched.

While a fast request is in flight, sanic's ``Http`` is in its HANDLER stage (so its idle timeout,
``close_if_idle`` at a drain and its response timeout see a request running, as they would), and
bytes that arrive meanwhile (a pipelined request) are held back, then handed on in order once the
answer is written: answers leave in the order the requests came. A lost connection cancels the
request's task, which the edge counts as cancelled (499).

``http_fast_path: false`` in the settings turns it off (every request through sanic).
tests/contract/test_fastlane.py holds the two to the same bytes for each route and case.
"""

from __future__ import annotations

import asyncio
import logging
from time import monotonic as current_time

from sanic.compat import Header
from sanic.exceptions import RequestCancelled
from sanic.headers import format_http1_response
from sanic.helpers import has_message_body
from sanic.http import Http, Stage
from sanic.server.protocols.http_protocol import HttpProtocol

from gateway.core.parts import part_size
from gateway.edge import httpbody

log = logging.getLogger("gateway.edge.fastlane")

FAST = "fast_lane"  # the attribute Edge.route sets on a route's handler that may take the lane
_REFUSED = frozenset(("transfer-encoding", "expect", "upgrade"))


class Light:
    """What a fast route's handler and the edge read of a request."""

    __slots__ = ("app", "body", "headers", "method", "path", "query_string", "stream", "transport")

    def __init__(self, app, path: str, headers: Header, body: bytes, transport=None):
        self.app, self.path, self.headers, self.body = app, path, headers, body
        self.method, self.query_string, self.stream, self.transport = "POST", "", None, transport

    @property
    def ip(self) -> str:
        """The client's address, as sanic's ``Request.ip`` (read only when asked: a canary sticky by client)."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return peer[0] if isinstance(peer, tuple) and peer else ""


class FastLane(HttpProtocol):
    """sanic's HTTP/1.1 protocol with the fast lane (module docstring)."""

    __slots__ = ("_fast", "_held", "_held_size", "_paused", "_max_body", "_max_header", "_max_held")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._fast: asyncio.Task | None = None  # the fast request in flight
        self._held: list[bytes] = []  # bytes received meanwhile, handed on after its answer
        self._held_size = 0
        self._paused = False  # reading paused by the lane while bytes are held
        config = self.app.config
        self._max_body = min(config.REQUEST_MAX_SIZE, httpbody.MIN_BYTES - 1)
        self._max_header = config.REQUEST_MAX_HEADER_SIZE
        self._max_held = config.REQUEST_BUFFER_SIZE  # past it, reading pauses (as sanic's own buffer)

    def data_received(self, data: bytes):
        if self._fast is not None:
            self._time = current_time()
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size >= self._max_held and self.transport and not self._paused:
                self._paused = True
                self.transport.pause_reading()
            return
        if data[:5] != b"POST " or self.recv_buffer or not self._start(data):
            super().data_received(data)

    def _start(self, data: bytes) -> bool:
        """Start ``data`` as a fast request when it qualifies (module docstring); False: sanic's."""
        http = getattr(self, "_http", None)
        # sanic's Http waiting for a request (its loop at the top: no request of its own still
        # finishing, no body left to drain), and the worker's TouchUp run (else sanic writes an alt-svc line)
        if (http is None or http.stage is not Stage.IDLE or getattr(http, "request", True) is not None
                or not http.keep_alive or not getattr(Http, "__touched__", False)):
            return False
        end = data.find(b"\r\n\r\n")
        if end < 0 or end >= self._max_header:
            return False
        try:  # as sanic's http1_request_header reads it; anything it would refuse is left to it
            request_line, *lines = data[:end].decode(errors="surrogateescape").split("\r\n")
            _method, target, version = request_line.split(" ")
            headers, length = [], None
            for line in lines:
                name, value = line.split(":", 1)
                name, value = name.lower(), value.lstrip()
                if name == "content-length":
                    if length is not None:
                        return False
                    length = Http._safe_int(value)
                elif name in _REFUSED or (name == "connection" and value.lower() != "keep-alive"):
                    return False
                headers.append((name, value))
        except ValueError:
            return False
        if (version != "HTTP/1.1" or length is None or length > self._max_body or len(data) != end + 4 + length
                or not target.startswith("/") or "?" in target or "#" in target or not target.isascii()):
            return False
        headers = Header(headers)
        try:
            _route, handler, params = self.app.router.get(target, "POST", headers.getone("host", None))
        except Exception:  # noqa: BLE001 - no route, wrong method...: sanic answers it
            return False
        lane = getattr(handler, FAST, None)
        if lane is None or (lane is not True and not lane(target)):
            return False
        http.stage = Stage.HANDLER
        self.state["requests_count"] += 1
        self._time = current_time()
        request = Light(self.app, target, headers, data[end + 4:], self.transport)
        self._fast = self.loop.create_task(self._run(handler, request, params))
        return True

    async def _run(self, handler, request: Light, params: dict) -> None:
        try:
            response = await handler(request, **params)
            await self._answer(response)
        except (asyncio.CancelledError, RequestCancelled):
            pass  # the connection is gone (the edge counted the request as cancelled)
        except Exception:  # a bug here, not in the handler (the edge answers those): log, drop the connection
            log.exception("fast lane: answering failed")
            self.close()
        finally:
            self._fast = None
            http = getattr(self, "_http", None)
            if http is not None and http.stage is Stage.HANDLER:
                http.stage = Stage.IDLE
            self._time = current_time()
            self._hand_on()

    async def _answer(self, response) -> None:
        """The answer as sanic's ``http1_response_header`` writes a whole one (end_stream), in one
        write; an ``httpbody.Unjoined`` one as its ``send`` writes it: the header, then each part."""
        unjoined = isinstance(response, httpbody.Unjoined)
        parts = response._take_parts() if unjoined else [response.body] if response.body else []
        headers = response.headers
        if has_message_body(response.status):
            headers["content-length"] = part_size(parts)
        else:
            parts = []
            headers.pop("content-length", None)
            headers.pop("transfer-encoding", None)
        headers["connection"] = "keep-alive"
        head = format_http1_response(response.status, response.processed_headers)
        if not unjoined:
            await self.send(head + b"".join(parts))
            return
        await self.send(head)
        for part in parts:
            await self.send(part)

    def _hand_on(self) -> None:
        """Bytes held while the fast request ran, received now, in order (another fast request, or
        sanic's)."""
        held, self._held, self._held_size = self._held, [], 0
        if self._paused:
            self._paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
        if held and self.transport is not None and not self.transport.is_closing():
            self.data_received(b"".join(held))

    def connection_lost(self, exc):
        if self._fast is not None:
            self._fast.cancel()
        super().connection_lost(exc)
