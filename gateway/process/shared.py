"""State that every worker of one gateway sees (docs/architecture.md, "State across workers").

With ``workers`` > 1 the supervisor (gateway/cli.py) creates a private directory and hands it to
every worker it spawns (``GATEWAY_SHARED_DIR``); a ``Flag`` is one byte in a memory-mapped file of
that directory, so a switch flipped on one worker is what every other worker reads next, and a
worker started in place of a dead one finds the current value, not the configured default. One
byte is written and read atomically: no lock is needed. With one worker (or in tests that run a
``Worker`` in-process) there is no directory and a ``Flag`` is a plain attribute.

``single_worker_problems(settings)``: the configurations that cannot run with several workers
(state pinned to one process by design), each as a sentence naming the field, refused at start.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

ENV = "GATEWAY_SHARED_DIR"
# A served worker process's own stop (gateway/cli.py sets it): what SIGTERM does, for a route that
# stops the gateway (MindIE's /stopService) where no supervisor runs. None in an embedded Worker.
stop_hook = None


class Flag:
    """A boolean shared by the workers of one gateway (per process without a shared directory)."""

    def __init__(self, name: str, default: bool, directory: str | None = None):
        directory = directory if directory is not None else os.environ.get(ENV)
        self._value = default
        self._map: mmap.mmap | None = None
        if directory:
            self._map = _open(Path(directory) / f"{name}.flag", bytes([int(default)]))

    def get(self) -> bool:
        return bool(self._map[0]) if self._map is not None else self._value

    def set(self, value: bool) -> None:
        if self._map is not None:
            self._map[0] = int(value)
        else:
            self._value = value


def _open(path: Path, initial: bytes) -> mmap.mmap:
    """Map ``path``, creating it with ``initial`` if no worker did yet (atomically: written aside,
    then linked into place, so no worker ever maps a file shorter than its value)."""
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(initial)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another worker was first: its value stands
        finally:
            tmp.unlink()
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, len(initial))
    finally:
        os.close(fd)


def single_worker_problems(settings) -> list[str]:
    """One sentence per setting that pins state to one process, when ``workers`` > 1."""
    if settings.workers <= 1:
        return []
    out = []
    for name, config in settings.dialects.items():
        reason = getattr(config, "single_worker_reason", None)
        text = reason() if callable(reason) else None
        if text:
            out.append(f"`workers: {settings.workers}` with dialects.{name}.{text}; set `workers: 1` "
                       f"(or GATEWAY__WORKERS=1) for this instance, and run more instances instead")
    return out
