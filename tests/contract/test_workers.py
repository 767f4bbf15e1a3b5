"""Several workers behind one set of ports (issue 22): state an operator changes reaches every worker,
and a configuration that cannot run with several workers is refused at start, naming the field."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import grpc
import psutil
import pytest
import requests
import yaml

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway.dialects import LISTENERS
from tests.support import ROOT, free_port, gateway_config, serving_workers, start_gateway, stop_gateway
from tests.unit.test_access_tls import Pki

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
    """``FRESH`` GETs, each on a connection of its own: (GRPS's status code, the worker's request-id
    prefix); the code is the body's (the HTTP status is 200, as GRPS's C++ server answers)."""
    out = []
    for _ in range(FRESH):
        r = requests.get(url, headers={"Connection": "close"}, timeout=10)
        assert r.status_code == 200
        out.append((r.json()["status"]["code"], r.headers["X-Request-Id"].split("-")[0]))
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


def test_a_pd_coordinator_is_refused_with_several_workers(tmp_path):
    role = "coordinator"
    pd = {"role": role, "prefill": ["127.0.0.1:2025"], "decode": ["127.0.0.1:3025"]}
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config("127.0.0.1:1", ports, {"workers": 2, "dialects": {"mindie": {"pd": pd}}})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"error: `workers: 2` with dialects.mindie.pd.role: {role}:" in out.stderr
    assert "set `workers: 1`" in out.stderr


def test_workers_stop_when_their_master_is_killed(triton, tmp_path):
    """A spawned worker does not inherit its master's death signal (PR_SET_PDEATHSIG): it asks for
    its own, so a master SIGKILLed (as stop_gateway does to one that outlives its grace) leaves no
    worker serving under PID 1."""
    ports = {name: free_port() for name in LISTENERS}
    gw = start_gateway(gateway_config(triton.grpc_target, ports, {"workers": 2}), tmp_path)
    workers = [psutil.Process(pid) for pid in serving_workers(gw)]
    assert len(workers) == 2
    gw.proc.kill()
    gw.proc.wait(10)
    gone, alive = psutil.wait_procs(workers, timeout=30)
    for p in alive:  # a failing run leaves nothing behind
        p.kill()
    assert not alive, [(p.pid, p.ppid()) for p in alive]


@pytest.mark.parametrize("allowed", [1, 2])
def test_workers_auto_starts_one_per_cpu_the_process_may_use(triton, tmp_path, allowed):
    """``workers: auto`` under an affinity of 1 and of 2 CPUs (the gateway inherits the test's): that
    many workers, said at start; with 2, fresh connections reach both."""
    from gateway.process import cpus
    from tests.support import serving_workers

    mine = os.sched_getaffinity(0)
    if len(mine) < allowed:
        pytest.skip(f"this machine lets the tests use {len(mine)} CPU(s)")
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton.grpc_target, ports, {"workers": "auto"})
    os.sched_setaffinity(0, sorted(mine)[:allowed])
    try:
        expected = cpus.usable()  # the affinity, or less under a cgroup CPU quota
        gw = start_gateway(cfg, tmp_path)
    finally:
        os.sched_setaffinity(0, mine)
    try:
        assert f"workers: auto: {expected} ({expected} usable CPUs)" in gw.log_path.read_text()
        assert len(serving_workers(gw)) == (expected if expected > 1 else 0)  # one worker: in the process itself
        seen = _fresh(gw.url("grps_http") + "/grps/v1/health/live")
        assert [s for s, _ in seen] == [200] * FRESH
        assert len({w for _, w in seen}) == expected
    finally:
        stop_gateway(gw)


# -- keys and certificates rotated on a running gateway, in every worker -----------------------------

ROTATION_S = 1.0  # issue 22: a rotated key is accepted, and the old one refused, within a second


@pytest.fixture
def rotating(triton, tmp_path):
    """Two workers; GRPS HTTP and MindIE behind api_keys_file, GRPS HTTP over TLS, the files in tmp_path."""
    pki = Pki(tmp_path)
    keys = tmp_path / "keys.txt"
    keys.write_text("# rotated by the test\nold-key\n")
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton.grpc_target, ports, {"workers": 2})
    for name in ("grps_http", "mindie_http"):
        cfg["listeners"][name]["api_keys_file"] = str(keys)
    cfg["listeners"]["grps_http"]["tls"] = {"cert_file": str(pki.cert), "key_file": str(pki.key)}
    cfg["listeners"]["grps_grpc"]["tls"] = {"cert_file": str(pki.cert), "key_file": str(pki.key)}
    gw = start_gateway(cfg, tmp_path)
    yield gw, keys, pki
    stop_gateway(gw)


def _status(url: str, key: str, verify) -> tuple[int, str]:
    r = requests.get(url, headers={"Authorization": f"Bearer {key}", "Connection": "close"}, verify=verify, timeout=10)
    return r.status_code, r.headers.get("X-Request-Id", "-").split("-")[0]


def test_a_rotated_key_file_is_followed_by_every_worker_without_a_restart(rotating, tmp_path):
    gw, keys, pki = rotating
    live = f"https://localhost:{gw.port('grps_http')}/grps/v1/health/live"
    ca = str(pki.ca_file)
    assert [_status(live, "old-key", ca)[0] for _ in range(4)] == [200] * 4
    assert _status(live, "new-key", ca)[0] == 401
    # a long stream admitted with the old key, in flight while the key changes
    stream = requests.post(gw.url("mindie_http") + "/v1/completions", stream=True, timeout=30,
                           headers={"Authorization": "Bearer old-key"},
                           json={"model": "tiny_llm", "prompt": "in flight", "max_tokens": 150, "stream": True})
    assert stream.status_code == 200
    chunks = stream.iter_content(None)
    got = next(chunks)
    keys.write_text("new-key\n")
    rotated = time.monotonic()
    while True:  # until every fresh connection (both workers) takes the new key and refuses the old
        new, old = [_status(live, "new-key", ca) for _ in range(FRESH)], [_status(live, "old-key", ca)[0] for _ in range(4)]
        if [s for s, _ in new] == [200] * FRESH and old == [401] * 4:
            break
        assert time.monotonic() - rotated < ROTATION_S, (new, old)
    assert len({w for _, w in new}) == 2
    assert requests.post(gw.url("mindie_http") + "/v1/completions", headers={"Authorization": "Bearer old-key"},
                         json={"model": "tiny_llm", "prompt": "x", "max_tokens": 2}, timeout=10).status_code == 401
    for c in chunks:  # the request admitted before the rotation finishes normally
        got += c
    assert got.endswith(b"data: [DONE]\n\n") and b"error" not in got


def test_a_rotated_certificate_is_served_by_every_worker_without_a_restart(rotating, tmp_path):
    gw, _keys, pki = rotating
    live = f"https://localhost:{gw.port('grps_http')}/grps/v1/health/live"
    (tmp_path / "next").mkdir()
    fresh = Pki(tmp_path / "next")  # another CA: a client that trusts only it sees the rotation
    with pytest.raises(requests.exceptions.SSLError):
        _status(live, "old-key", str(fresh.ca_file))
    kept = requests.Session()  # a connection opened before the rotation stays on its certificate
    old = {"headers": {"Authorization": "Bearer old-key"}, "verify": str(pki.ca_file), "timeout": 10}
    assert kept.get(live, **old).status_code == 200
    pki.cert.write_bytes(fresh.cert.read_bytes())
    pki.key.write_bytes(fresh.key.read_bytes())
    rotated = time.monotonic()
    while True:
        try:
            seen = [_status(live, "old-key", str(fresh.ca_file)) for _ in range(FRESH)]
            if [s for s, _ in seen] == [200] * FRESH:
                break
        except requests.exceptions.SSLError as e:
            assert time.monotonic() - rotated < ROTATION_S, e
    assert len({w for _, w in seen}) == 2
    assert kept.get(live, **old).status_code == 200  # same connection, old certificate: still served
    kept.close()


def _grpc_live(target: str, ca: bytes) -> bool:
    """A fresh TLS channel to GRPS gRPC trusting only ``ca``: True when CheckLiveness answers."""
    creds = grpc.ssl_channel_credentials(ca)
    with grpc.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "localhost")]) as channel:
        try:
            return grps_pb2_grpc.GrpsServiceStub(channel).CheckLiveness(
                grps_pb2.GrpsMessage(), timeout=5).status.code == 200
        except grpc.RpcError:
            return False


def test_a_rotated_certificate_reaches_the_grpc_listener_of_every_worker(rotating, tmp_path):
    gw, _keys, pki = rotating
    target = f"localhost:{gw.port('grps_grpc')}"
    (tmp_path / "next").mkdir()
    fresh = Pki(tmp_path / "next")
    assert _grpc_live(target, pki.ca_file.read_bytes())
    assert not _grpc_live(target, fresh.ca_file.read_bytes())
    pki.cert.write_bytes(fresh.cert.read_bytes())
    pki.key.write_bytes(fresh.key.read_bytes())
    rotated = time.monotonic()
    while not all(_grpc_live(target, fresh.ca_file.read_bytes()) for _ in range(FRESH)):
        assert time.monotonic() - rotated < 10 * ROTATION_S
    assert not _grpc_live(target, pki.ca_file.read_bytes())  # the old CA's certificate is no longer served
