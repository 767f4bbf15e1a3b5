"""D with several workers: the records any worker produces reach the one worker holding ``/dresult``.

A D instance has one ``/dresult`` link, which lands on whichever worker the kernel picks, while
hand-offs and relayed records land on any worker. With ``workers`` > 1 (the supervisor's shared
directory, gateway/process/shared.py) each worker of D listens on a unix socket of that directory,
``dresult-<pid>.sock``, and the directory's ``dresult.owner`` names the worker that accepted the
latest ``/dresult``:

- a worker accepting ``/dresult`` writes its pid there, then tells every other worker (``T``):
  the one that held the link until then gives its connection MindIE's ``close`` record, as a new
  connection on the same worker does;
- a worker that does not hold the link keeps its records in its own queue, in order, and a
  flusher sends them (``R`` + length + record, acknowledged one by one) to the owner; records of
  one request all come from the worker running it, so their order holds. Nothing is lost when
  the owner's link drops: records wait in the queues (bounded, ``max_pending_records`` per worker)
  until the next ``/dresult`` claims them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("gateway.mindie.pd")
OWNER = "dresult.owner"
RETRY_S = 0.2  # a flusher that could not reach the owner tries again after this


class Fanin:
    def __init__(self, directory: str, hub, me: int | None = None):
        self.dir = Path(directory)
        self.me = me if me is not None else os.getpid()
        self.hub = hub
        self.path = self.dir / f"dresult-{self.me}.sock"
        self._server: asyncio.AbstractServer | None = None
        self._conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.Lock]] = {}
        self._flusher: asyncio.Task | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        if self._server is not None:
            self._server.close()
        for _r, w, _l in self._conns.values():
            w.close()
        self._conns.clear()
        with contextlib.suppress(OSError):
            self.path.unlink()

    # -- who holds the link ---------------------------------------------------------------------
    def owner(self) -> int | None:
        try:
            return int((self.dir / OWNER).read_text())
        except (OSError, ValueError):
            return None

    async def claim(self) -> None:
        """This worker accepted /dresult: it owns the link now; the others hear it."""
        tmp = self.dir / f".{OWNER}.{self.me}"
        tmp.write_text(str(self.me))
        os.replace(tmp, self.dir / OWNER)
        for sock in self.dir.glob("dresult-*.sock"):
            pid = int(sock.stem.split("-", 1)[1])
            if pid != self.me:
                await self._send(pid, b"T")

    # -- records ----------------------------------------------------------------------------------
    def kick(self) -> None:
        """Records wait in this worker's queue and another worker owns the link: send them there."""
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        hub = self.hub
        while hub.pending and hub.current is None:
            owner = self.owner()
            if owner is None or owner == self.me:
                return  # no link anywhere yet, or ours: the next /dresult takes them
            item = hub.pending[0]
            if await self._send(owner, b"R" + len(item).to_bytes(4, "big") + item):
                if hub.pending and hub.pending[0] is item:
                    hub.pending.popleft()
                    hub.counted()
            else:
                await asyncio.sleep(RETRY_S)

    async def _send(self, pid: int, frame: bytes) -> bool:
        try:
            conn = self._conns.get(pid)
            if conn is None:
                r, w = await asyncio.open_unix_connection(str(self.dir / f"dresult-{pid}.sock"))
                conn = self._conns[pid] = (r, w, asyncio.Lock())
            r, w, lock = conn
            async with lock:
                w.write(frame)
                await w.drain()
                await r.readexactly(1)
            return True
        except (OSError, asyncio.IncompleteReadError):
            dropped = self._conns.pop(pid, None)
            if dropped is not None:
                dropped[1].close()
            return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                kind = await reader.readexactly(1)
                if kind == b"R":
                    n = int.from_bytes(await reader.readexactly(4), "big")
                    self.hub.append(await reader.readexactly(n))
                elif kind == b"T":
                    self.hub.taken_elsewhere()
                writer.write(b"\x01")
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
