"""The edge: the one short path every request on every listener takes around its handler.

    request id   from ``X-Request-Id`` / ``x-request-id`` metadata, else generated; Triton gets it
                 as the request id (upstream), the client gets it back (response header, or gRPC
                 trailing metadata; with ``generated_id_back`` False, only the one it sent)
    API key      on a listener with keys (gateway/access.py), ``Authorization: Bearer <key>`` or
                 the dialect's UNAUTHENTICATED answer (401), before admission; routes declared
                 ``public`` (admin /health, /live) stay open for probes
    admission    at most ``limits.max_inflight`` requests in flight per worker; over it, the
                 dialect's own overloaded answer (``errors.overloaded``)
    deadline     the listener's default (``timeout_s`` / ``stream_timeout_s``), or the client's
                 when shorter (gRPC deadline, or a dialect's own field via ``Call.shorten``)
    handler      the dialect's code; it may name the model (``current().model = ...``)
    errors       GatewayError (or anything unexpected, logged, as INTERNAL) rendered by the
                 dialect's ErrorRendering, on HTTP and gRPC alike; a RelayedStatus (another
                 server's gRPC status, the cutover's legacy route) is answered as it is, and
                 ``Call.trailing`` (that server's trailing metadata) goes before the request id
    metrics      one observation per request: dialect, listener, route, model, outcome, status, bytes;
                 and one access log line (``access_log``, gateway/observe/logs.py)
    tracing      with ``tracing.enabled``, one server span per request continuing the caller's W3C
                 trace context (gateway/observe/tracing.py); off, ``Edge.tracer`` is None and nothing happens

The request's ``Call`` (gateway/call.py) is current for the duration of the handler, so the upstream
client takes the deadline and the request id from it without every dialect passing them along.
Whatever a handler raises takes one path, ``Edge.failure``: a GatewayError as it is, sanic's body
errors as the client's mistake, anything else logged and answered INTERNAL; HTTP and gRPC only
differ in how the dialect renders it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from sanic.exceptions import SanicException

from gateway.access import AUTHORIZATION, UNAUTHENTICATED_MESSAGE, ApiKeys, bearer
from gateway.call import REQUEST_ID, Admission, Call, current, enter, leave, request_id
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import ErrorRendering, GrpcStatus, RelayedStatus
from gateway.edge import httpbody
from gateway.edge.fastlane import FAST
from gateway.observe import logs, metrics, tracing

log = logging.getLogger("gateway.edge")


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
                 timeout_s: float, stream_timeout_s: float, keys: ApiKeys | None = None,
                 bodies: Callable[[int], tuple[memoryview, Callable[[], None]] | None] | None = None,
                 generated_id_back: bool = True):
        self.keys = keys  # the listener's API keys (None: open)
        self.dialect = dialect
        self.listener = listener
        self.errors = errors
        self.admission = admission
        self.timeout_s = timeout_s
        self.stream_timeout_s = stream_timeout_s
        self.tracer = tracing.listener(dialect, listener)  # None: tracing off
        # where a large body of a ``buffered`` route is read: ``bodies(size)`` -> (a writable view,
        # the function that gives it back once the request is answered), or None for a buffer of
        # its own (the worker passes Upstream.body_buffer: the shared-memory region, gateway/upstream/shm.py)
        self.bodies = bodies
        # True on an h2 listener whose unary-unary handlers are left to finish when their client goes
        # away (upstream.cancel streams or none; gateway/h2/server.py): their upstream calls need no shield
        self.unary_outlives_client = False
        # False: an answer (HTTP header, gRPC trailing metadata) carries the request id only when the client
        # sent one (a listener that answers as its upstream said it, KServe V2: its ListenerSpec says so)
        self.generated_id_back = generated_id_back

    # -- shared steps ------------------------------------------------------------------------
    def begin(self, route: str, given_id: str | None, client_timeout: float | None = None) -> Call:
        call = Call(request_id(given_id), route, self.timeout_s, self.stream_timeout_s, client_timeout)
        if not given_id and not self.generated_id_back:
            call.id_back = False
        return call

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

    def failure(self, exc: Exception) -> GatewayError:
        """The one error path: what a handler raised, as the GatewayError its client is answered with.
        A GatewayError as it is; sanic's errors while reading the body (over
        ``limits.max_request_bytes``, too slow) as the client's mistake; anything else is a bug:
        logged with its stack, answered INTERNAL without details."""
        if isinstance(exc, GatewayError):
            return exc
        if isinstance(exc, SanicException) and (exc.status_code or 500) < 500:
            kind = ErrorKind.DEADLINE_EXCEEDED if exc.status_code == 408 else ErrorKind.INVALID_ARGUMENT
            return GatewayError(kind, str(exc) or "error")
        call = current()
        log.error("%s %s: unexpected error", self.listener, call.route if call else "", exc_info=exc)
        return GatewayError(ErrorKind.INTERNAL, "Internal error")

    def _failed(self, exc: BaseException) -> tuple[str, GatewayError | None]:
        """(outcome, the error to answer with); None when the request is gone (cancelled, or its
        stream closed early) or the process is stopping: the caller re-raises."""
        if isinstance(exc, Exception):
            err = self.failure(exc)
            return err.kind.value, err
        return "cancelled", None

    def render_http(self, err: GatewayError, status: int | None = None):
        """The dialect's HTTP answer for ``err`` (``status`` overrides its table's, e.g. 413)."""
        resp = self.errors.http(err, status=status)
        if err.kind is ErrorKind.UNAUTHENTICATED:
            resp.headers["www-authenticate"] = "Bearer"  # RFC 6750
        return resp

    # -- HTTP ----------------------------------------------------------------------------------
    def route(self, app, handler: Callable[..., Awaitable[Any]], uri: str, methods: list[str], name: str,
              admit: bool = True, public: bool = False, buffered: bool = False,
              fast: bool | Callable[[str], bool] = False) -> None:
        """Add ``handler(request, **path_params)`` to a sanic app behind the edge, as route ``name``
        (``public``: no API key asked, for probes; ``buffered``: a large body is read into one
        buffer, ``request.body`` a memoryview: gateway/edge/httpbody.py; ``fast``: the handler answers
        a POST with one response, never streamed, and reads only the request's method, path,
        headers, body and app, so a small one may take the fast lane, gateway/edge/fastlane.py; True
        for every POST, or a function of the path saying which; not with tracing, whose spans
        read more of the request)."""
        endpoint = self.http(name, handler, admit, public, buffered, app.config.REQUEST_MAX_SIZE)
        if fast is not False and self.tracer is None:
            setattr(endpoint, FAST, fast)
        # stream=True: sanic leaves the body unread, so the edge checks the key and admits before reading it
        app.add_route(endpoint, uri, methods=methods, name=name, stream=True)

    def http(self, route: str, handler: Callable[..., Awaitable[Any]], admit: bool = True, public: bool = False,
             buffered: bool = False, max_body: int | None = None):
        """The route's endpoint; ``max_body``: the app's ``REQUEST_MAX_SIZE`` (read once, not
        through sanic's config lookup per request), None to read it from the request's app."""
        admission = self.admission
        keys = None if public else self.keys

        async def endpoint(request, **params):
            call = self.begin(route, request.headers.get(REQUEST_ID))
            token = enter(call)
            if self.tracer is not None:
                call.trace = self.tracer.http(call, request)
            outcome, resp, held = "internal", None, []
            try:
                if keys is not None:
                    keys.check(request.headers.get(AUTHORIZATION))
                if admit:
                    self._admit()
                    try:
                        await _read_body(request, buffered, self.bodies, held, max_body)
                        resp = await handler(request, **params)
                    finally:
                        admission.release()
                else:
                    await _read_body(request, buffered, self.bodies, held, max_body)
                    resp = await handler(request, **params)
                outcome = call.failed or "ok"
            except BaseException as exc:  # noqa: BLE001 - the edge: every failure takes Edge.failure
                outcome, err = self._failed(exc)
                if err is None:
                    raise
                status = exc.status_code if isinstance(exc, SanicException) and err is not exc else None
                resp = self.render_http(err, status)
            finally:
                leave(token)
                self.finish(call, outcome, *_http_answer(request, resp, outcome))
                for release in held:  # the body's buffer, once nothing reads it any more
                    release()
            if resp is not None and call.id_back:  # None: the handler streamed its answer (call.stream_headers)
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
        err = self.failure(exc) if status >= 500 else GatewayError(kind, str(exc) or "error")
        if self.keys is not None and not self.keys.valid(bearer(request.headers.get(AUTHORIZATION))):
            err, status = GatewayError(ErrorKind.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE), 401  # no route probing
        call = self.begin("_unrouted", request.headers.get(REQUEST_ID))
        if self.tracer is not None:
            call.trace = self.tracer.http(call, request)
        resp = self.render_http(err, None if status >= 500 else status)
        self.finish(call, err.kind.value, resp.status, 0, len(resp.body or b""))
        if call.id_back:
            resp.headers[REQUEST_ID] = call.request_id
        return resp

    # -- gRPC ----------------------------------------------------------------------------------
    def _grpc_call(self, route: str, request, context, model_of) -> tuple[Call, tuple]:
        """The request's Call (id and deadline from the metadata, kept as ``call.metadata``); its
        trailing metadata."""
        md = context.invocation_metadata()
        call = self.begin(route, _metadata_value(md, REQUEST_ID), _grpc_timeout(context))
        call.metadata = md
        if model_of is not None:
            call.model = model_of(request)
        if self.tracer is not None:
            call.trace = self.tracer.grpc(call, context)
        return call, ((REQUEST_ID, call.request_id),) if call.id_back else ()

    def _grpc_begin(self, route: str, request, context, model_of):
        """``_grpc_call``'s Call made current: (call, its token, its trailing metadata)."""
        call, trailing = self._grpc_call(route, request, context, model_of)
        return call, enter(call), trailing

    def _grpc_admit(self, call: Call) -> None:
        """The API key (listeners with ``api_keys``), then admission: refused requests raise."""
        if self.keys is not None:
            self.keys.check_metadata(call.metadata)
        self._admit()

    def unary(self, route: str, fn: Callable[[Any, Any], Awaitable[Any]],
              model_of: Callable[[Any], str] | None = None):
        """A unary gRPC behaviour ``fn(request, context)`` behind the edge: ``stream``'s steps for one
        answer, awaited, not driven through async generators."""
        admission = self.admission

        async def handler(request, context):
            call, token, trailing = self._grpc_begin(route, request, context, model_of)
            outcome, failure, answer = "internal", None, None
            try:
                self._grpc_admit(call)
                try:
                    answer = await fn(request, context)
                finally:
                    admission.release()
                outcome = call.failed or "ok"
            except BaseException as exc:  # noqa: BLE001 - the edge: every failure takes Edge.failure
                outcome, failure = self._grpc_failure(exc)
                if failure is None:
                    raise
                answer = None if isinstance(failure, GrpcStatus) else failure
            finally:
                self._grpc_end(call, token, outcome, failure, request, _size(answer))
            if isinstance(failure, GrpcStatus):
                await _abort(context, failure, trailing)
            context.set_trailing_metadata(call.trailing + trailing if call.trailing else trailing)
            return answer

        return handler

    def unary_now(self, route: str, begin: Callable[[bytes, Call, Callable[[Any], None]], Any],
                  model_of: Callable[[Any], str] | None = None,
                  upstream_error: Callable[[BaseException], Exception] = lambda exc: exc):
        """``unary``'s steps for a call begun at once and answered from a callback, without a task or a
        coroutine (the h2 server's ``now``, gateway/h2/server.py; the V2 passthrough's relay):
        ``begin(request, call, done)`` begins it and gives what ``cancel``s it, or None where it
        cannot begin at once (then the task path, ``unary``, takes the call); ``done`` gets the
        answer's bytes or the call's failure, answered as ``upstream_error(failure)``. None with
        tracing on (a span lives in a task's context)."""
        if self.tracer is not None:
            return None

        def now(rpc) -> bool:
            request = rpc.messages[0]
            call, trailing = self._grpc_call(route, request, rpc, model_of)  # (not made current: no task)
            answering = _Answering(self, rpc, call, trailing, len(request), upstream_error)
            try:
                self._grpc_admit(call)
            except Exception as exc:  # noqa: BLE001 - the edge: every failure takes Edge.failure
                answering.fail(exc)
                return True
            try:
                handle = begin(request, call, answering.settle)
            except Exception as exc:  # noqa: BLE001 - as above
                answering.settle(exc)
                return True
            if handle is None:
                self.admission.release()
                return False
            rpc.messages.popleft()
            answering.handle = handle
            rpc.task = answering
            return True

        return now

    def stream(self, route: str, fn: Callable[[Any, Any], AsyncIterator[Any]],
               model_of: Callable[[Any], str] | None = None):
        """A server- or bidi-streaming gRPC behaviour ``fn(request_or_iterator, context)`` behind the
        edge: the one gRPC path, key, admission, the handler's answers, then a failure either aborts
        the call with its status or, for a dialect that answers errors in-band (GRPS), is the last
        answer. The handler is itself the async generator grpc.aio drives (no layer around it: each
        layer costs every message a generator step)."""
        admission = self.admission

        async def handler(request, context):
            call, token, trailing = self._grpc_begin(route, request, context, model_of)
            outcome, failure, sent = "internal", None, 0
            try:
                self._grpc_admit(call)
                try:
                    async for item in fn(request, context):
                        sent += len(item) if type(item) is bytes else _size(item)
                        yield item
                finally:
                    admission.release()
                outcome = call.failed or "ok"
            except BaseException as exc:  # noqa: BLE001 - the edge: every failure takes Edge.failure
                outcome, failure = self._grpc_failure(exc)
                if failure is None:
                    raise
                if not isinstance(failure, GrpcStatus):
                    sent += _size(failure)
            finally:
                self._grpc_end(call, token, outcome, failure, request, sent)
            if isinstance(failure, GrpcStatus):
                await _abort(context, failure, trailing)
            if failure is not None:
                yield failure
            context.set_trailing_metadata(call.trailing + trailing if call.trailing else trailing)

        return handler

    def _grpc_end(self, call: Call, token, outcome: str, failure, request, sent: int) -> None:
        """A gRPC call's end, answered or failed: its Call no longer current, its metrics and access
        line (``sent``: the bytes of its answers)."""
        leave(token)
        self.finish(call, outcome, _grpc_code(failure, outcome), _size(request), sent)

    def _grpc_failure(self, exc: BaseException):
        """(outcome, the dialect's answer for it: a GrpcStatus to abort with, or an in-band message
        (GRPS)); the answer is None when the request is gone or the process is stopping: the caller
        re-raises."""
        outcome, err = self._failed(exc)
        if err is None:
            return outcome, None
        return outcome, (err.status if isinstance(err, RelayedStatus) else self.errors.grpc(err))


class _Answering:
    """A call ``Edge.unary_now`` began, standing in for its task on the h2 server (``done``,
    ``cancel``: the client went away, or its deadline passed, as the task would be cancelled): its
    answer or failure, metrics and access line, as ``Edge.unary`` gives them."""

    __slots__ = ("edge", "rpc", "call", "trailing", "size", "upstream_error", "handle", "over")

    def __init__(self, edge: Edge, rpc, call: Call, trailing: tuple, size: int, upstream_error):
        self.edge = edge
        self.rpc = rpc
        self.call = call
        self.trailing = trailing
        self.size = size  # the request's bytes
        self.upstream_error = upstream_error
        self.handle = None
        self.over = False

    def done(self) -> bool:
        return self.over

    def settle(self, result) -> None:
        """The call's end: the answer's bytes, or its failure."""
        if self.over:
            return
        self.edge.admission.release()
        try:
            if result.__class__ is bytes:
                self.over = True
                call = self.call
                self.rpc.reply(result, call.trailing + self.trailing if call.trailing else self.trailing)
                self.edge.finish(call, call.failed or "ok", "OK", self.size, len(result))
                return
            result = self.upstream_error(result)
        except Exception as exc:  # noqa: BLE001 - a bug: as the task path's, logged and answered INTERNAL
            result = exc
        self.fail(result)

    def fail(self, exc: Exception) -> None:
        self.over = True
        outcome, failure = self.edge._grpc_failure(exc)
        self.rpc.end(failure.code, failure.message, failure.trailing + self.trailing)
        self.edge.finish(self.call, outcome, _grpc_code(failure, outcome), self.size, 0)

    def cancel(self) -> None:
        if self.over:
            return
        self.over = True
        self.handle.cancel()
        self.edge.admission.release()
        self.rpc.end_cancelled()
        self.edge.finish(self.call, "cancelled", _grpc_code(None, "cancelled"), self.size, 0)


_access_enabled = logs.ACCESS.isEnabledFor


def _http_answer(request, resp, outcome: str) -> tuple[int, int, int]:
    """(status, bytes in, bytes out) of an HTTP answer; a streamed one (resp None) is counted without its body."""
    body = request.body
    if resp is not None:
        out = resp.body  # an answer in pieces (httpbody.Pieces) has none: its ``size`` says how long it is
        return resp.status, len(body) if body else 0, len(out) if out else getattr(resp, "size", 0)
    if outcome == "cancelled":
        return 499, len(body) if body else 0, 0  # the client went away (nginx's "client closed request")
    streamed = getattr(request.stream, "response", None)
    return getattr(streamed, "status", 200), len(body) if body else 0, 0


def _grpc_code(answer, outcome: str) -> str:
    if isinstance(answer, GrpcStatus):
        return answer.code.name
    return "CANCELLED" if outcome == "cancelled" else "OK"  # GRPS answers its errors as OK + a FAILURE body


async def _abort(context, failure: GrpcStatus, trailing: tuple) -> None:
    """Ends the call with the dialect's status, the request id among its trailing metadata."""
    await context.abort(failure.code, failure.message, failure.trailing + trailing)


def _size(message) -> int:
    """Bytes of a gRPC message: raw bytes (V2 passthrough) or a protobuf; 0 for a request iterator."""
    if isinstance(message, bytes):
        return len(message)
    size = getattr(message, "ByteSize", None)
    return size() if size is not None else 0


async def _read_body(request, buffered: bool = False, bodies=None, held: list | None = None,
                     max_body: int | None = None) -> None:
    """The whole body, read once admitted. Sanic lifts the size limit for a streaming route; it is
    put back first (``max_body``, else the app's), so a body over limits.max_request_bytes is a 413
    as soon as its length is known. A large body of a ``buffered`` route is read into a buffer from
    ``bodies`` when it gives one (``Edge.bodies``), whose release goes to ``held``; a body already
    received whole is taken as it is (``httpbody.received``)."""
    stream = request.stream
    if stream is not None and stream.request_body:
        stream.request_max_size = request.app.config.REQUEST_MAX_SIZE if max_body is None else max_body
        if buffered and httpbody.wants_buffer(stream):
            alloc = None
            if bodies is not None:
                def alloc(size: int):
                    got = bodies(size)
                    if got is None:
                        return None
                    held.append(got[1])
                    return got[0]
            request.body = await httpbody.read_into_buffer(stream, alloc)
        elif (body := httpbody.received(stream)) is not None:  # all of it already here: no reader
            request.body = body
        else:
            await request.receive_body()
