"""The requests this worker is generating, by id, for MindIE's ``POST /v2/models/{m}/stopInfer``.

A request is known by the gateway's request id (the MindIE ``id`` of OpenAI answers) and by the
``id`` the client gave (Triton generate and token inference). Stopping one cancels its handler
task; the handler sees ``stopped`` and ends the answer (a stream ends where it is; a whole answer is
500 ``Incomplete Generation``), and closing the generation cancels the Triton request. The table is
per worker process; with ``workers`` > 1 the other workers are asked over the worker bus
(workerbus.py), so a stopInfer on any connection reaches the worker running the request.

A stopInfer is judged as of the moment it was received (``since``, ``time.monotonic()``, one clock
for every process of the host), as MindIE, one process, judges it: a generation that was running
then and ended on its own before the question reached it (the hop to the other worker takes tens
of milliseconds, and more on a loaded machine) is found: it ended at its last token, as one MindIE
stops at that moment does. Ended generations are remembered for ``ENDED_KEEP_S``, at most
``ENDED_MAX`` of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

ENDED_KEEP_S = 10.0  # longer than a question on the bus may take (workerbus.ASK_TIMEOUT_S, twice)
ENDED_MAX = 4096


@dataclass(slots=True)
class Entry:
    task: asyncio.Task | None
    stopped: bool = False
    ids: tuple[str, ...] = field(default_factory=tuple)

    def absorb(self) -> bool:
        """In the handler, on CancelledError: True (and the cancellation consumed) when stopInfer did it."""
        if self.stopped and self.task is not None:
            self.task.uncancel()
            return True
        return False


class Running:
    def __init__(self) -> None:
        self._by_id: dict[str, Entry] = {}
        self._ended: dict[str, float] = {}  # id -> when it ended (time.monotonic()), oldest first

    @contextmanager
    def track(self, *ids: str) -> Iterator[Entry]:
        entry = Entry(asyncio.current_task(), ids=tuple(dict.fromkeys(i for i in ids if i)))
        for i in entry.ids:
            self._by_id[i] = entry
        try:
            yield entry
        finally:
            now = time.monotonic()
            for i in entry.ids:
                if self._by_id.get(i) is entry:
                    del self._by_id[i]
                self._ended.pop(i, None)
                self._ended[i] = now
            self._forget(now)

    def _forget(self, now: float) -> None:
        ended = self._ended
        while ended:
            oldest = next(iter(ended))
            if len(ended) <= ENDED_MAX and now - ended[oldest] < ENDED_KEEP_S:
                break
            del ended[oldest]

    def __len__(self) -> int:
        return len({id(e) for e in self._by_id.values()})

    def stop_all(self) -> int:
        """Stop every generation of this worker (stopService?mode=Force); how many were stopped."""
        entries = {id(e): e for e in self._by_id.values()}.values()
        return sum(1 for e in list(entries) if e.ids and self.stop(e.ids[0]))

    def stop(self, request_id: str, since: float | None = None) -> bool:
        """Stop the generation with this id; False when none runs. ``since``: when the stopInfer
        was received; a generation that ended after it counts as found (it was running then)."""
        entry = self._by_id.get(request_id)
        if entry is None or entry.task is None or entry.task.done():
            ended = self._ended.get(request_id)
            return since is not None and ended is not None and ended >= since
        entry.stopped = True
        entry.task.cancel()
        return True
