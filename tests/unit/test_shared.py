"""gateway/process/shared.py: a Flag is one value for every worker of a gateway; configurations pinned to one
process are refused with several workers, naming the field."""

from __future__ import annotations

import multiprocessing

from gateway.process import shared
from tests.support import worker_settings


def _flip(directory: str) -> None:  # runs in another process, as a worker would
    shared.Flag("switch", True, directory).set(False)


def test_a_flag_set_in_one_process_is_read_by_every_other(tmp_path):
    a = shared.Flag("switch", True, str(tmp_path))
    b = shared.Flag("switch", False, str(tmp_path))  # a later worker: the current value, not its default
    assert a.get() is True and b.get() is True
    p = multiprocessing.get_context("spawn").Process(target=_flip, args=(str(tmp_path),))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert a.get() is False and b.get() is False
    b.set(True)
    assert a.get() is True


def test_without_a_shared_directory_a_flag_is_the_process_own(monkeypatch):
    monkeypatch.delenv(shared.ENV, raising=False)
    f = shared.Flag("switch", True)
    f.set(False)
    assert f.get() is False and shared.Flag("switch", True).get() is True


def test_the_pd_coordinator_needs_one_worker():
    def problems(role: str, workers: int) -> list[str]:
        pd = '{role: ' + role + ', prefill: ["p:1"], decode: ["d:1"]}'
        s = worker_settings({"mindie_http": 1025}, "127.0.0.1:1", WORKERS=str(workers), DIALECTS__MINDIE__PD=pd)
        return shared.single_worker_problems(s)

    assert problems("coordinator", 1) == []
    assert problems("prefill", 4) == [] and problems("standard", 4) == [] and problems("decode", 4) == []
    (msg,) = problems("coordinator", 3)
    assert msg.startswith("`workers: 3` with dialects.mindie.pd.role: coordinator: ") and "set `workers: 1`" in msg
