"""The python backend's shared-memory regions a local Triton leaves behind, given back.

Triton's python backend talks to each model's stub through a region under /dev/shm
(``triton_python_backend_shm_region_<uuid>``, 1 MiB and growing) that Triton unlinks when it unloads
the model. A Triton stopped before it unloads its models (SIGTERM while it is still loading, a
shutdown past ``stop``'s grace, SIGKILL) leaves its regions behind: memory nothing frees until the
machine restarts. ``gateway local`` (gateway/local/localtriton.py) notes the regions that appear while
its Triton runs, keeps their list in Triton's work dir (``remember``), and once Triton and its
stubs are gone unlinks those no process maps any more (``forget``, ``release``); a list left by a
run that could not clean up (its supervisor SIGKILLed) is released at the next start.

Only regions that appeared while our Triton started are candidates, and only those no process maps
(read from /proc/<pid>/maps) are unlinked: another Triton's live regions stay. A region this
process cannot see mapped (another PID namespace sharing /dev/shm) could be unlinked while in use;
unlinking removes the name only, the mappings stay valid.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PROC = Path("/proc")
PREFIX = "triton_python_backend_shm_region_"
LIST_NAME = "python-backend-regions"  # in Triton's work dir: the regions of the Triton running there


def present(shm_dir: Path = SHM_DIR) -> set[str]:
    """The python backend's regions under ``shm_dir`` now."""
    try:
        return {name for name in os.listdir(shm_dir) if name.startswith(PREFIX)}
    except OSError:
        return set()


def mapped(proc: Path = PROC, shm_dir: Path = SHM_DIR) -> set[str]:
    """Names under ``shm_dir`` that a process (one this process may read) maps."""
    mark = f" {shm_dir}/"
    names: set[str] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return names
    for pid in pids:
        try:
            with open(proc / pid / "maps", encoding="utf-8", errors="replace") as f:
                for line in f:
                    at = line.find(mark)
                    if at != -1:
                        names.add(line[at + len(mark):].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:  # gone, or not ours to read
            continue
    return names


def release(names: Iterable[str], shm_dir: Path = SHM_DIR, proc: Path = PROC) -> list[str]:
    """Unlink the python backend regions among ``names`` that no process maps; the names unlinked."""
    wanted = {n for n in names if n.startswith(PREFIX) and "/" not in n}
    if not wanted:
        return []
    gone = []
    for name in sorted(wanted - mapped(proc, shm_dir)):
        try:
            os.unlink(shm_dir / name)
            gone.append(name)
        except FileNotFoundError:
            pass
        except OSError:  # not ours to remove: leave it
            continue
    return gone


def remember(workdir: Path, names: Iterable[str]) -> None:
    """Keep the list of a running Triton's regions in its work dir (``forget`` reads it back)."""
    path = workdir / LIST_NAME
    try:
        path.write_text("".join(f"{n}\n" for n in sorted(names)))
    except OSError:
        pass


def remembered(workdir: Path) -> set[str]:
    try:
        return {n for n in (workdir / LIST_NAME).read_text().split() if n.startswith(PREFIX)}
    except OSError:
        return set()


def forget(workdir: Path, names: Iterable[str], shm_dir: Path = SHM_DIR, proc: Path = PROC) -> list[str]:
    """``release`` these and the list kept in ``workdir``; what is still there (mapped) stays listed."""
    wanted = set(names) | remembered(workdir)
    gone = release(wanted, shm_dir, proc)
    left = (wanted - set(gone)) & present(shm_dir)
    if left:
        remember(workdir, left)
    else:
        try:
            (workdir / LIST_NAME).unlink()
        except OSError:
            pass
    return gone
