"""What every listener of a worker shares: settings, the upstream client, the in-flight bound.

Created once per worker process, inside its running loop (``Worker.start``). Each dialect's
``open`` receives it and keeps what it needs on its own per-worker state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

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
