"""The edge: the one short path every request on every listener takes around its handler.

    request id   from ``X-Request-Id`` / ``x-request-id`` metadata, else generated; Triton gets it
                 as the request id (upstream), the client gets it back (response header, or gRPC
                 trailing metadata)
    API key      on a listener with keys (gateway/access.py), ``Authorization: Bearer <key>`` or
                 the dialect's UNAUTHENTICATED answer (401), before admission; routes declared
                 ``public`` (admin /health, /live) stay open for probes
    admission    at most ``limits.max_inflight`` requests in flight per worker; over it, the
                 dialect's own overloaded answer (``errors.overloaded``)
    deadline     the listener's default (``timeout_s`` / ``stream_timeout_s``), or the client's
                 when shorter (gRPC deadline, or a dialect's own field via ``Call.shorten``)
    handler      the dialect's code; it may name the model (``current().model = ...``)
    errors       GatewayError (or anything unexpected, logged, as INTERNAL) rendered by the
                 dialect's ErrorRendering, on HTTP and gRPC alike
    metrics      one observation per request: dialect, listener, route, model, outcome, status, bytes;
                 and one access log line (``access_log``, gateway/logs.py)
    tracing      with ``tracing.enabled``, one server span per request continuing the caller's W3C
                 trace context (gateway/tracing.py); off, ``Edge.tracer`` is None and nothing happens

The request's ``Call`` lives in a context variable for the duration of the handler, so the upstream
client takes the deadline and the request id from it without every dialect passing them along.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc
from sanic.exceptions import SanicException

from gateway import logs, metrics, tracing
from gateway.access import AUTHORIZATION, UNAUTHENTICATED_MESSAGE, ApiKeys, bearer
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import ErrorRendering, GrpcStatus

log = logging.getLogger("gateway.edge")

REQUEST_ID = "x-request-id"
MAX_REQUEST_ID = 128  # longer client ids are cut (they travel in logs, headers and Triton's trace)
_ids = itertools.count(1)
_ID_PREFIX = os.urandom(4).hex()
_current: ContextVar[Call | None] = ContextVar("gateway_call", default=None)


def current() -> Call | None:
    """The request being handled in this task (None outside a request)."""
    return _current.get()


def new_request_id() -> str:
    return f"{_ID_PREFIX}-{next(_ids):x}"


def _request_id(given: str | None) -> str:
    if not given:
        return new_request_id()
    if not (given.isascii() and given.isprintable()):  # it travels in headers, gRPC metadata and logs
        return new_request_id()
    return given[:MAX_REQUEST_ID]


class Call:
    """One request as the edge sees it."""

    __slots__ = ("request_id", "route", "model", "start", "deadline", "stream_deadline", "failed", "trace")

    def __init__(self, request_id: str, route: str, timeout: float, stream_timeout: float,
                 client_timeout: float | None = None):
        self.request_id = request_id
        self.route = route
        self.model = ""
        self.failed = ""  # an error kind a handler answered in-band (a stream that failed midway)
        self.trace: tracing.Traced | None = None  # the request's server span (tracing on)
        self.start = now = time.monotonic()
        if client_timeout is not None:
            timeout, stream_timeout = min(timeout, client_timeout), min(stream_timeout, client_timeout)
        self.deadline = now + timeout
        self.stream_deadline = now + stream_timeout

    def shorten(self, seconds: float) -> None:
        """The client asked for less time than the listener's default (e.g. MindIE's ``timeout``)."""
        end = self.start + seconds
        self.deadline = min(self.deadline, end)
        self.stream_deadline = min(self.stream_deadline, end)

    def fail(self, err: GatewayError) -> None:
        """The answer carries this error in-band (its status says OK): count it as the failure it is."""
        self.failed = err.kind.value

    def remaining(self, stream: bool = False) -> float:
        return max((self.stream_deadline if stream else self.deadline) - time.monotonic(), 0.0)


class Admission:
    """The in-flight bound of one worker, shared by all its listeners."""

    __slots__ = ("limit", "inflight")

    def __init__(self, limit: int):
        self.limit = limit
        self.inflight = 0

    def acquire(self) -> bool:
        if self.inflight >= self.limit:
            return False
        self.inflight += 1
        metrics.INFLIGHT.inc()
        return True

    def release(self) -> None:
        self.inflight -= 1
        metrics.INFLIGHT.dec()


def _metadata_value(md, key: str) -> str | None:
    for k, v in md or ():
        if k == key:
            return v if isinstance(v, str) else None
    return None


def _grpc_timeout(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    return remaining if remaining is not None and remaining < 1e8 else None


class Edge:
    """The edge of one listener: wraps its handlers (HTTP routes, gRPC methods)."""

    def __init__(self, dialect: str, listener: str, errors: ErrorRendering, admission: Admission,
                 timeout_s: float, stream_timeout_s: float, keys: ApiKeys | None = None):
        self.keys = keys  # the listener's API keys (None: open)
        self.dialect = dialect
        self.listener = listener
        self.errors = errors
        self.admission = admission
        self.timeout_s = timeout_s
        self.stream_timeout_s = stream_timeout_s
        self.tracer = tracing.listener(dialect, listener)  # None: tracing off

    # -- shared steps ------------------------------------------------------------------------
    def begin(self, route: str, request_id: str | None, client_timeout: float | None = None) -> Call:
        return Call(_request_id(request_id), route, self.timeout_s, self.stream_timeout_s, client_timeout)

    def finish(self, call: Call, outcome: str, status: int | str = "", bytes_in: int = 0, bytes_out: int = 0) -> None:
        """Metrics and the access line of one answered request (``status``: HTTP status or gRPC code name)."""
        seconds = time.monotonic() - call.start
        trace_id = ""
        if call.trace is not None:
            trace_id = call.trace.trace_id
            call.trace.end(call, outcome, status)
        metrics.observe(self.dialect, self.listener, call.route, call.model, outcome, seconds, status, bytes_in,
                        bytes_out)
        if _access_enabled(logging.INFO):
            logs.access(call.request_id, self.dialect, self.listener, call.route, call.model, status, outcome,
                        bytes_in, bytes_out, seconds, trace_id)

    def _admit(self) -> None:
        if not self.admission.acquire():
            raise self.errors.overloaded(self.admission.limit)

    def _internal(self, exc: BaseException) -> GatewayError:
        log.error("%s %s: unexpected error", self.listener, current().route if current() else "", exc_info=exc)
        return GatewayError(ErrorKind.INTERNAL, "Internal error")

    # -- HTTP ----------------------------------------------------------------------------------
    def route(self, app, handler: Callable[..., Awaitable[Any]], uri: str, methods: list[str], name: str,
              admit: bool = True, public: bool = False) -> None:
        """Add ``handler(request, **path_params)`` to a sanic app behind the edge, as route ``name``
        (``public``: no API key asked, for probes)."""
        # stream=True: sanic leaves the body unread, so the edge checks the key and admits before reading it
        app.add_route(self.http(name, handler, admit, public), uri, methods=methods, name=name, stream=True)

    def http(self, route: str, handler: Callable[..., Awaitable[Any]], admit: bool = True, public: bool = False):
        errors, admission = self.errors, self.admission
        keys = None if public else self.keys

        async def endpoint(request, **params):
            call = self.begin(route, request.headers.get(REQUEST_ID))
            token = _current.set(call)
            if self.tracer is not None:
                call.trace = self.tracer.http(call, request)
            outcome, resp = "internal", None
            try:
                if keys is not None:
                    keys.check(request.headers.get(AUTHORIZATION))
                if admit:
                    self._admit()
                    try:
                        await _read_body(request)
                        resp = await handler(request, **params)
                    finally:
                        admission.release()
                else:
                    await _read_body(request)
                    resp = await handler(request, **params)
                outcome = call.failed or "ok"
            except GatewayError as err:
                outcome, resp = err.kind.value, errors.http(err)
                if err.kind is ErrorKind.UNAUTHENTICATED:
                    resp.headers["www-authenticate"] = "Bearer"  # RFC 6750
            except SanicException as exc:  # reading the body: over limits.max_request_bytes (413), timed out
                err = _body_error(exc)
                outcome, resp = err.kind.value, errors.http(err, status=exc.status_code)
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except Exception as exc:  # noqa: BLE001 - the edge: logged, answered INTERNAL
                resp = errors.http(self._internal(exc))
            finally:
                _current.reset(token)
                self.finish(call, outcome, *_http_answer(request, resp, outcome))
            if resp is not None:  # None: the handler streamed its answer (see stream_headers)
                resp.headers[REQUEST_ID] = call.request_id
            return resp

        endpoint.__name__ = f"{self.listener}_{route}"
        return endpoint

    def on_framework_error(self, request, exc: Exception):
        """Errors sanic raises before a handler runs (no route, bad method, body too large...)."""
        status = getattr(exc, "status_code", 500) or 500
        if status == 413 and str(exc) == "Request header exceeds the size limit":
            status = 431  # limits.max_header_bytes: sanic says 413; RFC 6585's status for it is 431
        # a body over limits.max_request_bytes (413, answered as soon as its length is known) is the
        # client's mistake, rendered as the dialect's invalid-argument envelope with status 413
        kind = {404: ErrorKind.NOT_FOUND, 405: ErrorKind.NOT_FOUND,
                408: ErrorKind.DEADLINE_EXCEEDED}.get(status, ErrorKind.INVALID_ARGUMENT)
        if status >= 500:
            err = self._internal(exc)
        else:
            err = GatewayError(kind, str(exc) or "error")
        if self.keys is not None and not self.keys.valid(bearer(request.headers.get(AUTHORIZATION))):
            err, status = GatewayError(ErrorKind.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE), 401  # no route probing
        call = self.begin("_unrouted", request.headers.get(REQUEST_ID))
        if self.tracer is not None:
            call.trace = self.tracer.http(call, request)
        resp = self.errors.http(err, status=None if status >= 500 else status)
        if err.kind is ErrorKind.UNAUTHENTICATED:
            resp.headers["www-authenticate"] = "Bearer"
        self.finish(call, err.kind.value, resp.status, 0, len(resp.body or b""))
        resp.headers[REQUEST_ID] = call.request_id
        return resp

    # -- gRPC ----------------------------------------------------------------------------------
    def _grpc_begin(self, route: str, request, context, model_of):
        """The request's Call (id and deadline from the metadata), made current; its trailing metadata."""
        call = self.begin(route, _metadata_value(context.invocation_metadata(), REQUEST_ID), _grpc_timeout(context))
        if model_of is not None:
            call.model = model_of(request)
        if self.tracer is not None:
            call.trace = self.tracer.grpc(call, context)
        return call, _current.set(call), ((REQUEST_ID, call.request_id),)

    def _grpc_admit(self, context) -> None:
        """The API key (listeners with ``api_keys``), then admission: refused requests raise."""
        if self.keys is not None:
            self.keys.check_metadata(context.invocation_metadata())
        self._admit()

    def unary(self, route: str, fn: Callable[[Any, Any], Awaitable[Any]],
              model_of: Callable[[Any], str] | None = None):
        """A unary gRPC behaviour ``fn(request, context)`` behind the edge."""
        errors, admission = self.errors, self.admission

        async def handler(request, context):
            call, token, trailing = self._grpc_begin(route, request, context, model_of)
            outcome, answer = "internal", None
            try:
                self._grpc_admit(context)
                try:
                    answer = await fn(request, context)
                finally:
                    admission.release()
                outcome = call.failed or "ok"
            except GatewayError as err:
                outcome, answer = err.kind.value, errors.grpc(err)
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except Exception as exc:  # noqa: BLE001
                answer = errors.grpc(self._internal(exc))
            finally:
                _current.reset(token)
                self.finish(call, outcome, _grpc_code(answer, outcome), _size(request),
                            0 if isinstance(answer, GrpcStatus) else _size(answer))
            if isinstance(answer, GrpcStatus):
                await context.abort(answer.code, answer.message, answer.trailing + trailing)
            context.set_trailing_metadata(trailing)
            return answer

        return handler

    def stream(self, route: str, fn: Callable[[Any, Any], AsyncIterator[Any]],
               model_of: Callable[[Any], str] | None = None):
        """A server- or bidi-streaming gRPC behaviour ``fn(request_or_iterator, context)``."""
        errors, admission = self.errors, self.admission

        async def handler(request, context):
            call, token, trailing = self._grpc_begin(route, request, context, model_of)
            outcome, failure, sent = "internal", None, 0
            try:
                self._grpc_admit(context)
                try:
                    async for item in fn(request, context):
                        sent += _size(item)
                        yield item
                finally:
                    admission.release()
                outcome = call.failed or "ok"
            except GatewayError as err:
                outcome, failure = err.kind.value, errors.grpc(err)
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except Exception as exc:  # noqa: BLE001
                failure = errors.grpc(self._internal(exc))
            finally:
                _current.reset(token)
                self.finish(call, outcome, _grpc_code(failure, outcome), _size(request), sent)
            if isinstance(failure, GrpcStatus):
                await context.abort(failure.code, failure.message, failure.trailing + trailing)
            if failure is not None:
                yield failure  # a dialect that answers errors in-band (GRPS)
            context.set_trailing_metadata(trailing)

        return handler


_access_enabled = logs.ACCESS.isEnabledFor


def _http_answer(request, resp, outcome: str) -> tuple[int, int, int]:
    """(status, bytes in, bytes out) of an HTTP answer; a streamed one (resp None) is counted without its body."""
    body = request.body
    if resp is not None:
        out = resp.body
        return resp.status, len(body) if body else 0, len(out) if out else 0
    if outcome == "cancelled":
        return 499, len(body) if body else 0, 0  # the client went away (nginx's "client closed request")
    streamed = getattr(request.stream, "response", None)
    return getattr(streamed, "status", 200), len(body) if body else 0, 0


def _grpc_code(answer, outcome: str) -> str:
    if isinstance(answer, GrpcStatus):
        return answer.code.name
    return "CANCELLED" if outcome == "cancelled" else "OK"  # GRPS answers its errors as OK + a FAILURE body


def _size(message) -> int:
    """Bytes of a gRPC message: raw bytes (V2 passthrough) or a protobuf; 0 for a request iterator."""
    if isinstance(message, bytes):
        return len(message)
    size = getattr(message, "ByteSize", None)
    return size() if size is not None else 0


async def _read_body(request) -> None:
    """The whole body, read once admitted. Sanic lifts the size limit for a streaming route; it is
    put back first, so a body over limits.max_request_bytes is a 413 as soon as its length is known."""
    stream = request.stream
    if stream is not None and stream.request_body:
        stream.request_max_size = request.app.config.REQUEST_MAX_SIZE
        await request.receive_body()


def _body_error(exc: SanicException) -> GatewayError:
    kind = ErrorKind.DEADLINE_EXCEEDED if exc.status_code == 408 else ErrorKind.INVALID_ARGUMENT
    return GatewayError(kind, str(exc) or "error")


def stream_headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Headers for an answer a handler streams itself (``request.respond``): the request id."""
    call = current()
    headers = dict(extra or {})
    if call is not None:
        headers[REQUEST_ID] = call.request_id
    return headers
