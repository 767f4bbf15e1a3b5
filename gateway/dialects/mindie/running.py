"""The requests this worker is generating, by id, for MindIE's ``POST /v2/models/{m}/stopInfer``.

A request is known by the gateway's request id (the MindIE ``id`` of OpenAI answers) and by the
``id`` the client gave (Triton generate and token inference). Stopping one cancels its handler
task; the handler sees ``stopped`` and ends the answer (a stream ends where it is; a whole answer is
500 ``Incomplete Generation``), and closing the generation cancels the Triton request. The table is
per worker process; with ``workers`` > 1 the other workers are asked over the worker bus
(workerbus.py), so a stopInfer on any connection reaches the worker running the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


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

    @contextmanager
    def track(self, *ids: str) -> Iterator[Entry]:
        entry = Entry(asyncio.current_task(), ids=tuple(dict.fromkeys(i for i in ids if i)))
        for i in entry.ids:
            self._by_id[i] = entry
        try:
            yield entry
        finally:
            for i in entry.ids:
                if self._by_id.get(i) is entry:
                    del self._by_id[i]

    def __len__(self) -> int:
        return len({id(e) for e in self._by_id.values()})

    def stop_all(self) -> int:
        """Stop every generation of this worker (stopService?mode=Force); how many were stopped."""
        entries = {id(e): e for e in self._by_id.values()}.values()
        return sum(1 for e in list(entries) if e.ids and self.stop(e.ids[0]))

    def stop(self, request_id: str) -> bool:
        entry = self._by_id.get(request_id)
        if entry is None or entry.task is None or entry.task.done():
            return False
        entry.stopped = True
        entry.task.cancel()
        return True
