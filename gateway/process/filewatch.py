"""Whether files changed since the last look, looked at no more than every ``interval`` seconds.

Used by the listeners' API keys and certificates (gateway/access.py): every worker looks for itself,
at the moment it needs them (a key check, a TLS handshake), so a rotated file reaches every worker
without a signal or a restart, and an idle worker costs nothing. A change is any difference in
(inode, size, modification time) of any file: an edit in place, or a new file moved or linked into
place (Kubernetes Secret volumes swap a symlink). A file that cannot be read counts as a change (the
caller keeps what it has and says so).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

INTERVAL_S = 0.25


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class FileWatch:
    def __init__(self, paths: Iterable[str | None], interval: float = INTERVAL_S):
        self.paths = tuple(p for p in paths if p)
        self.interval = interval
        self._seen = self._now()
        self._next = 0.0

    def _now(self) -> tuple:
        return tuple(_signature(p) for p in self.paths)

    def changed(self) -> bool:
        """True once after any of the files changed (at most one look per ``interval``)."""
        if not self.paths:
            return False
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        seen = self._now()
        if seen == self._seen:
            return False
        self._seen = seen
        return True
