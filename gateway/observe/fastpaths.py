"""Which fast paths this process runs, and why one is off.

A fast path reaches below a library's public API (sanic's HTTP internals,
grpcio-health-checking's and prometheus-client's private fields). Each reach lives in one fence
module, which checks at import that what it needs is there and declares its paths here:
``gateway/edge/sanicx.py`` (sanic),
``gateway/ops/grpchealth.py`` (grpcio-health-checking), ``gateway/observe/metrics.py``
(prometheus-client). A path whose piece is missing is off: the plain, public way serves instead,
with one warning naming the piece, never an exception per request.

``announce`` (once per worker, at start-up) logs the paths on one line, a warning for each that is
off, and sets the gauge ``gateway_fast_path{path=...}`` (1 on, 0 off) it is handed.
"""

from __future__ import annotations

import logging

_PATHS: dict[str, tuple[str, ...]] = {}  # path -> the missing pieces (empty: on)


def declare(path: str, missing: list[str] | tuple[str, ...]) -> bool:
    """Record ``path`` with the pieces it lacks; True when it is on (nothing missing)."""
    _PATHS[path] = tuple(missing)
    return not missing


def paths() -> dict[str, tuple[str, ...]]:
    return dict(_PATHS)


def announce(log: logging.Logger, gauge, turned_off: dict[str, str] | None = None) -> None:
    """One line saying which fast paths are on; a warning for each one off, naming what is missing;
    ``gauge.labels(path).set(1 or 0)``. ``turned_off``: paths the settings turned off (path -> the
    setting), said as such."""
    turned_off = turned_off or {}
    words = []
    for path, missing in sorted(_PATHS.items()):
        if missing:
            log.warning("fast path %s is off: %s missing in this version", path, ", ".join(missing))
        state = "off" if missing else f"off ({turned_off[path]})" if path in turned_off else "on"
        gauge.labels(path).set(0 if missing or path in turned_off else 1)
        words.append(f"{path}={state}")
    log.info("fast paths: %s", " ".join(words))
