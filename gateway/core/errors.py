"""One error taxonomy, independent of HTTP and gRPC.

    GatewayError(kind, message)          raised anywhere in the gateway
      kind: ErrorKind                    what went wrong, in transport-neutral terms

Triton's gRPC status codes become a GatewayError at the upstream edge (``from_grpc_code``); each
dialect renders an ErrorKind in its own envelope through a table of its own
(``ErrorKind -> (HTTP status, gRPC status, body)``) that must cover every kind: see
``check_table``. Besides ``gateway.upstream``, grpc's own errors are seen by the V2 dialect (its
passthrough and REST calls hand Triton's own status on in Triton's words, docs/v2.md), start-up's
readiness probe, and tracing (a span's status); every other dialect sees GatewayError only.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping

import grpc

log = logging.getLogger("gateway.upstream")


class ErrorKind(enum.Enum):
    INVALID_ARGUMENT = "invalid_argument"  # the client's request is wrong
    NOT_FOUND = "not_found"  # unknown model, version, signature, route
    FAILED_PRECONDITION = "failed_precondition"  # valid request, wrong state (e.g. model offline)
    NOT_READY = "not_ready"  # model or server exists but is not ready to serve
    UNAVAILABLE = "unavailable"  # upstream unreachable
    DEADLINE_EXCEEDED = "deadline_exceeded"
    RESOURCE_EXHAUSTED = "resource_exhausted"  # a request too large for a limit
    OVERLOADED = "overloaded"  # the gateway is at its in-flight limit: each dialect answers as its original
    CANCELLED = "cancelled"
    UNIMPLEMENTED = "unimplemented"
    UPSTREAM_FAILED = "upstream_failed"  # Triton answered with an internal error
    INTERNAL = "internal"  # a bug in the gateway
    UNAUTHENTICATED = "unauthenticated"  # no valid API key for a listener that requires one


class GatewayError(Exception):
    """The one exception type that crosses module boundaries inside the gateway."""

    __slots__ = ("kind", "message")

    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"GatewayError({self.kind.name}, {self.message!r})"


def invalid(message: str) -> GatewayError:
    return GatewayError(ErrorKind.INVALID_ARGUMENT, message)


def not_found(message: str) -> GatewayError:
    return GatewayError(ErrorKind.NOT_FOUND, message)


def unimplemented(message: str) -> GatewayError:
    return GatewayError(ErrorKind.UNIMPLEMENTED, message)


_FROM_GRPC: dict[grpc.StatusCode, ErrorKind] = {
    grpc.StatusCode.INVALID_ARGUMENT: ErrorKind.INVALID_ARGUMENT,
    grpc.StatusCode.OUT_OF_RANGE: ErrorKind.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND: ErrorKind.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS: ErrorKind.FAILED_PRECONDITION,
    grpc.StatusCode.FAILED_PRECONDITION: ErrorKind.FAILED_PRECONDITION,
    grpc.StatusCode.UNAVAILABLE: ErrorKind.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorKind.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ErrorKind.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED: ErrorKind.CANCELLED,
    grpc.StatusCode.UNIMPLEMENTED: ErrorKind.UNIMPLEMENTED,
    grpc.StatusCode.INTERNAL: ErrorKind.UPSTREAM_FAILED,
    grpc.StatusCode.UNKNOWN: ErrorKind.UPSTREAM_FAILED,
    grpc.StatusCode.DATA_LOSS: ErrorKind.UPSTREAM_FAILED,
    grpc.StatusCode.ABORTED: ErrorKind.UPSTREAM_FAILED,
    grpc.StatusCode.PERMISSION_DENIED: ErrorKind.UPSTREAM_FAILED,
    grpc.StatusCode.UNAUTHENTICATED: ErrorKind.UPSTREAM_FAILED,
}


# grpc-core's own words when the channel cannot reach Triton, and the HTTP/2 client's
# (gateway/h2/client.py: a connection lost, refused, closed by GOAWAY twice, its keepalive
# unanswered, or a protocol error from the server): they name Triton's address, which a client is
# not told (the text is logged instead); Triton's own UNAVAILABLE answers keep their text
_TRANSPORT_WORDS = ("failed to connect", "errors resolving", "dns resolution", "socket closed", "connection reset",
                    "connection lost", "goaway received", "keepalive watchdog", "http/2 error",
                    "handshake", "ipv4:", "ipv6:", "unix:", "connections to all backends")
UNREACHABLE = "Triton is unreachable"
_last_logged: list[str] = [""]


def public_details(code: grpc.StatusCode | None, details: str | None) -> str | None:
    """``details`` as a client may see them: a transport failure's text (with Triton's address) is
    replaced by UNREACHABLE and logged (each new text once in a row)."""
    if code is grpc.StatusCode.UNAVAILABLE and details:
        low = details.lower()
        if any(w in low for w in _TRANSPORT_WORDS):
            if details != _last_logged[0]:
                _last_logged[0] = details
                log.warning("upstream unreachable: %s", details)
            return UNREACHABLE
    return details


def from_grpc_code(code: grpc.StatusCode | None, details: str | None) -> GatewayError:
    """Triton's gRPC status → GatewayError (used only at the upstream edge)."""
    kind = _FROM_GRPC.get(code, ErrorKind.UPSTREAM_FAILED) if code is not None else ErrorKind.UPSTREAM_FAILED
    return GatewayError(kind, public_details(code, details) or (code.name if code else "upstream error"))


# A generic rendering used by listeners that have no dialect of their own (admin) and as the
# default gRPC mapping. Dialects keep their own tables and test them with check_table.
GRPC_STATUS: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.NOT_READY: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorKind.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorKind.OVERLOADED: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorKind.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorKind.UPSTREAM_FAILED: grpc.StatusCode.INTERNAL,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}

HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID_ARGUMENT: 400,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.FAILED_PRECONDITION: 400,
    ErrorKind.NOT_READY: 503,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.DEADLINE_EXCEEDED: 504,
    ErrorKind.RESOURCE_EXHAUSTED: 429,
    ErrorKind.OVERLOADED: 503,
    ErrorKind.CANCELLED: 499,
    ErrorKind.UNIMPLEMENTED: 501,
    ErrorKind.UPSTREAM_FAILED: 500,
    ErrorKind.INTERNAL: 500,
    ErrorKind.UNAUTHENTICATED: 401,
}


def check_table(table: Mapping[ErrorKind, object], name: str = "table") -> None:
    """Raise AssertionError unless ``table`` renders every ErrorKind (dialects test this)."""
    missing = [k.name for k in ErrorKind if k not in table]
    if missing:
        raise AssertionError(f"{name} does not render {', '.join(missing)}")
