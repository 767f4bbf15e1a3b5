"""A local Triton ends with the process that started it, even a SIGKILLed one (gateway/local/parent.py):
a killed bench, test run or `make run` leaves nothing running. The child here is `sleep` in Triton's
place (localtriton.start with its command, port check and readiness wait replaced), started by a
Python process that is then SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from gateway.local import parent
from tests.support import ROOT

STARTER = """
import sys, time
from pathlib import Path
from gateway.local import localtriton
from gateway.settings import LocalTriton

localtriton.prepare = lambda cfg, root: (["sleep", "120"], {"PATH": "/usr/bin:/bin"})
localtriton.check_ports = lambda cfg: None
localtriton.count_models = lambda repo: 0
localtriton._wait_ready = lambda tp, progress, on_progress: None
tp = localtriton.start(LocalTriton(workdir=sys.argv[1]), Path(sys.argv[1]), log_path=Path(sys.argv[1]) / "t.log")
print(tp.proc.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_triton_stops_when_its_starter_is_sigkilled(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               text=True)
    with starter.stdout:
        child = int(starter.stdout.readline())
    try:
        assert _alive(child)
        starter.kill()  # SIGKILL: no handler of the starter runs
        starter.wait()
        assert _gone_within(child, 10), "the child outlived its SIGKILLed starter"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_off_the_main_thread_the_child_is_not_tied_to_the_thread():
    got = []
    t = threading.Thread(target=lambda: got.append(parent.ends_with_us()))
    t.start()
    t.join()
    assert got == [None]  # a pool thread that exits would otherwise stop the Triton it started
    assert parent.ends_with_us() is not None
