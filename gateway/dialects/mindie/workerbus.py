"""What a MindIE client addresses by id reaches every worker: ``stopInfer``, slot counts, stopService.

With ``workers`` > 1 a request lands on whichever worker the kernel picks (SO_REUSEPORT), while the
generation a ``stopInfer`` names runs on one of them, and the slots MindIE reports are the whole
instance's. Each worker of the set listens on a unix socket of the supervisor's private directory
(gateway/process/shared.py), ``mindie-<pid>.sock``; a question one worker cannot answer alone goes to every
other worker's socket, one JSON line each way:

    {"op": "stop", "id": "<id>", "since": t} -> {"ok": true|false}  (the generation with that id is
                                   stopped; t: when the stopInfer was received, running.py)
    {"op": "load"}                 -> {"limit": n, "inflight": n, "running": n}
    {"op": "stop_all"}             -> {"stopped": n}          (stopService?mode=Force)

A question is answered in the protocol's ``data_received`` callback, with no task and no stream
reader between the socket and the running table: a worker busy streaming tokens answers it in the
loop pass that reads it.

A worker that died leaves a socket nobody answers: it is skipped (and its file removed). Without a
shared directory (one worker, or tests running a Worker in-process) the bus is this process alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from gateway.process import shared

log = logging.getLogger("gateway.mindie")
ASK_TIMEOUT_S = 2.0
MAX_LINE = 65536  # a question is one short JSON line


class WorkerBus:
    def __init__(self, running, ctx, directory: str | None = None, me: int | None = None):
        self.running = running
        self.ctx = ctx  # its ``admission`` (the worker's in-flight bound), read when asked
        directory = directory if directory is not None else os.environ.get(shared.ENV)
        self.dir = Path(directory) if directory else None
        self.me = me if me is not None else os.getpid()
        self._server: asyncio.AbstractServer | None = None
        self.on_stop_all: Callable[[], int] | None = None

    @property
    def path(self) -> Path | None:
        return self.dir / f"mindie-{self.me}.sock" if self.dir is not None else None

    async def start(self) -> None:
        if self.dir is not None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_unix_server(lambda: _Answering(self._answer), path=str(self.path))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(OSError):
                self.path.unlink()

    # -- this worker's answers --------------------------------------------------------------------
    def local_load(self) -> dict:
        admission = self.ctx.admission
        return {"limit": admission.limit, "inflight": admission.inflight, "running": len(self.running)}

    def _answer(self, msg: dict) -> dict:
        op = msg.get("op")
        if op == "stop":
            since = msg.get("since")
            since = float(since) if isinstance(since, int | float) and not isinstance(since, bool) else None
            return {"ok": self.running.stop(str(msg.get("id", "")), since)}
        if op == "load":
            return self.local_load()
        if op == "stop_all":
            return {"stopped": self.running.stop_all()}
        return {"error": f"unknown op {op!r}"}

    # -- the other workers ------------------------------------------------------------------------
    def _others(self) -> list[Path]:
        if self.dir is None:
            return []
        mine = self.path
        return [p for p in self.dir.glob("mindie-*.sock") if p != mine]

    async def _ask(self, sock: Path, msg: dict) -> dict | None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(sock)), ASK_TIMEOUT_S)
        except (OSError, TimeoutError):
            if not _alive(sock):
                with contextlib.suppress(OSError):
                    sock.unlink()  # a dead worker's socket
            return None
        try:
            writer.write(orjson.dumps(msg) + b"\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), ASK_TIMEOUT_S)
            return orjson.loads(line) if line else None
        except (OSError, TimeoutError, orjson.JSONDecodeError):
            return None
        finally:
            writer.close()

    async def ask_all(self, msg: dict) -> list[dict]:
        answers = await asyncio.gather(*(self._ask(s, msg) for s in self._others()))
        return [a for a in answers if isinstance(a, dict)]

    # -- what the routes use ------------------------------------------------------------------------
    async def stop(self, request_id: str, since: float | None = None) -> bool:
        """Stop the generation with this id, on whichever worker runs it. ``since``: when the
        stopInfer was received (``time.monotonic()``; default now): one that ended after is found."""
        since = time.monotonic() if since is None else since
        if self.running.stop(request_id, since):
            return True
        msg = {"op": "stop", "id": request_id, "since": since}
        return any(a.get("ok") is True for a in await self.ask_all(msg))

    async def load(self) -> list[dict]:
        """Every worker's admission limit, requests in flight and generations running (this one first)."""
        return [self.local_load(), *await self.ask_all({"op": "load"})]

    async def stop_all(self) -> int:
        answers = await self.ask_all({"op": "stop_all"})
        return self.running.stop_all() + sum(int(a.get("stopped", 0)) for a in answers)


class _Answering(asyncio.Protocol):
    """One question, one answer, then the connection is closed."""

    def __init__(self, answer: Callable[[dict], dict]):
        self.answer = answer
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\n")
        if end < 0:
            if len(self.buf) > MAX_LINE:
                self.transport.close()
            return
        try:
            msg = orjson.loads(self.buf[:end])
            reply = self.answer(msg) if isinstance(msg, dict) else {"error": "not an object"}
        except orjson.JSONDecodeError:
            reply = {"error": "not JSON"}
        self.transport.write(orjson.dumps(reply) + b"\n")
        self.transport.close()  # after the answer is written


def _alive(sock: Path) -> bool:
    try:
        pid = int(sock.stem.split("-", 1)[1])
        os.kill(pid, 0)
        return True
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
