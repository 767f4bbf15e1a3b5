"""Admin listener: ``GET /health`` (200 once the gateway is up and Triton is ready), ``/live``, ``/metrics``.

Declared in the catalogue like a dialect, so its listener is configured and started the same way;
its routes skip admission (a saturated worker still answers its probes and its scrapes).
"""

from __future__ import annotations

from dataclasses import dataclass

from sanic import Sanic, response

from gateway.context import GatewayContext
from gateway.dialect import DefaultRendering, Dialect, ListenerSpec
from gateway.edge import Edge, httpbody
from gateway.observe import metrics

DIALECT = Dialect(
    name="admin",
    listeners=(ListenerSpec("admin_http", 9090, "http", "admin HTTP (/health, /live, /metrics)",
                            "gateway.ops.admin:attach"),),
    open="gateway.ops.admin:open",
    reaches_models=False,
)


@dataclass
class State:
    ctx: GatewayContext
    errors: DefaultRendering


def open(ctx: GatewayContext, _config) -> State:
    return State(ctx, DefaultRendering())


def attach(app: Sanic, edge: Edge, state: State) -> None:
    ctx = state.ctx

    async def health(_request):
        ready = ctx.started.is_set() and not ctx.draining and await ctx.upstream.server_ready()
        metrics.UPSTREAM_READY.set(1 if ready else 0)
        # no internal addresses in the answer: the probe needs the status only
        body = {"status": "ready" if ready else ("draining" if ctx.draining else "not ready")}
        return response.json(body, status=200 if ready else 503)

    async def live(_request):
        return response.json({"status": "live"})

    async def prometheus(_request):
        metrics.UPSTREAM_READY.set(1 if await ctx.upstream.server_ready() else 0)
        body, content_type = metrics.exposition()
        return httpbody.raw(body, content_type=content_type)

    # probes stay open on a listener with API keys; /metrics asks for a key there
    edge.route(app, health, "/health", ["GET"], "health", admit=False, public=True)
    edge.route(app, live, "/live", ["GET"], "live", admit=False, public=True)
    edge.route(app, prometheus, "/metrics", ["GET"], "metrics", admit=False)
