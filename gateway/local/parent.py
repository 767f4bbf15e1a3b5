"""A child process that stops when the process that started it dies (Linux PR_SET_PDEATHSIG).

``ending_with_us(argv)``: the command line of such a child (the local Triton, `run-pd`'s instances,
a bench's floor and gateway, a test's gateway). The death signal is asked for after the exec, by a
small exec-wrapper: util-linux ``setpriv --pdeathsig`` (Essential in Debian, so on every Debian
machine and in the python:*-slim images), then ``/bin/sh``, which checks that its parent is still
the process that started it (one that died before the request took effect left it reparented:
it stops there) and execs the command. Without ``setpriv``, ``python -I -S`` does both.

No Python code runs between fork and exec (no ``preexec_fn``), so ``subprocess`` can vfork: a
parent whose other threads (gRPC's) hold a lock at the fork cannot leave the child stuck on it
before its exec (a ``preexec_fn`` child hung once in a full test run that way).

``die_with``: for a process itself (``gateway local`` under make; each spawned worker of
``gateway serve``, which does not inherit its master's). Elsewhere than Linux both do nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
SH = "/bin/sh"
# $0: the pid that must still be the parent once the death signal is asked for; "$@": the command
_CHECK = ('[ "$PPID" = "$0" ] || {{ echo "stopping: the process that started it (pid $0) is gone" >&2; '
          'kill -s {sig} $$; exit 1; }}; exec "$@"')
_PY = """import ctypes, os, sys
ppid, sig = int(sys.argv[1]), int(sys.argv[2])
ctypes.CDLL(None, use_errno=True).prctl(1, sig)
if os.getppid() != ppid:
    print(f"stopping: the process that started it (pid {ppid}) is gone", file=sys.stderr, flush=True)
    os.kill(os.getpid(), sig)
    sys.exit(1)
os.execvp(sys.argv[3], sys.argv[3:])
"""


def _libc_prctl():
    """libc's prctl, looked up once; None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()
SETPRIV = shutil.which("setpriv") if _PRCTL is not None else None


def die_with(parent: int, sig: int = signal.SIGTERM) -> bool | None:
    """Ask for ``sig`` when the parent goes; True when it is already gone (this process was
    reparented before the request took effect): the caller stops on its own; None where the
    request cannot be made (not Linux)."""
    if _PRCTL is None:  # not Linux: nothing to do
        return None
    _PRCTL(PR_SET_PDEATHSIG, sig)
    return os.getppid() != parent


def wrap(argv: list[str], parent: int, sig: int, setpriv: str | None) -> list[str]:
    """``argv`` behind the exec-wrapper (``setpriv``, else Python): the child gets ``sig`` when
    ``parent`` dies, and stops at once when ``parent`` is no longer its parent by then."""
    if setpriv:
        check = _CHECK.format(sig=signal.Signals(sig).name[3:])
        return [setpriv, f"--pdeathsig={signal.Signals(sig).name[3:]}", "--", SH, "-c", check, str(parent), *argv]
    return [sys.executable, "-I", "-S", "-c", _PY, str(parent), str(int(sig)), *argv]


def ending_with_us(argv: list[str], sig: int = signal.SIGTERM) -> list[str]:
    """The command line of a child that ends with this process; ``argv`` as it is off Linux and off
    the main thread, since the signal follows the thread that started the child (a pool thread
    that exits would stop it)."""
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return list(argv)
    return wrap(list(argv), os.getpid(), sig, SETPRIV)
