"""A local Triton ends with the process that started it, even a SIGKILLed one (gateway/local/parent.py):
a killed bench, test run or `make run` leaves nothing running. The child here is `sleep` in Triton's
place (localtriton.start with its command, port check and readiness wait replaced), started by a
Python process that is then SIGKILLed; it is started without a ``preexec_fn`` (no Python between
fork and exec, where a lock held by another thread at the fork could hang it), through setpriv or,
without it, Python as the exec-wrapper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from gateway.local import parent
from tests.support import ROOT

STARTER = """
import subprocess, sys, time
from pathlib import Path
from gateway.local import localtriton, parent
from gateway.settings import LocalTriton

if sys.argv[2] == "python":
    parent.SETPRIV = None
popen = subprocess.Popen
def spy(*args, **kw):
    print(kw.get("preexec_fn") is None, flush=True)
    return popen(*args, **kw)
subprocess.Popen = spy

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


@pytest.mark.parametrize("wrapper", ["setpriv", "python"])
def test_triton_stops_when_its_starter_is_sigkilled(tmp_path, wrapper):
    if wrapper == "setpriv" and parent.SETPRIV is None:
        pytest.skip("no setpriv here (util-linux)")
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path), wrapper], cwd=ROOT,
                               stdout=subprocess.PIPE, text=True)
    with starter.stdout:
        no_preexec_fn = starter.stdout.readline().strip()
        child = int(starter.stdout.readline())
    try:
        assert no_preexec_fn == "True"  # subprocess may vfork: no Python code runs in the child
        assert _alive(child) and _cmdline(child) == ["sleep", "120"]  # the wrapper exec'd it, same pid
        starter.kill()  # SIGKILL: no handler of the starter runs
        starter.wait()
        assert _gone_within(child, 10), "the child outlived its SIGKILLed starter"
    finally:
        if starter.poll() is None:  # an assertion failed before the kill
            starter.kill()
            starter.wait()
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def _cmdline(pid: int) -> list[str]:
    end = time.monotonic() + 10
    while time.monotonic() < end:  # until the wrappers have exec'd the command
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            got = f.read().split(b"\0")[:-1]
        if got[:1] == [b"sleep"]:
            break
        time.sleep(0.02)
    return [a.decode() for a in got]


@pytest.mark.parametrize("wrapper", ["setpriv", "python"])
def test_a_child_whose_parent_went_before_the_request_stops_before_its_command(wrapper):
    """The parent died between the fork and the prctl: the child, reparented, must not run on. Seen
    from the child that is a parent pid other than the one it was started by (here: a pid that is
    not its parent)."""
    if wrapper == "setpriv" and parent.SETPRIV is None:
        pytest.skip("no setpriv here (util-linux)")
    setpriv = parent.SETPRIV if wrapper == "setpriv" else None
    not_ours = os.getppid()  # alive, and not the parent of the child started below
    argv = parent.wrap(["sh", "-c", "echo ran"], not_ours, signal.SIGTERM, setpriv)
    r = subprocess.run(argv, capture_output=True, timeout=30)
    assert (r.returncode, r.stdout) == (-signal.SIGTERM, b"")
    assert b"stopping: the process that started it (pid %d) is gone" % not_ours in r.stderr
    argv = parent.wrap(["sh", "-c", "echo ran"], os.getpid(), signal.SIGTERM, setpriv)  # its parent: runs
    assert subprocess.run(argv, capture_output=True, timeout=30).stdout == b"ran\n"


def test_off_the_main_thread_the_child_is_not_tied_to_the_thread():
    got = []
    t = threading.Thread(target=lambda: got.append(parent.ending_with_us(["sleep", "1"])))
    t.start()
    t.join()
    assert got == [["sleep", "1"]]  # a pool thread that exits would otherwise stop the Triton it started
    wrapped = parent.ending_with_us(["sleep", "1"])
    assert wrapped[-2:] == ["sleep", "1"] and len(wrapped) > 2  # on the main thread: behind the wrapper
