"""Several workers behind one set of ports (issue 22): state an operator changes reaches every worker,
and a configuration that cannot run with several workers is refused at start, naming the field."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest
import requests
import yaml

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway.dialects import LISTENERS
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

FRESH = 20  # new connections per check: the kernel spreads them over the workers (SO_REUSEPORT)


@pytest.fixture(scope="module")
def two_workers(triton, tmp_path_factory):
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton.grpc_target, ports)
    cfg["workers"] = 2
    gw = start_gateway(cfg, tmp_path_factory.mktemp("two-workers"))
    yield gw
    stop_gateway(gw)


def _fresh(url: str) -> list[tuple[int, str]]:
    """``FRESH`` GETs, each on a connection of its own: (status, the worker's request-id prefix)."""
    out = []
    for _ in range(FRESH):
        r = requests.get(url, headers={"Connection": "close"}, timeout=10)
        out.append((r.status_code, r.headers["X-Request-Id"].split("-")[0]))
    return out


def test_grps_offline_and_online_reach_every_worker(two_workers):
    base = two_workers.url("grps_http")
    ready = base + "/grps/v1/health/ready"
    try:
        assert requests.post(base + "/grps/v1/health/offline", json={}, timeout=5).status_code == 200
        seen = _fresh(ready)
        assert [s for s, _ in seen] == [503] * FRESH
        assert len({w for _, w in seen}) == 2  # both workers answered, and both are offline
        assert requests.get(base + "/grps/v1/health/online", timeout=5).status_code == 200
        seen = _fresh(ready)
        assert [s for s, _ in seen] == [200] * FRESH
        assert len({w for _, w in seen}) == 2
    finally:
        requests.get(base + "/grps/v1/health/online", timeout=5)


def test_grps_grpc_offline_is_seen_by_http_on_every_worker(two_workers):
    base = two_workers.url("grps_http")
    with grpc.insecure_channel(two_workers.target("grps_grpc")) as channel:
        stub = grps_pb2_grpc.GrpsServiceStub(channel)
        try:
            assert stub.Offline(grps_pb2.GrpsMessage(), timeout=5).status.code == 200
            assert [s for s, _ in _fresh(base + "/grps/v1/health/ready")] == [503] * FRESH
            assert stub.Online(grps_pb2.GrpsMessage(), timeout=5).status.code == 200
            assert [s for s, _ in _fresh(base + "/grps/v1/health/ready")] == [200] * FRESH
        finally:
            stub.Online(grps_pb2.GrpsMessage(), timeout=5)


@pytest.mark.parametrize("role", ["decode", "coordinator"])
def test_pd_roles_pinned_to_one_process_are_refused_with_several_workers(role, tmp_path):
    pd = {"role": role}
    if role == "coordinator":
        pd.update(prefill=["127.0.0.1:2025"], decode=["127.0.0.1:3025"])
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config("127.0.0.1:1", ports, {"workers": 2, "dialects": {"mindie": {"pd": pd}}})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"error: `workers: 2` with dialects.mindie.pd.role: {role}:" in out.stderr
    assert "set `workers: 1`" in out.stderr
