"""The MindIE listener's role (``dialects.mindie.pd.role``): which state a worker opens, which routes it serves.

    standard      MindIE Server's routes (http.Handlers)
    prefill       the same, plus P's hand-off to D (pd/instance.py)
    decode        the same, plus D's ``/dresult`` link and its hand-off intake (pd/instance.py)
    coordinator   MindIE-MS's user routes, relayed to P and D (pd/coordinator.py)
"""

from __future__ import annotations

from sanic import Sanic

from gateway.context import GatewayContext
from gateway.edge import Edge

from . import http
from .config import MindieConfig
from .pd import coordinator, instance


def open(ctx: GatewayContext, cfg: MindieConfig):
    """The worker's MindIE state for its role."""
    if cfg.pd.role == "coordinator":
        return coordinator.Coordinator(ctx, cfg)
    if cfg.pd.role != "standard":
        return instance.PdHandlers(ctx, cfg)
    return http.Handlers(ctx, cfg)


def attach(app: Sanic, edge: Edge, state) -> None:
    if state.role == "coordinator":
        coordinator.attach(app, edge, state)
        return
    http.attach(app, edge, state)
    if state.role != "standard":
        instance.install(app, edge, state)
