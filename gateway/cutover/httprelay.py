"""An HTTP request relayed to the legacy server, its answer given back unchanged (sanic responses).

    reply = await forward(cut, request)        # LegacyReply: status, headers, body bytes
    return answer(reply)                       # the sanic HTTPResponse the client gets
    await stream(cut, request)                 # a streamed answer (SSE) relayed chunk by chunk; the
                                               # handler then returns None (the edge's streamed answer)

The request goes as the client sent it: method, path and query, body bytes, headers (hop-by-hop
ones aside, legacy_http), but for a listener with ``api_keys`` (``app.ctx.api_keys``, set by
gateway/edge/http.py): there the client's Authorization is the gateway's own key and is not sent on
(``legacy.api_key_file``'s key goes instead). The answer keeps its status, body bytes and headers; the edge adds
``x-request-id`` as for every answer.
"""

from __future__ import annotations

from sanic.response import HTTPResponse

from gateway.call import stream_headers
from gateway.core.errors import ErrorKind, GatewayError

from .legacy_http import LegacyReply


def target(request) -> str:
    qs = request.query_string
    return request.path + ("?" + qs if qs else "")


def client(request) -> str:
    """The client's address (a canary sticky by client)."""
    return getattr(request, "ip", "") or ""


def _client(cut):
    """The legacy HTTP client; a dialect whose legacy section names only a gRPC target has none."""
    if cut.http is None:
        raise GatewayError(ErrorKind.UNAVAILABLE,
                           f"no legacy HTTP server: dialects.{cut.dialect}.legacy.http is not set")
    return cut.http


def keyed(request) -> bool:
    """Whether the request came through a listener with ``api_keys`` (its Authorization is the gateway's key)."""
    return bool(getattr(getattr(getattr(request, "app", None), "ctx", None), "api_keys", False))


async def forward(cut, request, body: bytes | None = None) -> LegacyReply:
    data = request.body if body is None else body
    return await _client(cut).call(request.method, target(request), request.headers.items(), bytes(data or b""),
                                   keyed(request))


def answer(reply: LegacyReply) -> HTTPResponse:
    headers = [(k, v) for k, v in reply.headers if k.lower() != "content-type"]
    resp = HTTPResponse(reply.body, status=reply.status, headers=headers,
                        content_type=reply.header("content-type"))
    if reply.header("content-type") is None:
        resp.headers.pop("content-type", None)
    return resp


async def stream(cut, request, body: bytes | None = None) -> None:
    """Relay a streamed answer: the legacy status and headers, then each chunk as it arrives."""
    data = request.body if body is None else body
    async with _client(cut).stream(request.method, target(request), request.headers.items(), bytes(data or b""),
                                   keyed(request)) as s:
        content_type = None
        headers = {}
        for k, v in s.headers:
            if k.lower() == "content-type":
                content_type = v
            else:
                headers[k] = v
        resp = await request.respond(status=s.status, headers=stream_headers(headers), content_type=content_type)
        async for chunk in s:
            await resp.send(chunk)
        await resp.eof()
