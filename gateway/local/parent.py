"""A child process that stops when the process that started it dies (Linux PR_SET_PDEATHSIG).

Used as a ``preexec_fn`` (``ends_with_us()``: the local Triton, a bench's floor and gateway, a
test's gateway) and by a process for itself (``gateway local`` under make; each spawned worker of
``gateway serve``, which does not inherit its master's): a SIGKILLed bench, test run or `make run`
leaves nothing running. Elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import os
import signal
import threading

PR_SET_PDEATHSIG = 1


def _libc_prctl():
    """libc's prctl, looked up once in the parent: a ``preexec_fn`` runs between fork and exec in a
    process whose other threads (grpc's) may hold the loader's or malloc's locks, so the child must
    not dlopen there; None where there is none (not Linux)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def die_with(parent: int, sig: int = signal.SIGTERM) -> bool | None:
    """Ask for ``sig`` when the parent goes; True when it is already gone (this process was
    reparented before the request took effect): the caller stops on its own; None where the
    request cannot be made (not Linux)."""
    if _PRCTL is None:  # not Linux: nothing to do
        return None
    _PRCTL(PR_SET_PDEATHSIG, sig)
    return os.getppid() != parent


def preexec(parent: int, sig: int = signal.SIGTERM):
    """A ``preexec_fn`` for a child that ends with ``parent`` (this process's pid, read before the
    fork): the signal is asked for in the child, and a child whose parent died meanwhile stops."""

    def run() -> None:
        if die_with(parent, sig):
            os.kill(os.getpid(), sig)

    return run


def ends_with_us(sig: int = signal.SIGTERM):
    """The ``preexec_fn`` of a child that ends with this process; None off the main thread, since
    the signal follows the thread that started the child (a pool thread that exits would stop it)."""
    if threading.current_thread() is threading.main_thread():
        return preexec(os.getpid(), sig)
    return None
