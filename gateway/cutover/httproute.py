"""The cutover routes on an HTTP listener: a request answered by Triton as today, by the legacy server
relayed unchanged, or by one while the other is compared in the background (docs/migration.md).

    handled, resp = await httproute.routed(cut, request, model, streaming, local=..., read=..., error=...)
    if not handled: ... the listener's own answer from Triton, as today ...

``local()`` is the listener's own answer (a sanic response, from Triton); ``read(status,
content_type, body)`` turns one answer, the legacy server's or the listener's, into what the shadow
runner takes (a ``Wire``, an ``Answer`` or a function decoding one, with the dialect's own reader);
``error(GatewayError)`` is the listener's error as its client would read it, an ``Answer``.

    triton   not handled (the listener goes on as today)
    legacy   relayed (httprelay), a streamed answer chunk by chunk as it comes; under ``shadow`` (and
             the canary's ``reverse_shadow``) ``local`` runs in the background and both are compared
    shadow   on Triton's side: ``local`` answers, the legacy server is called in the background

A streamed request is relayed or answered but never compared (counted ``skipped``): the gateway's
own stream would have to be kept somewhere. A shadowed request's body is read once into bytes that
both sides share: its buffer is given back once the client is answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.call import current
from gateway.core.errors import GatewayError

from . import httprelay
from .compare import Answer, Wire

Side = Answer | Wire | Callable[[], Answer]
Read = Callable[[int, str | None, bytes], Side]


async def routed(cut, request, model: str, streaming: bool, *, local: Callable[[], Awaitable],
                 read: Read, error: Callable[[GatewayError], Answer]):
    """(handled, answer): the answer for a request of ``model`` on a legacy route (None: streamed to
    the client already); handled False when Triton answers it as today."""
    d = cut.choose(model, request.headers.get, httprelay.client(request))
    if d.route == "triton":
        return False, None
    call = current()
    if call is not None:
        call.model = model
    body = bytes(request.body or b"")
    if d.shadow:
        request.body = body
    if d.answer == "legacy":
        if streaming:
            if d.shadow:
                cut.shadow.count(model, d.route, "skipped")
            await httprelay.stream(cut, request, body)
            return True, None
        pending = cut.shadow.start(model, d, body, lambda: _triton(local, read, error)) if d.shadow else None
        try:
            reply = await httprelay.forward(cut, request, body)
        except GatewayError as err:
            if pending is not None:
                pending.fail(err.kind.value, err.message)
            raise
        if pending is not None:
            pending.settle(read(reply.status, reply.header("content-type"), reply.body))
        return True, httprelay.answer(reply)
    if not d.shadow or streaming:
        if d.shadow:
            cut.shadow.count(model, d.route, "skipped")
        return False, None
    pending = cut.shadow.start(model, d, body, lambda: _legacy(cut, request, body, read))
    try:
        resp = await local()
    except GatewayError as err:
        if pending is not None:
            pending.settle(error(err))
        raise
    if pending is not None:
        pending.settle(read(resp.status, resp.content_type, bytes(resp.body or b"")))
    return True, resp


async def _triton(local, read: Read, error) -> Side:
    """The listener's own answer, in the background, as its client would have had it."""
    try:
        resp = await local()
    except GatewayError as err:
        return error(err)
    return read(resp.status, resp.content_type, bytes(resp.body or b""))


async def _legacy(cut, request, body: bytes, read: Read) -> Side:
    reply = await httprelay.forward(cut, request, body)
    return read(reply.status, reply.header("content-type"), reply.body)
