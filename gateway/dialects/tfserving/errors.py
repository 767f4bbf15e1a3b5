"""TF Serving's rendering of errors: ONE table ErrorKind -> (TF status code, HTTP status, gRPC code).

TF Serving passes its absl status code straight through as the gRPC code and maps it to HTTP with
``ToHTTPStatusCode`` (http_server.cc): the table is built from those two, the status of each kind
and that mapping. The canonical message texts TF Serving uses are built by the
helpers below, so every caller writes them the same way. Overloaded: TF Serving's batch scheduler
refuses a task with UNAVAILABLE "The batch scheduling queue to which this task was submitted is
full" (shared_batch_scheduler.h), so REST answers 503 and gRPC UNAVAILABLE.
"""

from __future__ import annotations

import grpc

from gateway.core.bounded import clip
from gateway.core.errors import ErrorKind, GatewayError, invalid, not_found
from gateway.dialect import GrpcStatus
from gateway.edge import httpbody

from . import jsonwrite

# ErrorKind -> the absl status TF Serving answers with
_STATUS: dict[ErrorKind, str] = {
    ErrorKind.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ErrorKind.NOT_FOUND: "NOT_FOUND",
    ErrorKind.FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ErrorKind.NOT_READY: "UNAVAILABLE",
    ErrorKind.UNAVAILABLE: "UNAVAILABLE",
    ErrorKind.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
    ErrorKind.RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
    ErrorKind.OVERLOADED: "UNAVAILABLE",
    ErrorKind.CANCELLED: "CANCELLED",
    ErrorKind.UNIMPLEMENTED: "UNIMPLEMENTED",
    ErrorKind.UPSTREAM_FAILED: "INTERNAL",
    ErrorKind.INTERNAL: "INTERNAL",
    ErrorKind.UNAUTHENTICATED: "UNAUTHENTICATED",  # TF Serving has no API keys; absl's status all the same
}
# absl status -> HTTP status: http_server.cc ToHTTPStatusCode, for the statuses above
_HTTP = {"INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "FAILED_PRECONDITION": 400, "UNAVAILABLE": 503,
         "DEADLINE_EXCEEDED": 504, "RESOURCE_EXHAUSTED": 429, "CANCELLED": 499, "UNIMPLEMENTED": 501,
         "INTERNAL": 500, "UNAUTHENTICATED": 401}
# ErrorKind -> (TF status name, HTTP status, gRPC status code): the gRPC code is the absl status itself
TABLE: dict[ErrorKind, tuple[str, int, grpc.StatusCode]] = {
    kind: (name, _HTTP[name], grpc.StatusCode[name]) for kind, name in _STATUS.items()}

GRPC_MESSAGE_LIMIT = 1024  # grpc_status_util.cc truncates longer messages
OVERLOADED = "The batch scheduling queue to which this task was submitted is full"


class BareError(GatewayError):
    """An error TF Serving answers with its status code and an EMPTY body: the ones raised before its
    handler writes the JSON envelope (an unparsable version number in the path, a refused CORS
    preflight)."""

    __slots__ = ()


class PageError(GatewayError):
    """A request TF Serving never sees: its HTTP server (net_http over libevent) dispatches only
    ``/v1/`` paths to TF Serving (``RestApiRequestDispatcher``) and answers any other with
    ``evhttp_send_error(req, HTTP_NOTFOUND, nullptr)`` (util/net_http/server/internal/evhttp_server.cc):
    libevent's error page, ``text/html; charset=ISO-8859-1`` (http.c ``ERR_FORMAT``, ``evhttp_send_page_``)."""

    __slots__ = ()


PAGE_CONTENT_TYPE = "text/html; charset=ISO-8859-1"


def page(status: int, reason: str) -> bytes:
    """libevent's evhttp_send_error body."""
    return (f"<HTML><HEAD>\n<TITLE>{status} {reason}</TITLE>\n</HEAD><BODY>\n<H1>{reason}</H1>\n"
            "</BODY></HTML>\n").encode("ascii")


def http_error(err: GatewayError) -> tuple[int, bytes]:
    """(HTTP status, body) for the REST envelope ``{"error": "<message>"}`` as TF Serving's
    MakeJsonFromStatus writes it (``jsonwrite.error``); empty for ``BareError``."""
    if isinstance(err, BareError):
        return TABLE[err.kind][1], b""
    if isinstance(err, PageError):
        return 404, page(404, "Not Found")
    return TABLE[err.kind][1], jsonwrite.error(err.message)


def grpc_error(err: GatewayError) -> tuple[grpc.StatusCode, str]:
    msg = err.message
    if len(msg) > GRPC_MESSAGE_LIMIT:
        msg = msg[:GRPC_MESSAGE_LIMIT] + "...TRUNCATED"
    return TABLE[err.kind][2], msg


class Rendering:
    """The edge's ErrorRendering for both TF Serving listeners."""

    def overloaded(self, limit: int) -> GatewayError:
        return GatewayError(ErrorKind.OVERLOADED, OVERLOADED)

    def http(self, err: GatewayError, status: int | None = None):
        code, body = http_error(err)
        ctype = PAGE_CONTENT_TYPE if isinstance(err, PageError) else "application/json"
        return httpbody.raw(body, status=status or code, content_type=ctype)

    def grpc(self, err: GatewayError) -> GrpcStatus:
        if isinstance(err, Unparsable):
            return GrpcStatus(grpc.StatusCode.UNKNOWN, err.message)
        return GrpcStatus(*grpc_error(err))


# -- TF Serving's canonical texts --------------------------------------------------------------
def servable_not_found(model: str, version: int | None) -> GatewayError:
    what = f"Latest({model})" if version is None else f"Specific({model}, {version})"
    return not_found(f"Servable not found for request: {what}")


def unknown_label(label: str) -> GatewayError:
    return invalid(f"Unrecognized servable version label: {clip(label)}")


def no_versions(model: str) -> GatewayError:
    return not_found(f"Could not find any versions of model {model}")


def no_version(model: str, version: int) -> GatewayError:
    return not_found(f"Could not find version {version} of model {model}")


def signature_not_found_rest(sig: str) -> GatewayError:
    return invalid(f'Serving signature name: "{sig}" not found in signature def')


def no_signature(sig: str) -> GatewayError:
    """classify/regress (REST and gRPC): the text of TF Serving's classifier.cc / regressor.cc."""
    return invalid(f"No signature was found with the name: {sig}")


def bad_version(text: str) -> GatewayError:
    return BareError(ErrorKind.INVALID_ARGUMENT, f"Failed to convert version: {clip(text)} to numeric.")


def signature_not_found_grpc(sig: str) -> GatewayError:
    return GatewayError(ErrorKind.FAILED_PRECONDITION, f'Serving signature key "{sig}" not found.')


class Unparsable(GatewayError):
    """A gRPC request that is not the message it should be: answered as grpc.aio answers a request its
    deserializer refuses (UNKNOWN, in its words), which is what this listener answered while gRPC
    parsed its requests."""

    __slots__ = ()

    def __init__(self, message_type: str):
        super().__init__(ErrorKind.INVALID_ARGUMENT, "Unexpected <class 'google.protobuf.message.DecodeError'>: "
                                                     f"Error parsing message with type '{message_type}'")
