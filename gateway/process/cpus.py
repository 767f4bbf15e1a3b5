"""How many CPUs this process may use: what ``workers: auto`` starts.

    affinity     the CPUs the scheduler may run it on (``taskset``, cpusets, Kubernetes' static
                 CPU manager): ``os.sched_getaffinity``
    CPU quota    a cgroup's bandwidth limit (a container's ``cpus:``, a Pod's ``limits.cpu``, a
                 systemd unit's ``CPUQuota=``): cgroup v2's ``cpu.max`` of the process's own group
                 and of every group above it, or v1's ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``;
                 the lowest quota along the way counts, rounded up to whole CPUs (1.5 CPUs: 2)

The smaller of the two, at least 1. ``os.cpu_count()`` counts the host's CPUs and would start 16
workers in a container limited to 2, each then throttled by the quota.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The CPUs this process may use (``root`` and ``proc_cgroup``: for tests)."""
    n = len(os.sched_getaffinity(0))
    quota = _quota(root, proc_cgroup)
    if quota is not None:
        n = min(n, quota)
    return max(1, n)


def _quota(root: Path, proc_cgroup: Path) -> int | None:
    """Whole CPUs of the tightest CPU quota over this process, None when there is none (or none can be read)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2, one tree
            found += _along(root, path, _v2)
        elif "cpu" in controllers.split(","):  # cgroup v1's cpu controller
            mount = next((root / c for c in ("cpu,cpuacct", "cpu", "cpuacct,cpu") if (root / c).is_dir()), None)
            if mount is not None:
                found += _along(mount, path, _v1)
    return max(1, math.ceil(min(found))) if found else None


def _along(base: Path, path: str, read) -> list[float]:
    """The quotas of the group at ``path`` under ``base`` and of every group above it. In a container
    the group's own path may not exist in its view of the tree (its group is the root there): the
    groups that do are read."""
    out = []
    parts = [p for p in path.split("/") if p and p != ".."]
    for depth in range(len(parts), -1, -1):
        quota = read(base.joinpath(*parts[:depth]))
        if quota is not None:
            out.append(quota)
    return out


def _v2(group: Path) -> float | None:
    try:
        quota, period = (group / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1(group: Path) -> float | None:
    try:
        quota = int((group / "cpu.cfs_quota_us").read_text())
        period = int((group / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
