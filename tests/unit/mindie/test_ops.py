"""The worker bus (two buses in one process, one shared directory) and the role bodies MindIE checks."""

from __future__ import annotations

import asyncio
import time

from gateway.call import Admission
from gateway.dialects.mindie.management import peers_v1, peers_v2
from gateway.dialects.mindie.running import Running
from gateway.dialects.mindie.workerbus import WorkerBus


class Ctx:
    def __init__(self, limit: int):
        self.admission = Admission(limit)


async def test_a_stop_reaches_the_other_worker_and_loads_add_up(tmp_path):
    a_run, b_run = Running(), Running()
    a = WorkerBus(a_run, Ctx(8), str(tmp_path), me=1)
    b = WorkerBus(b_run, Ctx(8), str(tmp_path), me=2)
    await a.start()
    await b.start()
    hold = asyncio.Event()

    async def generation():
        with b_run.track("gen-1"):
            await hold.wait()

    task = asyncio.create_task(generation())
    await asyncio.sleep(0)
    try:
        assert [w["running"] for w in await a.load()] == [0, 1]
        assert await a.stop("gen-1") is True  # a does not run it: b does, and stops it
        await asyncio.sleep(0)
        assert task.cancelled()
        assert await a.stop("gen-1") is False  # finished: nobody has it
    finally:
        hold.set()
        await a.close()
        await b.close()
    assert not list(tmp_path.glob("mindie-*.sock"))


async def test_a_stop_is_judged_as_of_its_receipt_on_either_worker(tmp_path):
    """The flaky contract test's race, made deterministic: the stopInfer is received while b runs
    the generation; before the question reaches b, the generation ends on its own. MindIE (one
    process) would have found it then: the answer is found, not 404. Asked after the end: 404."""
    a_run, b_run = Running(), Running()
    a = WorkerBus(a_run, Ctx(8), str(tmp_path), me=1)
    b = WorkerBus(b_run, Ctx(8), str(tmp_path), me=2)
    await a.start()
    await b.start()
    try:
        with b_run.track("num-1", "gen-2"):
            received = time.monotonic()  # the stopInfer arrives on a now, the generation running on b
        # ... and the generation ended (its last token) before the question reached b
        assert await a.stop("gen-2", received) is True
        assert await a.stop("num-1", received) is True
        assert await a.stop("gen-2") is False  # received after the end: not found
        assert await a.stop("gen-2", time.monotonic()) is False
        with a_run.track("gen-3"):  # the same on the worker that received it
            received = time.monotonic()
        assert await a.stop("gen-3", received) is True
        assert await b.stop("gen-3") is False
    finally:
        await a.close()
        await b.close()


async def test_ended_generations_are_remembered_for_a_bounded_time_and_number(monkeypatch):
    from gateway.dialects.mindie import running

    run = Running()
    since = time.monotonic()
    monkeypatch.setattr(running, "ENDED_MAX", 3)
    for i in range(5):
        with run.track(f"g{i}"):
            pass
    assert [run.stop(f"g{i}", since) for i in range(5)] == [False, False, True, True, True]
    monkeypatch.setattr(running, "ENDED_KEEP_S", 0.0)
    with run.track("g5"):
        pass
    assert [run.stop(f"g{i}", since) for i in range(6)] == [False] * 6


async def test_a_dead_workers_socket_is_skipped(tmp_path):
    (tmp_path / "mindie-999999.sock").write_bytes(b"")  # no such process, nothing listening
    bus = WorkerBus(Running(), Ctx(4), str(tmp_path), me=1)
    await bus.start()
    try:
        assert await bus.load() == [{"limit": 4, "inflight": 0, "running": 0}]
        assert await bus.stop("nobody") is False
    finally:
        await bus.close()


def test_role_bodies_as_mindie_checks_them():
    local = {"device": [], "server_ip": "10.0.0.1", "id": 1, "host_ip": "10.0.0.1"}
    peer = {"device": [], "server_ip": "10.0.0.2", "id": 7, "host_ip": "10.0.0.2"}
    assert peers_v1({"local": local, "peers": [peer]}) == [7]
    assert peers_v1({"local": local}) == []
    assert peers_v1({"local": [local]}) is None  # v1's local is an object
    assert peers_v1({"local": {**local, "server_ip": "x"}}) is None
    assert peers_v1({"local": local, "peers": [{**peer, "id": -1}]}) is None
    node = {"server_ip": "10.0.0.2", "host_ip": "10.0.0.2", "dp_inst_list": [{"dp_inst_id": 70001, "device": []}]}
    assert peers_v2({"local": [node], "peers": [[node]]}) == [7]
    assert peers_v2({"local": node}) is None
    assert peers_v2({"local": [node], "peers": [[{**node, "dp_inst_list": [{}]}]]}) is None
