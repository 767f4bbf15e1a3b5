"""The V2 REST listener's calls to Triton (built once per listener, V2 gRPC over the worker's
channel) and its small answer helpers."""

from __future__ import annotations

import asyncio
import time

import grpc
from sanic import Request
from tritonclient.grpc import service_pb2

from gateway.access import unknown_model
from gateway.call import current
from gateway.core.errors import ErrorKind, GatewayError
from gateway.edge import httpbody
from gateway.observe import metrics, tracing
from gateway.upstream import cancel
from gateway.upstream.wire import parse_response

from .errors import UpstreamStatus
from .passthrough import PREFIX
from .state import State

JSON = "application/json"
EMPTY = "text/plain"  # the type evhtp gives Triton's answers without a body of their own (health, readiness)


class MethodNotAllowed(GatewayError):
    __slots__ = ()
    http_status = 405

    def __init__(self):
        super().__init__(ErrorKind.INVALID_ARGUMENT, "Method Not Allowed")


class Rest:
    """The listener's upstream calls, built once per listener."""

    def __init__(self, state: State):
        self.scope = state.ctx.scope  # dialects.v2.triton_models (None: every model)
        self.upstream = state.ctx.upstream
        self.control = state.config.control_plane
        self.cancels = cancel.streams_cancelled(state.ctx.settings.upstream.cancel)  # a stream whose client left
        self._rpc = {}
        for name, resp in (("ServerLive", service_pb2.ServerLiveResponse),
                           ("ServerReady", service_pb2.ServerReadyResponse),
                           ("ServerMetadata", service_pb2.ServerMetadataResponse),
                           ("ModelReady", service_pb2.ModelReadyResponse),
                           ("ModelMetadata", service_pb2.ModelMetadataResponse),
                           ("ModelConfig", service_pb2.ModelConfigResponse),
                           ("ModelStatistics", service_pb2.ModelStatisticsResponse),
                           ("RepositoryIndex", service_pb2.RepositoryIndexResponse),
                           ("RepositoryModelLoad", service_pb2.RepositoryModelLoadResponse),
                           ("RepositoryModelUnload", service_pb2.RepositoryModelUnloadResponse),
                           ("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusResponse),
                           ("CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusResponse)):
            self._rpc[name] = state.ctx.unary(PREFIX + name, _bytes_or_message, resp.FromString)
        # (answer, its raw contents as views of gRPC's bytes, or None: the answer's own)
        # ModelInfer is always given its wire bytes (http._parse): no serializer to call
        self._rpc["ModelInfer"] = state.ctx.unary(PREFIX + "ModelInfer", None, parse_response)

    async def stream(self, request: bytes, metadata=None):
        """ModelStreamInfer of one request (half-closed with it), on the worker's transport
        (``Upstream.stream_one``): the call, its answers ModelStreamInferResponse messages."""
        return await self.upstream.stream_one(request, service_pb2.ModelStreamInferResponse.FromString,
                                              current().remaining(stream=True), metadata)

    def check(self, model: str) -> None:
        if self.scope is not None and not self.scope.allows(model):
            raise unknown_model(model)

    async def call(self, name: str, request, model: str = ""):
        """``name`` on Triton (``Upstream.unary``, a direct call: a cancelled handler,
        the client gone, cancels Triton's call)."""
        start, code = time.perf_counter(), "OK"
        with tracing.upstream(name, model) as md:  # tracing on: a client span, its traceparent to Triton
            try:
                return await self._rpc[name](request, timeout=current().remaining(), metadata=md)
            except grpc.aio.AioRpcError as err:
                code = err.code().name
                raise UpstreamStatus(err) from None
            except asyncio.CancelledError:  # the client went away (sanic cancels the handler)
                code = "CANCELLED"
                raise
            finally:
                metrics.observe_upstream(name, model, code, time.perf_counter() - start)


def _bytes_or_message(req) -> bytes:
    return req if isinstance(req, bytes) else req.SerializeToString()


def version(text: str | None) -> str:
    return text or ""


def answer(body: bytes, status: int = 200, content_type: str | None = JSON, headers: dict | None = None):
    return httpbody.raw(body, status=status, content_type=content_type, headers=headers)  # large: not joined


def require(request: Request, method: str) -> None:
    if request.method != method:
        raise MethodNotAllowed()
