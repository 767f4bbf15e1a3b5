"""One request in flight: its ``Call`` (id, route, model, deadlines), the worker's in-flight bound.

The edge (gateway/edge/__init__.py) makes a ``Call`` for every request and makes it current for the
duration of the handler; code below the edge (the upstream client, the generation core, a
dialect's service) reads it with ``current()`` instead of having it passed along. This module
imports nothing of the gateway but metrics and the error taxonomy, so every layer may use it.

    Call            request id, route, model, deadlines (the listener's default or the client's
                    when shorter), an in-band failure kind
    current()       the Call of the running task, or None outside a request
    Admission       ``limits.max_inflight`` of one worker, shared by all its listeners
    request_id()    the client's ``X-Request-Id`` when it is usable, else a generated one
"""

from __future__ import annotations

import itertools
import os
import time
from contextvars import ContextVar

from gateway.core.errors import GatewayError
from gateway.observe import metrics

REQUEST_ID = "x-request-id"  # HTTP header and gRPC metadata key, both ways
MAX_REQUEST_ID = 128  # longer client ids are cut (they travel in logs, headers and Triton's trace)
_ids = itertools.count(1)
_ID_PREFIX = os.urandom(4).hex()
_current: ContextVar[Call | None] = ContextVar("gateway_call", default=None)
current = _current.get  # () -> Call | None: the request being handled in this task
enter = _current.set  # (call) -> token: make ``call`` current (the edge, and tests)


def leave(token) -> None:
    """Undo ``enter``. A handler's generator closed from another context (a gRPC stream the client
    cancelled while an answer was being sent is finalized by grpc's own task) has nothing of its own
    to undo there: the request still gets its metrics and access line."""
    try:
        _current.reset(token)
    except ValueError:  # the token belongs to the context the generator ran in, not this one
        pass


def generated_request_id() -> str:
    """``<worker prefix>-<counter in hex>``: unique per gateway process, cheap, sortable in logs."""
    return f"{_ID_PREFIX}-{next(_ids):x}"


def request_id(given: str | None) -> str:
    """The client's id when it is printable ASCII (cut to MAX_REQUEST_ID), else a generated one."""
    if not given or not (given.isascii() and given.isprintable()):  # headers, gRPC metadata, logs
        return generated_request_id()
    return given[:MAX_REQUEST_ID]


class Call:
    """One request as the edge sees it."""

    __slots__ = ("request_id", "route", "model", "start", "deadline", "stream_deadline", "failed", "trace",
                 "metadata", "trailing", "id_back")

    def __init__(self, request_id: str, route: str, timeout: float, stream_timeout: float,
                 client_timeout: float | None = None):
        self.request_id = request_id
        self.route = route
        self.model = ""
        self.failed = ""  # an error kind a handler answered in-band (a stream that failed midway)
        self.trace = None  # the request's server span, a gateway.observe.tracing.Traced (tracing on)
        self.metadata = ()  # a gRPC call's invocation metadata, read once by the edge (grpc builds it anew per read)
        self.trailing = ()  # a gRPC answer's trailing metadata before the edge's own (a relayed legacy answer's)
        self.id_back = True  # the answer carries the request id (False: none was given, and the listener answers
        #                      as its upstream said it: Edge.generated_id_back)
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


def stream_headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Headers for an answer a handler streams itself (``request.respond``): the request id (``Call.id_back``)."""
    call = _current.get()
    headers = dict(extra or {})
    if call is not None and call.id_back:
        headers[REQUEST_ID] = call.request_id
    return headers


class Admission:
    """The in-flight bound of one worker, shared by all its listeners."""

    __slots__ = ("limit", "inflight", "__weakref__")

    def __init__(self, limit: int):
        self.limit = limit
        self.inflight = 0
        metrics.track_inflight(self)  # gateway_inflight_requests reads ``inflight``

    def acquire(self) -> bool:
        if self.inflight >= self.limit:
            return False
        self.inflight += 1
        metrics.changed()  # the gauge follows within metrics.FLUSH_S
        return True

    def release(self) -> None:
        self.inflight -= 1
