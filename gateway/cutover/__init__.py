"""Cutting over from a legacy server: the original server behind the gateway, Triton compared with it.

Dialect-neutral: no dialect is imported here; a dialect builds one ``Cutover`` per worker from its
``dialects.<d>.legacy`` section (``open``) and asks it, per request, who answers:

    cut = cutover.open("tfserving", conf.legacy, ctx.settings.source)      # None: no legacy section
    decision = cut.choose(model, request.headers.get, client_address)    # routing.Decision
    if decision.answer == "legacy": ... relay to cut.http (legacy_http) ...
    if decision.shadow: pending = cut.shadow.start(model, decision, body, background)

The parts: settings (the schema), routing (route per model, canary draw, reload), legacy_http (the
pooled HTTP client), httprelay (a sanic answer from a legacy reply, SSE streams as they come),
httproute and grpcroute (a listener's request answered as its route says),
shadow (the background side, bounded, with its own deadline), compare (neutral tensors), record
(the mismatch JSONL), report (``gateway migration report``). Metrics are gateway/observe/metrics.py's
``gateway_migration_*``. /work/notes/cutover-api.md and docs/migration.md say how a dialect plugs in.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.observe import metrics

from .compare import Answer, Comparison, Wire, compare, failure
from .record import Recorder
from .routing import Decision, Policy, Routes, metadata_getter
from .settings import LegacySettings, RouteSettings
from .shadow import Pending, Shadow

log = logging.getLogger("gateway.cutover")

__all__ = ["Answer", "Comparison", "Cutover", "Decision", "LegacySettings", "Pending", "Policy", "RouteSettings",
           "Wire", "compare", "failure", "metadata_getter", "open"]


class Cutover:
    """One dialect's cutover state in one worker: routes, the legacy HTTP client, the gRPC relay (a
    dialect with a gRPC listener, ``grpc``), the shadow runner."""

    def __init__(self, dialect: str, legacy: LegacySettings, source: str = "", grpc: bool = False):
        self.dialect = dialect
        self.settings = legacy
        self.routes = Routes(dialect, legacy, source)
        self.recorder = Recorder(dialect, legacy.mismatches)
        self.shadow = Shadow(dialect, self.recorder)
        self.http = None
        self.grpc = None  # the channel the gRPC listener relays on (gateway/upstream/relay.py)
        self._probes: list[asyncio.Task] = []
        if legacy.http:
            from .legacy_http import LegacyHttp

            self.http = LegacyHttp(dialect, legacy)
        if grpc and legacy.grpc:
            from gateway.upstream.relay import GrpcRelay

            self.grpc = GrpcRelay(legacy)

    def choose(self, model: str, header=None, client: str = "") -> Decision:
        """Who answers this request (routing.Routes.choose)."""
        return self.routes.choose(model, header, client)

    async def start(self, probe_path: str = "/") -> None:
        """At the worker's start: probe the legacy server's HTTP and gRPC sides in the background
        (never holds the start)."""
        loop = asyncio.get_running_loop()
        if self.http is not None:
            self._probes.append(loop.create_task(self.check_http(probe_path)))
        if self.grpc is not None:
            self._probes.append(loop.create_task(self.grpc.check(self.dialect)))

    async def check_http(self, path: str = "/") -> bool:
        """Probe the legacy HTTP server once (``gateway_legacy_up{transport="http"}``, a start-up line)."""
        if self.http is None:
            return False
        up = await self.http.probe(path)
        metrics.LEGACY_UP.labels(self.dialect, "http").set(1 if up else 0)
        level = logging.INFO if up else logging.WARNING
        log.log(level, "%s legacy server %s: %s (default route %s, %d models routed)", self.dialect,
                self.settings.http, "reachable" if up else "NOT reachable", self.settings.route,
                len(self.settings.models))
        return up

    async def close(self) -> None:
        for probe in self._probes:
            probe.cancel()
        await self.shadow.close()
        if self.http is not None:
            await self.http.close()
        if self.grpc is not None:
            await self.grpc.close()


def open(dialect: str, legacy: LegacySettings | None, source: str = "", grpc: bool = False) -> Cutover | None:  # noqa: A001
    """The dialect's Cutover, or None without a ``legacy`` section (every request to Triton); ``grpc``:
    the dialect has a gRPC listener, which relays to ``legacy.grpc``."""
    return None if legacy is None else Cutover(dialect, legacy, source, grpc)
