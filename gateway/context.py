"""What every listener of a worker shares, and what each dialect is handed.

    GatewayContext   one per worker process, created inside its running loop (``Worker.start``):
                     settings, the upstream client, the in-flight bound, started / draining
    DialectContext   what a dialect's ``open`` receives: the worker's shared parts (read live) and
                     its own view of Triton: ``upstream`` is a ModelScope when
                     ``dialects.<name>.triton_models`` restricts it (``scope``), and ``unary``
                     a unary RPC to Triton on the worker's transport, for a dialect that writes a V2
                     call itself (V2 REST)
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.access import ModelScope
from gateway.call import Admission
from gateway.settings import Settings
from gateway.upstream import Upstream


@dataclass
class GatewayContext:
    settings: Settings
    upstream: Upstream
    admission: Admission = None  # type: ignore[assignment]  (set from settings in __post_init__)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    draining: bool = False

    def __post_init__(self) -> None:
        if self.admission is None:
            self.admission = Admission(self.settings.limits.max_inflight)

    @property
    def inflight(self) -> int:
        return self.admission.inflight

    def for_dialect(self, scope: ModelScope | None) -> DialectContext:
        return DialectContext(self, scope)


class DialectContext:
    """One dialect's view of its worker (see the module's docstring)."""

    __slots__ = ("worker", "scope", "upstream")

    def __init__(self, worker: GatewayContext, scope: ModelScope | None = None):
        self.worker = worker
        self.scope = scope  # the models this dialect may reach (None: every model)
        self.upstream: Upstream = scope if scope is not None else worker.upstream

    @property
    def settings(self) -> Settings:
        return self.worker.settings

    @property
    def admission(self) -> Admission:
        return self.worker.admission

    @property
    def started(self) -> asyncio.Event:
        return self.worker.started

    @property
    def draining(self) -> bool:
        return self.worker.draining

    def unary(self, method: str, serializer=None, deserializer=None, cancel: bool | None = None):
        """A unary RPC to Triton, made as the gateway's own calls are (``Upstream.unary``)."""
        return self.worker.upstream.unary(method, serializer, deserializer, cancel)
