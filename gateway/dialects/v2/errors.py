"""The V2 dialect's errors: Triton's own status kept exactly, the closed control plane, and their
rendering as Triton's gRPC and HTTP front ends answer them."""

from __future__ import annotations

import grpc

from gateway.core.errors import (
    GRPC_STATUS,
    HTTP_STATUS,
    ErrorKind,
    GatewayError,
    from_grpc_code,
    public_details,
)
from gateway.dialect import DefaultRendering, GrpcStatus
from gateway.edge import httpbody

from . import rjson


class Denied(GatewayError):
    """An RPC of Triton's control plane while it is closed (PERMISSION_DENIED, as Triton words it)."""

    __slots__ = ()

    def __init__(self, rpc: str):
        super().__init__(ErrorKind.FAILED_PRECONDITION,
                         f"{rpc} is not allowed through this gateway (dialects.v2.control_plane is false)")


class UpstreamStatus(GatewayError):
    """Triton's own non-OK status, kept exactly (code, details, trailing metadata)."""

    __slots__ = ("status",)

    def __init__(self, err: grpc.aio.AioRpcError):
        details = public_details(err.code(), err.details()) or ""  # Triton's address never reaches the client
        super().__init__(from_grpc_code(err.code(), details).kind, details)
        self.status = GrpcStatus(err.code(), details, tuple(err.trailing_metadata() or ()))


# Triton's HttpCodeFromError, through the gRPC code its gRPC front end gave the same error
_TRITON_HTTP = {grpc.StatusCode.INTERNAL: 500, grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.UNAVAILABLE: 503,
                grpc.StatusCode.UNIMPLEMENTED: 501, grpc.StatusCode.DEADLINE_EXCEEDED: 504}


class Rendering(DefaultRendering):
    """Overloaded is Triton's own queue-full answer: UNAVAILABLE "Exceeds maximum queue size"."""

    def overloaded(self, limit: int) -> GatewayError:
        return GatewayError(ErrorKind.OVERLOADED, "Exceeds maximum queue size")

    def http(self, err: GatewayError, status: int | None = None):
        """The V2 REST listener's answer: Triton's ``{"error":"..."}`` with the status Triton's HTTP
        front end gives for the code (``HttpCodeFromError``); the closed control plane is 403, as
        Triton's restricted APIs."""
        if status is None:
            if isinstance(err, UpstreamStatus):
                status = _TRITON_HTTP.get(err.status.code, 400)
            elif isinstance(err, Denied):
                status = 403
            else:
                status = getattr(err, "http_status", None) or HTTP_STATUS[err.kind]
        return httpbody.raw(rjson.error(err.message), status=status, content_type="application/json")

    def grpc(self, err: GatewayError) -> GrpcStatus:
        if isinstance(err, UpstreamStatus):
            return err.status
        if isinstance(err, Denied):
            return GrpcStatus(grpc.StatusCode.PERMISSION_DENIED, err.message)
        return GrpcStatus(GRPC_STATUS[err.kind], err.message)
