"""GRPS gRPC listener (7081): grps.protos.v1.GrpsService, eight RPCs over GrpsService.

As in GRPS, every RPC answers grpc OK; errors travel in ``GrpsMessage.status`` (FAILURE), and a
stream that fails ends with one FAILURE message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import grpc
from google.protobuf.message import DecodeError

from gateway._proto import grps_pb2_grpc
from gateway.core.errors import invalid
from gateway.cutover import grpcroute
from gateway.edge import Edge

from . import codec, cutover_grpc
from .service import GrpsService


class GrpsServicer:
    """The eight RPCs over the worker's GrpsService; the edge renders errors (OK + FAILURE body)."""

    def __init__(self, svc: GrpsService):
        self.svc = svc

    async def Online(self, request, context):  # noqa: N802 - names fixed by the proto
        return self.svc.set_online(True)

    async def Offline(self, request, context):  # noqa: N802
        return self.svc.set_online(False)

    async def CheckLiveness(self, request, context):  # noqa: N802
        return codec.ok()

    async def CheckReadiness(self, request, context):  # noqa: N802
        return await self.svc.ready()

    async def Predict(self, request, context):  # noqa: N802
        return (await self.svc.predict(request))[0]

    async def PredictStreaming(self, request, context) -> AsyncIterator[codec.GrpsMessage]:  # noqa: N802
        messages = self.svc.predict_stream(request)
        try:
            async for msg in messages:
                yield msg
        finally:
            await messages.aclose()  # client gone: closing cancels the Triton request

    async def ServerMetadata(self, request, context):  # noqa: N802
        return await self.svc.server_metadata()

    async def ModelMetadata(self, request, context):  # noqa: N802
        out = await self.svc.model_metadata(request)
        if out.status.status == codec.FAILURE:
            out.str_data = ""  # GRPS's gRPC ModelMetadata sets an empty str_data with its Not Found
        return out


UNARY = ("Online", "Offline", "CheckLiveness", "CheckReadiness", "Predict", "ServerMetadata", "ModelMetadata")


def _model_of(default: str):
    """The model a request is routed by: its ``model``, else (Predict) GRPS's default model."""
    def model_of(method: str, data: bytes) -> str:
        name = cutover_grpc.model_of(method, data)
        return name or (default if method in ("Predict", "PredictStreaming", "ModelMetadata") else "")
    return model_of


def _parsed(data: bytes) -> codec.GrpsMessage:
    try:
        return codec.GrpsMessage.FromString(data)
    except DecodeError:
        raise invalid("request is not a grps.protos.v1.GrpsMessage") from None


def _unary_bytes(fn):
    async def handler(data: bytes, context):
        return await fn(_parsed(data), context)
    return handler


def _stream_bytes(fn):
    def handler(data: bytes, context):
        return fn(_parsed(data), context)
    return handler


def _message_bytes(answer) -> bytes:
    return answer if answer.__class__ is bytes else answer.SerializeToString()


def _cutover(server: grpc.aio.Server, edge: Edge, servicer: GrpsServicer, cut) -> None:
    """Every RPC behind the cutover's routes (``dialects.grps.legacy.grpc`` set), taking its
    request's bytes, which the legacy route relays unchanged (gateway/cutover/grpcroute.py)."""
    wrapped = {m: edge.unary(m, cut.unary(m, cutover_grpc.path(m), _unary_bytes(getattr(servicer, m))))
               for m in UNARY}
    wrapped["PredictStreaming"] = edge.stream("PredictStreaming", cut.stream(
        "PredictStreaming", cutover_grpc.path("PredictStreaming"), _stream_bytes(servicer.PredictStreaming)))
    handlers = {}
    for m, fn in wrapped.items():
        make = grpc.unary_stream_rpc_method_handler if m == "PredictStreaming" else grpc.unary_unary_rpc_method_handler
        handlers[m] = make(fn, request_deserializer=None, response_serializer=_message_bytes)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("grps.protos.v1.GrpsService", handlers),))


def attach(server: grpc.aio.Server, edge: Edge, svc: GrpsService) -> None:
    servicer = GrpsServicer(svc)
    cut = grpcroute.for_listener(svc, cutover_grpc.answer, svc.errors.grpc, _model_of(svc.cfg.default_model),
                                 edge.keys)
    if cut is not None:
        _cutover(server, edge, servicer, cut)
        return
    wrapped = {m: edge.unary(m, getattr(servicer, m)) for m in UNARY}
    wrapped["PredictStreaming"] = edge.stream("PredictStreaming", servicer.PredictStreaming)
    grps_pb2_grpc.add_GrpsServiceServicer_to_server(SimpleNamespace(**wrapped), server)
