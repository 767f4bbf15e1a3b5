"""``workers: auto``: the CPUs a process may use, from its affinity and the cgroup CPU quotas over it
(gateway/process/cpus.py), read from cgroup trees written by the test, and what the settings make of it."""

from __future__ import annotations

import os

import pytest

from gateway import cli, config
from gateway.process import cpus
from gateway.process.shared import single_worker_problems


@pytest.fixture
def eight_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))


def _tree(tmp_path, proc_lines: str, files: dict[str, str]):
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(proc_lines)
    return root, proc


@pytest.mark.parametrize("files,expected", [
    ({}, 8),  # no quota file: the affinity counts
    ({"cpu.max": "max 100000\n"}, 8),  # no limit
    ({"cpu.max": "200000 100000\n"}, 2),  # a container's cpus: 2
    ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
    ({"cpu.max": "50000 100000\n"}, 1),  # half a CPU: one worker, not none
    ({"cpu.max": "1600000 100000\n"}, 8),  # a quota above the affinity: the affinity
    ({"cpu.max": "garbage\n"}, 8),  # unreadable: as if none
])
def test_cgroup_v2_quota_of_the_own_group(tmp_path, eight_cpus, files, expected):
    root, proc = _tree(tmp_path, "0::/\n", files)
    assert cpus.usable(root, proc) == expected


def test_cgroup_v2_the_tightest_quota_along_the_path_counts(tmp_path, eight_cpus):
    """A systemd unit with CPUQuota=300% under a slice limited to 2 CPUs: 2; the unit's own group
    without a limit under the slice's: still the slice's."""
    root, proc = _tree(tmp_path, "0::/gw.slice/gw.service\n", {
        "gw.slice/cpu.max": "200000 100000\n", "gw.slice/gw.service/cpu.max": "300000 100000\n"})
    assert cpus.usable(root, proc) == 2
    (root / "gw.slice/gw.service/cpu.max").write_text("max 100000\n")
    assert cpus.usable(root, proc) == 2
    (root / "gw.slice/cpu.max").write_text("max 100000\n")
    assert cpus.usable(root, proc) == 8


def test_cgroup_v2_in_a_container_its_group_is_the_root_of_its_view(tmp_path, eight_cpus):
    """/proc/self/cgroup can name a path the container's own mount does not have: the groups that exist count."""
    root, proc = _tree(tmp_path, "0::/kubepods/burstable/pod1/abc\n", {"cpu.max": "300000 100000\n"})
    assert cpus.usable(root, proc) == 3


def test_cgroup_v1_cfs_quota(tmp_path, eight_cpus):
    lines = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
    root, proc = _tree(tmp_path, lines, {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "400000\n",
                                         "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert cpus.usable(root, proc) == 4
    (root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us").write_text("-1\n")  # no limit
    assert cpus.usable(root, proc) == 8


def test_the_affinity_caps_a_larger_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 3})
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "400000 100000\n"})
    assert cpus.usable(root, proc) == 2


def test_no_proc_cgroup_file_leaves_the_affinity(tmp_path, eight_cpus):
    assert cpus.usable(tmp_path, tmp_path / "absent") == 8


def test_this_machine_reads_a_count():
    assert 1 <= cpus.usable() <= len(os.sched_getaffinity(0))


def test_workers_auto_is_the_usable_cpus(tmp_path, monkeypatch):
    monkeypatch.setattr(cpus, "usable", lambda: 6)
    path = tmp_path / "gateway.yaml"
    path.write_text("workers: auto\n")
    s = config.load(path, env={})
    assert (s.workers, s.workers_auto) == (6, True)
    assert config.load(None, env={"GATEWAY__WORKERS": "auto"}).workers == 6
    s = config.load(None, env={"GATEWAY__WORKERS": "4"})
    assert (s.workers, s.workers_auto) == (4, False)
    assert cli._auto_workers_line(6) == "workers: auto: 6 (6 usable CPUs)"


def test_workers_auto_is_one_where_a_setting_keeps_state_in_one_process(tmp_path, monkeypatch):
    """A MindIE PD coordinator is refused with a number above 1 (gateway/process/shared.py); auto starts 1."""
    monkeypatch.setattr(cpus, "usable", lambda: 6)
    coordinator = {"GATEWAY__DIALECTS__MINDIE__PD__ROLE": "coordinator",
                   "GATEWAY__DIALECTS__MINDIE__PD__PREFILL": "[127.0.0.1:2025]",
                   "GATEWAY__DIALECTS__MINDIE__PD__DECODE": "[127.0.0.1:3025]"}
    s = config.load(None, env={**coordinator, "GATEWAY__WORKERS": "auto"})
    assert (s.workers, s.workers_auto) == (1, True)
    assert single_worker_problems(s) == []
    assert cli._auto_workers_line(1) == "workers: auto: 1 (a setting keeps state in one process)"
    assert single_worker_problems(config.load(None, env={**coordinator, "GATEWAY__WORKERS": "2"}))
