"""GRPS's one error table: ErrorKind → (status.code, message prefix).

GRPS reports every error in ``GrpsMessage.status`` as ``{code, msg, status: FAILURE}`` with an
HTTP-like code. The HTTP side answers with the same HTTP status (unless configured to answer 200 like
the C++ server); gRPC always answers grpc OK with the error in the body, as GRPS does.

Overloaded and unauthenticated are the exceptions: GRPS runs on brpc, which refuses a request past the server's
``max_concurrency`` before GRPS sees it, with ELIMIT "Reached server's max_concurrency=N": HTTP 503
and gRPC UNAVAILABLE (brpc ErrorCodeToStatusCode / ErrorCodeToGrpcStatus). The gateway writes that
text in GRPS's envelope on HTTP (so GRPS clients can parse it) and as the gRPC status. A request
without a valid API key is refused the same way, before GRPS, as brpc's authenticator refuses one
(ERPCAUTH: HTTP 401, gRPC UNAUTHENTICATED).
"""

from __future__ import annotations

import logging

import grpc

from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import GrpcStatus
from gateway.edge import httpbody

from . import codec
from .config import GrpsSettings

log = logging.getLogger("gateway.grps")

# kind -> (code, prefix put before the message)
TABLE: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_ARGUMENT: (400, "Bad Request, err: "),
    ErrorKind.FAILED_PRECONDITION: (400, "Bad Request, err: "),
    ErrorKind.NOT_FOUND: (404, ""),
    ErrorKind.NOT_READY: (503, "Service Unavailable: "),
    ErrorKind.UNAVAILABLE: (503, "Service Unavailable: "),
    ErrorKind.RESOURCE_EXHAUSTED: (503, "Service Unavailable: "),
    ErrorKind.OVERLOADED: (503, ""),
    ErrorKind.DEADLINE_EXCEEDED: (500, "Deadline exceeded: "),
    ErrorKind.CANCELLED: (500, "Cancelled: "),
    ErrorKind.UNIMPLEMENTED: (500, "Not supported: "),
    ErrorKind.UPSTREAM_FAILED: (500, "Inference failed: "),
    ErrorKind.INTERNAL: (500, "Internal error: "),
    ErrorKind.UNAUTHENTICATED: (401, ""),
}

# refused before GRPS runs (by brpc): the real HTTP status always, a gRPC status instead of OK + body
_BEFORE_GRPS = {ErrorKind.OVERLOADED: grpc.StatusCode.UNAVAILABLE,
                ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED}


class ExecutorError(GatewayError):
    """What GRPS's executor throws while predicting, e.g. ``Not found model: <name>``
    (server/cpp_server/src/executor/executor.cc): the predict handler answers any exception of
    ``Executor::Infer`` with status 500 and the exception's text as it is (grps_handler.cc); so
    does its ``return-ndarray`` writer for an answer it cannot write. Its kind still says what
    happened (metrics, access log). ``answer``: the message GRPS sends with that status, when it
    carries more than the status (a gmap answer keeps its gmap)."""

    __slots__ = ("answer",)

    def __init__(self, kind: ErrorKind, message: str, answer: codec.GrpsMessage | None = None):
        super().__init__(kind, message)
        self.answer = answer


def render(err: GatewayError) -> tuple[int, str]:
    """GatewayError → (status.code, status.msg)."""
    if isinstance(err, ExecutorError):
        return 500, err.message
    code, prefix = TABLE[err.kind]
    return code, prefix + err.message


def from_exception(exc: BaseException) -> GatewayError:
    """Any exception → GatewayError; unexpected ones are logged and hidden behind INTERNAL."""
    if isinstance(exc, GatewayError):
        return exc
    log.exception("grps: unexpected error", exc_info=exc)
    return GatewayError(ErrorKind.INTERNAL, "unexpected error in the gateway (see its log)")


class Rendering:
    """The edge's ErrorRendering for both GRPS listeners (depends on the section's switches)."""

    def __init__(self, cfg: GrpsSettings):
        self.cfg = cfg

    def overloaded(self, limit: int) -> GatewayError:
        return GatewayError(ErrorKind.OVERLOADED, f"Reached server's max_concurrency={limit}")

    def message(self, err: GatewayError, status: int | None = None) -> codec.GrpsMessage:
        code, text = render(err)
        answer = getattr(err, "answer", None)
        if answer is None:
            return codec.failure(status or code, text)
        msg = codec.GrpsMessage()
        msg.CopyFrom(answer)
        msg.status.code, msg.status.msg, msg.status.status = status or code, text, codec.FAILURE
        return msg

    def http(self, err: GatewayError, status: int | None = None):
        """``status``: the HTTP status of a refusal before any handler ran (no route, a body too
        large: brpc's own, before GRPS), sent as it is; GRPS's own failures go with HTTP 200 unless
        ``http_error_status``."""
        msg = self.message(err, status)
        code = msg.status.code
        if not self.cfg.http_error_status and status is None and err.kind not in _BEFORE_GRPS:
            code = 200  # the C++ server answers HTTP 200 with the failure in the body
        body = codec.message_to_json(msg, self.cfg.pretty_json)
        return httpbody.raw(body, status=code, content_type="application/json")

    def grpc(self, err: GatewayError) -> GrpcStatus | codec.GrpsMessage:
        if err.kind in _BEFORE_GRPS:
            return GrpcStatus(_BEFORE_GRPS[err.kind], err.message)
        return self.message(err)
