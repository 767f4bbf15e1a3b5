"""Running one generation for a family: whole JSON answer, or chunks written as Triton produces them.

Errors before the first byte raise (the edge renders the envelope with its status); after the
first byte they are written in-band in the family's framing and the stream is closed. A client
that disconnects cancels the handler task; ``aclosing`` then closes the generation, which closes
the upstream stream and so cancels the Triton request.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing

from sanic import Request, response

from gateway.call import current, stream_headers
from gateway.core.errors import ErrorKind, GatewayError
from gateway.llm.service import GenerationService
from gateway.llm.types import Done, Token

from . import metrics
from .common import Plan
from .running import Entry

log = logging.getLogger("gateway.mindie")
STOPPED = "The request was stopped (stopInfer)."
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _encode(plan: Plan, ev: Token | Done) -> bytes:
    if isinstance(ev, Token):
        return plan.encoder.token(ev)
    metrics.observe(plan.model.spec.name, ev)
    return plan.encoder.done(ev)


async def whole(service: GenerationService, plan: Plan, entry: Entry | None = None):
    dones: list[Done] = []  # one per sequence (n > 1: several)
    async with aclosing(service.generate(plan.req, plan.model)) as events:
        try:
            async for ev in events:
                if isinstance(ev, Done):
                    dones.append(ev)
        except asyncio.CancelledError:
            if entry is not None and entry.absorb():  # stopInfer: 500 Incomplete Generation
                raise GatewayError(ErrorKind.CANCELLED, STOPPED) from None
            raise
    if not dones:
        raise GatewayError(ErrorKind.UPSTREAM_FAILED, "generation ended without a result")
    for done in dones:
        metrics.observe(plan.model.spec.name, done)
    return response.json(plan.encoder.body(dones[0]) if len(dones) == 1 else plan.encoder.body_many(dones))


async def stream(service: GenerationService, plan: Plan, request: Request, entry: Entry | None = None) -> None:
    resp = None
    async with aclosing(service.generate(plan.req, plan.model)) as events:
        try:
            first = await anext(events)  # errors before this point keep their HTTP status
            resp = await request.respond(content_type=plan.encoder.content_type, headers=stream_headers(STREAM_HEADERS))
            await resp.send(plan.encoder.head() + _encode(plan, first))
            async for ev in events:
                data = _encode(plan, ev)
                if data:  # an encoder holding text back (a tool call being read) sends nothing yet
                    await resp.send(data)
        except asyncio.CancelledError:
            if entry is not None and entry.absorb():  # stopInfer: the stream ends where it is
                log.info("mindie: request %s stopped (stopInfer)", plan.req.request_id)
                if resp is None:
                    raise GatewayError(ErrorKind.CANCELLED, STOPPED) from None
                await resp.eof()
                return
            log.info("mindie: client of request %s went away; generation cancelled", plan.req.request_id)
            raise
        except Exception as e:  # noqa: BLE001 - every failure after the first byte goes in-band
            if resp is None:
                raise
            err = e if isinstance(e, GatewayError) else _internal(e)
            if (call := current()) is not None:
                call.fail(err)  # the status was 200; metrics and the access line say it failed
            await resp.send(plan.encoder.error(err))
    if resp is not None:
        await resp.eof()


def _internal(e: Exception) -> GatewayError:
    log.exception("mindie: unexpected error in a stream", exc_info=e)
    return GatewayError(ErrorKind.INTERNAL, "internal error")
