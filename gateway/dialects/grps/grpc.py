"""GRPS gRPC listener (7081): grps.protos.v1.GrpsService, eight RPCs over GrpsService.

As in GRPS, every RPC answers grpc OK; errors travel in ``GrpsMessage.status`` (FAILURE), and a
stream that fails ends with one FAILURE message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import grpc

from gateway._proto import grps_pb2_grpc
from gateway.edge import Edge

from . import codec
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


def attach(server: grpc.aio.Server, edge: Edge, svc: GrpsService) -> None:
    servicer = GrpsServicer(svc)
    wrapped = {m: edge.unary(m, getattr(servicer, m)) for m in UNARY}
    wrapped["PredictStreaming"] = edge.stream("PredictStreaming", servicer.PredictStreaming)
    grps_pb2_grpc.add_GrpsServiceServicer_to_server(SimpleNamespace(**wrapped), server)
