"""gRPC health checking: ``grpc.health.v1.Health`` (Check and Watch) on every gRPC listener.

The servicer is grpcio-health-checking's (``grpc_health.v1.health.aio.HealthServicer``); this module
decides the statuses, one per service a listener serves (the names its ``attach`` registered, e.g.
``tensorflow.serving.PredictionService``) and ``""`` for the server as a whole:

    SERVING       the worker has started, is not draining, and Triton answers ServerReady
    NOT_SERVING   draining (SIGTERM: set before the listeners stop, so watchers hear it), or Triton
                  away or not ready

``Check`` refreshes Triton's readiness first (the upstream client caches it ``upstream.cache_ttl_s``),
so a probe sees the state of the moment; while ``Watch`` streams are open, a poll every ``POLL_S``
seconds keeps them current (no watcher, no poll: Triton is asked only when someone asks the gateway).
The health service is not behind the edge: like admin ``/health``, it needs no API key, takes no
admission slot and is not counted as a request. The V2 passthrough answers it itself (its generic
handler only forwards ``inference.GRPCInferenceService``).
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from gateway.context import GatewayContext

log = logging.getLogger("gateway.health")

SERVICE = "grpc.health.v1.Health"
POLL_S = 1.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class ServiceNames:
    """The gRPC server as a listener's ``attach`` (and the health service) sees it: notes the
    services it adds, and adds their handlers as generic handlers only.

    A generated ``add_*Servicer_to_server`` adds the same handlers twice, as a generic handler and
    as registered methods. With grpcio 1.85's grpc.aio, registered methods make every call on the
    server dearer, theirs and the others' (``python -m bench.instructions`` shows it: a bare
    forwarder with and without the health service's methods registered beside it). The generic
    handler finds the same method, so
    registered methods are dropped here (as is ``_registered_method`` on the upstream calls,
    gateway/upstream/client.py).
    """

    def __init__(self, server: grpc.aio.Server):
        self._server = server
        self.names: list[str] = []

    def add_generic_rpc_handlers(self, handlers) -> None:
        for handler in handlers:
            name = getattr(handler, "service_name", None)
            if name is not None and name() not in self.names:
                self.names.append(name())
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service_name: str, _handlers) -> None:
        """Noted, not registered: the generic handler added with them serves these methods."""
        if service_name not in self.names:
            self.names.append(service_name)

    def __getattr__(self, attr):
        return getattr(self._server, attr)


class _Servicer(health_aio.HealthServicer):
    def __init__(self, health: Health, services: list[str]):
        super().__init__()
        self._health = health
        self.services = ("", *services)

    async def Check(self, request, context):  # noqa: N802 - gRPC's name
        await self._health.refresh()
        return await super().Check(request, context)

    async def Watch(self, request, context):  # noqa: N802 - gRPC's name
        await self._health.refresh()
        self._health.watchers(+1)
        try:
            await super().Watch(request, context)
        finally:
            self._health.watchers(-1)


class Health:
    """The health of one worker, shared by the servicers of all its gRPC listeners."""

    def __init__(self, ctx: GatewayContext):
        self.ctx = ctx
        self._servicers: list[_Servicer] = []
        self._status: int | None = None  # None: not yet said to the servicers (the next refresh says it)
        self._task: asyncio.Task | None = None
        self._watching = 0
        self._closed = False

    def attach(self, server: ServiceNames, services: list[str]) -> None:
        """Add the Health service to a listener's server, for ``services`` and the whole server."""
        servicer = _Servicer(self, services)
        self._servicers.append(servicer)
        self._status = None  # the next refresh (every Check and Watch begins with one) sets its names
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)

    async def serving(self) -> bool:
        ctx = self.ctx
        return ctx.started.is_set() and not ctx.draining and await ctx.upstream.server_ready()

    async def refresh(self) -> None:
        status = SERVING if await self.serving() else NOT_SERVING
        if status != self._status:
            self._status = status
            for servicer in self._servicers:
                for name in servicer.services:
                    await servicer.set(name, status)

    def watchers(self, delta: int) -> None:
        """A Watch stream opened (+1) or closed (-1): the poll runs while there is one."""
        self._watching += delta
        if self._watching > 0 and self._task is None and not self._closed:
            self._task = asyncio.ensure_future(self._poll())
        elif self._watching <= 0 and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _poll(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - never let the poller die; the next round tries again
                log.exception("health poll failed")
            await asyncio.sleep(POLL_S)

    async def drain(self) -> None:
        """NOT_SERVING for good (SIGTERM), before the listeners stop: watchers hear it."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for servicer in self._servicers:
            await servicer.enter_graceful_shutdown()
