"""The session's Triton, watched (tests/conftest.py's ``triton`` fixture and report hook).

Without a watch, one Triton crash (Triton 2.51's gRPC front end can SIGSEGV on a cancelled request)
fails every contract test after it and hides the one that mattered. After each phase of each test
(setup, call, teardown) ``check`` looks whether the session's Triton process has exited; if it has,
it stops what is left of its process group (the python backend stubs), starts Triton again with
the same settings (the same ports and model repository, so every gateway of the session keeps its
target), waits until the session's gateways answer ``/health`` again, and returns what happened:
the exit (the signal, or the code and the signal Triton's own handler logged), the tail of the dead
Triton's log and the restart. The hook puts that text in the report of the test during which Triton
died (a section "Triton died", shown with the test's failure). The ``TritonProcess`` object is
updated in place, so fixtures that hold it (``triton.grpc_target``, ``triton.log_tail()``) see the
new process.

A test that kills Triton on purpose starts a Triton of its own (tests/contract/test_triton_restart.py,
test_h2stream.py, test_h2call.py): the watch restarts a Triton that dies, it does not make killing
the session's one a way to test anything.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from gateway.local import localtriton
from tests.support import GatewayProcess, http_call

SECTION = "Triton died"
TAIL_LINES = 40
_LOGGED_SIGNAL = re.compile(r"Signal \((\d+)\) received")  # Triton's handler for SIGSEGV, SIGABRT, ...


def describe_exit(code: int, log: str) -> str:
    """``killed by SIGKILL (9)``, or ``exited with code 1 (its log: Signal (11) received: SIGSEGV)``."""
    if code < 0:
        return f"killed by {_signame(-code)}"
    text = f"exited with code {code}"
    if m := list(_LOGGED_SIGNAL.finditer(log)):
        text += f" (its log: {m[-1].group(0)}: {_signame(int(m[-1].group(1)))})"
    return text


def _signame(num: int) -> str:
    try:
        return f"{signal.Signals(num).name} ({num})"
    except ValueError:
        return f"signal {num}"


@dataclass
class Watch:
    triton: localtriton.TritonProcess
    root: Path  # where Triton's start-up resolves its paths (the repository root)
    logs: Path  # each start's log: triton.log, then triton-restart-N.log
    gateways: list[GatewayProcess] = field(default_factory=list)  # waited for after a restart
    restarts: int = 0

    def check(self) -> str | None:
        """None while Triton runs; else what happened, once Triton runs again (or why it does not)."""
        tp = self.triton
        code = tp.proc.poll()
        if code is None:
            return None
        pid, old_log = tp.proc.pid, tp.log_path
        tail = tp.log_tail(TAIL_LINES)
        try:
            full = old_log.read_text(errors="replace")
        except OSError:
            full = ""
        tp.stop()  # the stubs left in its process group, and their shared-memory regions
        text = (f"the session's Triton (pid {pid}) {describe_exit(code, full)}\n"
                f"last {TAIL_LINES} lines of its log ({old_log}):\n{tail}\n")
        self.restarts += 1
        t0 = time.monotonic()
        try:
            new = self._start(self.logs / f"triton-restart-{self.restarts}.log")
        except Exception as e:  # noqa: BLE001 - the next check tries again; this report says why
            return text + f"restart failed: {e}"
        for f in fields(new):  # in place: every holder of the object sees the new process
            setattr(tp, f.name, getattr(new, f.name))
        waits = [self._wait_gateway(gw) for gw in self.gateways if gw.proc.poll() is None]
        text += (f"restarted: pid {tp.proc.pid} on the same ports ({tp.grpc_target}) in "
                 f"{time.monotonic() - t0:.1f} s, log {tp.log_path}")
        return text + "".join(f"\n{w}" for w in waits if w)

    def _start(self, log_path: Path) -> localtriton.TritonProcess:
        try:
            return localtriton.start(self.triton.cfg, self.root, log_path=log_path)
        except localtriton.TritonStartError as e:
            if "already in use" not in str(e):
                raise
        time.sleep(2.0)  # a port the dead process held, not released yet: once more
        return localtriton.start(self.triton.cfg, self.root, log_path=log_path)

    @staticmethod
    def _wait_gateway(gw: GatewayProcess, timeout: float = 30.0) -> str | None:
        """Until the gateway's /health is 200 again (it is 503 while its upstream is not ready)."""
        if "admin_http" not in gw.ports:
            return None
        deadline = time.monotonic() + timeout
        status = 0
        while time.monotonic() < deadline:
            try:
                status = http_call(gw.url("admin_http"), "GET", "/health", timeout=5)[0]
            except OSError:
                status = 0
            if status == 200:
                return None
            time.sleep(0.2)
        return f"the gateway on {gw.url('admin_http')} still answers /health {status} after {timeout:.0f} s"


_current: Watch | None = None


def watch(w: Watch | None) -> None:
    """The watch the report hook consults (None: none; unit-test sessions start no Triton)."""
    global _current
    _current = w


def wait_for(gw: GatewayProcess) -> None:
    """After a restart, the watch waits until ``gw`` answers ``/health`` 200 again."""
    if _current is not None:
        _current.gateways.append(gw)


def check() -> str | None:
    return _current.check() if _current is not None else None
