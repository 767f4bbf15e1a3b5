"""gRPC's runtime choices for the gateway's processes, made before ``grpc`` is first imported.

grpcio 1.85 moves a call's socket work to EventEngine threads ("event_engine_client",
"event_engine_listener", "event_engine_for_all_other_endpoints" experiments, on by default): each
message then crosses from an EventEngine thread to grpc.aio's poller thread, and from there to the
event loop. With these three off, the poller thread does the socket work itself (gRPC's epoll
poller, which every grpcio before them used): one thread hop less per message. Measured on the
V2 passthrough's ModelStreamInfer (one message per turn, 8 streams, the gateway's CPU read from
/proc, alternated runs): 5-7 context switches per message instead of 14-17, and about a quarter
less CPU per message; unary calls cost the same either way. docs/architecture.md, "Processes,
loops and listeners".

gRPC reads ``GRPC_EXPERIMENTS`` once, when ``grpc`` is imported, so ``configure`` runs from
``gateway/__init__.py``; an operator's own ``GRPC_EXPERIMENTS`` wins. A name gRPC no longer knows
costs one error line at start-up ("Unknown experiment") and nothing else. Triton, started by
``gateway local``, does not inherit the gateway's value (gateway/local/localtriton.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

ENV = "GRPC_EXPERIMENTS"
EXPERIMENTS = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"


def configure(environ: MutableMapping[str, str] | None = None, grpc_loaded: bool | None = None) -> bool:
    """Set ``GRPC_EXPERIMENTS`` unless it is set already or grpc is loaded (too late to matter in
    this process; spawned workers import the gateway first and set it themselves). True: set now."""
    environ = os.environ if environ is None else environ
    loaded = "grpc" in sys.modules if grpc_loaded is None else grpc_loaded
    if ENV in environ or loaded:
        return False
    environ[ENV] = EXPERIMENTS
    return True


def for_child(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that is not the gateway (Triton): without the gateway's own value."""
    if env.get(ENV) == EXPERIMENTS:
        env.pop(ENV)
    return env
