"""CPU time and memory of processes, read from /proc (Linux).

CPU per request: the change in utime+stime (fields 14 and 15 of /proc/<pid>/stat, in clock ticks) of the gateway's processes
across a load run, divided by the requests that run completed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stat:
    pid: int
    comm: str
    ppid: int
    pgrp: int
    ticks: int  # utime + stime
    start: int  # start time after boot, in ticks: tells a reused pid apart


def parse_stat(text: str) -> Stat:
    """One /proc/<pid>/stat line. ``comm`` is in parentheses and may hold spaces and ')'."""
    head, _, rest = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    f = rest.split()
    # rest starts at field 3 (state): ppid is field 4, pgrp 5, utime 14, stime 15, starttime 22
    return Stat(pid=int(pid_s), comm=comm, ppid=int(f[1]), pgrp=int(f[2]), ticks=int(f[11]) + int(f[12]),
                start=int(f[19]))


def read_stat(pid: int, proc: Path = PROC) -> Stat | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None  # gone


def all_stats(proc: Path = PROC) -> list[Stat]:
    out = []
    for d in proc.iterdir():
        if d.name.isdigit():
            s = read_stat(int(d.name), proc)
            if s is not None:
                out.append(s)
    return out


def descendants(root: int, stats: Iterable[Stat]) -> list[int]:
    """``root`` and every process below it (by ppid), root first."""
    children: dict[int, list[int]] = {}
    for s in stats:
        children.setdefault(s.ppid, []).append(s.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        if pid in out:
            continue
        out.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return out


def process_tree(root: int, proc: Path = PROC) -> list[int]:
    return descendants(root, all_stats(proc))


def process_group(pgrp: int, proc: Path = PROC) -> list[int]:
    return sorted(s.pid for s in all_stats(proc) if s.pgrp == pgrp)


def ticks(pids: Iterable[int], proc: Path = PROC) -> int:
    """Sum of utime+stime of the processes still alive."""
    total = 0
    for pid in pids:
        s = read_stat(pid, proc)
        if s is not None:
            total += s.ticks
    return total


def us_per_request(ticks_before: int, ticks_after: int, requests: int, hz: int = CLK_TCK) -> float | None:
    """CPU microseconds per completed request; None when nothing completed.

    Resolution is one tick (10 ms at 100 Hz) over the whole run, so a run needs hundreds of ticks
    (seconds of CPU) for this to mean anything; the runs here last seconds on purpose.
    """
    if requests <= 0:
        return None
    if ticks_after < ticks_before:
        raise ValueError("CPU ticks went backwards: a process was replaced during the run")
    return (ticks_after - ticks_before) / hz / requests * 1e6


def parse_status_kib(text: str, key: str) -> int | None:
    """A ``Key:   1234 kB`` line of /proc/<pid>/status, in KiB."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    return None


def memory_kib(pid: int, proc: Path = PROC) -> dict[str, int | None]:
    """Resident set size now (VmRSS) and its peak (VmHWM), KiB."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return {"rss_kib": None, "hwm_kib": None}
    return {"rss_kib": parse_status_kib(text, "VmRSS"), "hwm_kib": parse_status_kib(text, "VmHWM")}
