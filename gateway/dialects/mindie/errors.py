"""The MindIE error table: ErrorKind -> (HTTP status, error_type), and the envelope renderers.

Body: ``{"error": "<message>", "error_type": "<type>"}`` for every family (OpenAI included, as
MindIE does). After a stream has started, an error goes in-band in the family's framing
(``data: <envelope>`` for SSE families, ``<envelope>\\0`` for vLLM).

Overloaded: 429, as MindIE-MS's coordinator answers past ``max_requests`` (its text, "Too many
requests"), in the server's JSON envelope with the ``overloaded`` error_type MindIE uses for its
own 429s (memory-pressure interception), which the TGI client maps to OverloadedError and the
openai SDK to a retried RateLimitError.
"""

from __future__ import annotations

import orjson

from gateway.call import current
from gateway.core.errors import ErrorKind, GatewayError
from gateway.dialect import DefaultRendering
from gateway.edge import httpbody

VALIDATION = "Input Validation Error"

TABLE: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_ARGUMENT: (422, VALIDATION),
    ErrorKind.NOT_FOUND: (404, "NotFoundError"),
    ErrorKind.FAILED_PRECONDITION: (424, "Generation Error"),
    ErrorKind.NOT_READY: (503, "Service Unavailable"),
    ErrorKind.UNAVAILABLE: (503, "Service Unavailable"),
    ErrorKind.DEADLINE_EXCEEDED: (500, "Incomplete Generation"),
    ErrorKind.RESOURCE_EXHAUSTED: (429, "Too Many Requests"),
    ErrorKind.OVERLOADED: (429, "overloaded"),
    ErrorKind.CANCELLED: (500, "Incomplete Generation"),
    ErrorKind.UNIMPLEMENTED: (501, "Not Implemented"),
    ErrorKind.UPSTREAM_FAILED: (424, "Generation Error"),
    ErrorKind.INTERNAL: (500, "Incomplete Generation"),
    ErrorKind.UNAUTHENTICATED: (401, "Unauthorized"),
}
# MindIE has no API keys. On the OpenAI routes a refused key is answered as OpenAI does (the openai
# SDK raises AuthenticationError); the other families keep MindIE's envelope with status 401.
OPENAI_ROUTES = frozenset({"chat", "completions", "models", "model"})


def openai_unauthenticated(err: GatewayError) -> dict:
    return {"error": {"message": err.message, "type": "invalid_request_error", "param": None,
                      "code": "invalid_api_key"}}


def message(err: GatewayError) -> str:
    if err.kind is ErrorKind.DEADLINE_EXCEEDED:
        return "Engine callback timeout: client timeout"
    return err.message


def envelope(err: GatewayError) -> tuple[int, dict]:
    status, error_type = TABLE[err.kind]
    return status, {"error": message(err), "error_type": error_type}


def envelope_bytes(err: GatewayError) -> bytes:
    return orjson.dumps(envelope(err)[1])


class Rendering(DefaultRendering):
    """The edge's ErrorRendering for the MindIE listener (HTTP only: gRPC is the default's)."""

    def overloaded(self, limit: int) -> GatewayError:
        return GatewayError(ErrorKind.OVERLOADED, "Too many requests")

    def http(self, err: GatewayError, status: int | None = None):
        code, body = envelope(err)
        call = current()
        if err.kind is ErrorKind.UNAUTHENTICATED and call is not None and call.route in OPENAI_ROUTES:
            body = openai_unauthenticated(err)
        return httpbody.raw(orjson.dumps(body), status=status or code, content_type="application/json")
