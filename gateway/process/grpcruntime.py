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

grpcio also turns on gRPC's fork support by default: pthread_atfork handlers that, in a child of
``fork()``, restart the EventEngine's threads and close the inherited epoll fd under them. No
gateway process forks to use gRPC in the child (workers are spawned); it starts children only to
exec them, without a ``preexec_fn`` (gateway/local/parent.py), so ``subprocess`` vforks: no atfork
handler and no Python code run in the child. A real ``fork()`` with the handlers on (a
``preexec_fn``, or code outside the gateway) let a restarted poller thread reach ``epoll_wait`` on
the closed fd before the exec: gRPC aborted the child ("Epoll1Poller ... encountered epoll_wait
error: Bad file descriptor", SIGABRT), a few children in a hundred while gRPC was busy in the
parent; and until the exec those threads shared the parent's sockets and epoll set, so that the
parent's own calls failed ("Socket closed", a corrupt HTTP/2 frame, a connection that never sees
its SETTINGS). So ``GRPC_ENABLE_FORK_SUPPORT=false`` too, for any fork that remains.

gRPC reads both variables once, when ``grpc`` is imported, so ``configure`` runs from
``gateway/__init__.py``; an operator's own value of either wins. A name gRPC no longer knows
costs one error line at start-up ("Unknown experiment") and nothing else. Triton, started by
``gateway local``, does not inherit the gateway's value (gateway/local/localtriton.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

ENV = "GRPC_EXPERIMENTS"
EXPERIMENTS = "-event_engine_client,-event_engine_listener,-event_engine_for_all_other_endpoints"
FORK_ENV = "GRPC_ENABLE_FORK_SUPPORT"
FORK = "false"
OURS = {ENV: EXPERIMENTS, FORK_ENV: FORK}


def configure(environ: MutableMapping[str, str] | None = None, grpc_loaded: bool | None = None) -> bool:
    """Set ``GRPC_EXPERIMENTS`` and ``GRPC_ENABLE_FORK_SUPPORT``, each unless it is set already,
    and neither once grpc is loaded (too late to matter in this process; spawned workers import the
    gateway first and set them themselves). True: one or both set now."""
    environ = os.environ if environ is None else environ
    loaded = "grpc" in sys.modules if grpc_loaded is None else grpc_loaded
    if loaded:
        return False
    unset = {name: value for name, value in OURS.items() if name not in environ}
    environ.update(unset)
    return bool(unset)


def for_child(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that is not the gateway (Triton): without the gateway's own values."""
    for name, value in OURS.items():
        if env.get(name) == value:
            env.pop(name)
    return env
