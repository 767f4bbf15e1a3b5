"""Triton's generate extension on the V2 REST listener: ``generate`` answers the one response,
``generate_stream`` each response as a server-sent event (``data: {...}``); both over
ModelStreamInfer, converted by ``generate``."""

from __future__ import annotations

import asyncio
import re
import sys
import time

import grpc
from sanic import Request

from gateway.call import current, stream_headers
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.observe import metrics, tracing
from gateway.upstream import cancel

from . import generate, jsontensor, rjson
from .calls import Rest, answer, require
from .errors import UpstreamStatus
from .jsonbody import loads

# Triton's core prefixes the errors of a request it refuses before running it (validation)
_REQUEST_ERROR = re.compile(r"\[request id: [^\]]*\] .*(?:expected|data-type|mismatch|missing|does not match)", re.S)


def _refused(message: str) -> bool:
    """Triton's validation of a request (prefixed with its id, worded as a mismatch), not an error
    the model answered while running it."""
    return _REQUEST_ERROR.match(message) is not None


class Refused(GatewayError):
    """A streamed request Triton refused before its first answer: Triton's HTTP answers it as a
    plain error with its status."""

    def __init__(self, message: str, status: int):
        super().__init__(ErrorKind.INVALID_ARGUMENT if status == 400 else ErrorKind.UPSTREAM_FAILED, message)
        self.http_status = status


def _stream_status(message: str) -> int:
    """An in-stream error carries only its text: 404 for an unknown model, else 400, the status
    Triton's HTTP gives the codes a model's errors have (UNKNOWN, INVALID_ARG: ``HttpCodeFromError``)."""
    low = message.lower()
    return 404 if "unknown model" in low or "is not found" in low else 400


async def handle(rest: Rest, request: Request, model: str, version: str, streaming: bool):
    """Triton's generate extension over ModelStreamInfer: ``generate`` answers the one response,
    ``generate_stream`` each response as an SSE event; the status is the first response's."""
    require(request, "POST")
    rest.check(model)
    meta = await rest.upstream.model_metadata(model, version)
    if request.headers.get("content-encoding", "identity") != "identity":
        raise invalid("Unsupported content-encoding, only 'identity' is supported.")
    parsed = generate.convert(loads(request.body or b""), meta, model, version)
    done = asyncio.Event()
    start, code = time.perf_counter(), "OK"
    span = tracing.upstream("ModelStreamInfer", model)  # tracing on: a client span, its traceparent to Triton
    edge_call = current()
    call = reader = None
    try:
        call = await rest.stream(jsontensor.serialize(parsed), span.__enter__())
        reader = None if rest.cancels else cancel.Reader(call)  # upstream.cancel none: reads that outlive the client
        answers = aiter(call if reader is None else reader)
        first = await _next_event(answers, done, meta.decoupled)
        if not streaming:
            events = [first] if first is not None else []
            while not done.is_set() and (event := await _next_event(answers, done, meta.decoupled)) is not None:
                events.append(event)
            status, body, _ = events[0] if events else (200, b"", "")
            if len(events) != 1 and status == 200:
                body = rjson.error(generate.ONE_RESPONSE)
            return answer(body, status)
        status = first[0] if first is not None else 200
        if status != 200 and _refused(first[2]):  # refused before it ran: a plain error
            raise Refused(first[2], status)
        if status != 200:
            edge_call.failed = "upstream_failed"
        resp = await request.respond(status=status, content_type="text/event-stream; charset=utf-8",
                                     headers=stream_headers())
        event = first
        while event is not None:
            if event[0] != 200:
                edge_call.failed = "upstream_failed"
            await resp.send(b"data: " + event[1] + b"\n\n")
            event = await _next_event(answers, done, meta.decoupled) if not done.is_set() else None
        await resp.eof()
        return None
    except grpc.aio.AioRpcError as err:
        code = err.code().name
        raise UpstreamStatus(err) from None
    except (asyncio.CancelledError, ConnectionError):  # the client went away
        code = "CANCELLED"
        raise
    finally:
        # complete: left to end with Triton's trailers; the client gone: cancelled (upstream.cancel)
        if call is not None:
            cancel.finish(call, done.is_set(), rest.cancels, reader)
        metrics.observe_upstream("ModelStreamInfer", model, code, time.perf_counter() - start)
        span.__exit__(*sys.exc_info())


async def _next_event(answers, done: asyncio.Event, decoupled: bool) -> tuple[int, bytes, str] | None:
    """The next answer as (status, JSON, error text) (None: the stream is over); ``done`` once the
    final came. A decoupled model's empty final response only marks the end; a model that is not
    decoupled answers once, outputs or none."""
    async for item in answers:
        if item.error_message:
            done.set()
            return _stream_status(item.error_message), rjson.error(item.error_message), item.error_message
        resp = item.infer_response
        final = generate.is_final(resp)
        if final:
            done.set()
        if resp.outputs or not final or not decoupled:
            return 200, generate.render(resp), ""
        return None
    done.set()
    return None
