"""``dialects.v2``: the KServe V2 dialect's settings."""

from __future__ import annotations

from gateway.settings import Strict


class V2Config(Strict):
    """``dialects.v2``."""

    control_plane: bool = False  # forward model load/unload, shared memory, trace and log settings
