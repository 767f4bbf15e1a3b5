"""Several Triton replicas behind one gateway: client-side round_robin on the upstream channel.

Real Tritons (CPU, bundled binary) on loopback, one gateway whose upstream target reaches them
all: an ``ipv4:127.0.0.1:p1,127.0.0.1:p2`` list, and, as in Kubernetes (a headless Service),
one DNS name answered with an address per replica by a small DNS server of the test. Each
Triton's own inference statistics show which replica served how many requests.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.fakes import FakeDNS
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

MODEL = "saved_model_half_plus_three"


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replicas")
    repo = tmp / "repo"  # one light model is enough: faster start, less memory on a shared machine
    shutil.copytree(ROOT / "model_repository" / MODEL, repo / MODEL)
    started = []
    try:
        for i in range(2):
            cfg = LocalTriton(
                venv=str(ROOT / ".venv-triton"), model_repository=str(repo),
                workdir=str(ROOT / ".run" / "test-triton"), http_port=free_port(), grpc_port=free_port(),
                metrics_port=free_port(), startup_timeout_s=180,
            )
            started.append(localtriton.start(cfg, ROOT, log_path=tmp / f"triton{i}.log"))
        yield started
    finally:
        for tp in started:
            tp.stop()


def _success_count(tp: localtriton.TritonProcess) -> int:
    with urllib.request.urlopen(f"{tp.http_url}/v2/models/{MODEL}/stats", timeout=5) as r:  # noqa: S310
        stats = json.loads(r.read())["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def _served_since(replicas, before: list[int], total: int, timeout: float = 10.0) -> list[int]:
    """Requests each replica counted since `before`, read once `total` of them show or `timeout` ends.

    Triton can count a request in its statistics a moment after the client has its answer: CI read
    40 where 41 was due, straight after a correct answer. A count above `total` returns at once, so
    the callers' exact comparisons still fail on it."""
    deadline = time.monotonic() + timeout
    while True:
        served = [_success_count(tp) - b for tp, b in zip(replicas, before, strict=True)]
        if sum(served) >= total or time.monotonic() > deadline:
            return served
        time.sleep(0.05)


def _gateway(replicas, tmp, lb_policy: str):
    ports = {"admin_http": free_port(), "v2_grpc": free_port(), "tfserving_rest": free_port()}
    target = "ipv4:" + ",".join(tp.grpc_target for tp in replicas)
    cfg = gateway_config(target, ports)
    cfg["upstream"]["lb_policy"] = lb_policy
    for name in ("tfserving_grpc", "grps_http", "grps_grpc", "mindie_http"):
        cfg["listeners"][name] = {"enabled": False, "port": free_port()}
    return start_gateway(cfg, tmp)


def _traffic(gw, n: int) -> None:
    """n translated calls (TF Serving REST) and n passthrough calls (KServe V2 gRPC)."""
    for i in range(n):
        req = urllib.request.Request(
            f"{gw.url('tfserving_rest')}/v1/models/{MODEL}:predict", data=json.dumps({"instances": [float(i)]}).encode(),
        )
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
            assert json.loads(r.read()) == {"predictions": [0.5 * i + 3.0]}
    with grpc.insecure_channel(gw.target("v2_grpc")) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        for _ in range(n):
            req = service_pb2.ModelInferRequest(model_name=MODEL)
            tensor = req.inputs.add(name="x", datatype="FP32", shape=[1])
            tensor.contents.fp32_contents.append(1.0)
            assert stub.ModelInfer(req, timeout=10).outputs[0].name == "y"


def _served_by_each(replicas, tmp_path, policy: str, rounds: int) -> list[int]:
    """The inferences each replica served while a gateway with ``policy`` sent ``rounds`` of traffic."""
    before = [_success_count(tp) for tp in replicas]
    gw = _gateway(replicas, tmp_path, policy)
    try:
        _traffic(gw, rounds)
    finally:
        stop_gateway(gw)
    return _served_since(replicas, before, 2 * rounds)


def test_round_robin_spreads_requests_over_every_replica(replicas, tmp_path):
    served = _served_by_each(replicas, tmp_path, "round_robin", 20)
    assert sum(served) == 40
    assert min(served) >= 10, f"requests per replica: {served}"  # both serve, roughly evenly


def test_pick_first_sends_everything_to_one_replica(replicas, tmp_path):
    """The control: without round_robin the same target keeps one connection to one replica."""
    served = sorted(_served_by_each(replicas, tmp_path, "pick_first", 10))
    assert served == [0, 20]


def test_tcp_forward_publishes_tritons_grpc_and_http_ports(replicas, tmp_path):
    """compose's `triton-ports` profile: tools/tcp_forward.py in front of a real Triton."""
    import subprocess
    import sys

    from tests.support import wait_http

    tp = replicas[0]
    grpc_port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "tcp_forward.py"), f"{grpc_port}={tp.grpc_target}",
         f"{http_port}=127.0.0.1:{tp.cfg.http_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=20, proc=proc)
        before = _success_count(tp)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
            assert stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=10).ready
            req = service_pb2.ModelInferRequest(model_name=MODEL)
            req.inputs.add(name="x", datatype="FP32", shape=[3]).contents.fp32_contents.extend([1.0, 2.0, 5.0])
            out = stub.ModelInfer(req, timeout=10)
            assert list(memoryview(out.raw_output_contents[0]).cast("f")) == [3.5, 4.0, 5.5]
        assert _served_since([tp], [before], 1) == [1]
    finally:
        proc.terminate()
        proc.wait(10)


# -- the Kubernetes path: one DNS name with an address per replica (a headless Service) -----------


def test_a_dns_name_with_one_address_per_replica_spreads_calls(tmp_path, monkeypatch):
    """Like `dns:///triton-headless:8001` in Kubernetes: one name, one A record per Triton, the
    same port. Two Tritons on 127.0.0.1 and 127.0.0.2 (both loopback), a DNS server that answers
    the name with both, and the gateway's target `dns://<that server>/triton-headless.test:<port>`."""
    tmp = tmp_path
    repo = tmp / "repo"
    shutil.copytree(ROOT / "model_repository" / MODEL, repo / MODEL)
    grpc_port = free_port()
    started, dns, gw = [], None, None
    try:
        for host in ("127.0.0.1", "127.0.0.2"):
            cfg = LocalTriton(
                venv=str(ROOT / ".venv-triton"), model_repository=str(repo), host=host,
                workdir=str(ROOT / ".run" / "test-triton"), http_port=free_port(), grpc_port=grpc_port,
                metrics_port=free_port(), startup_timeout_s=180,
            )
            started.append(localtriton.start(cfg, ROOT, log_path=tmp / f"triton-{host}.log"))
        dns = FakeDNS("triton-headless.test", ["127.0.0.1", "127.0.0.2"])
        monkeypatch.setenv("GRPC_DNS_RESOLVER", "ares")  # the resolver that honours a DNS server in the target
        ports = {"admin_http": free_port(), "v2_grpc": free_port(), "tfserving_rest": free_port()}
        cfg = gateway_config(f"dns://127.0.0.1:{dns.port}/triton-headless.test:{grpc_port}", ports)
        cfg["upstream"]["lb_policy"] = "round_robin"
        for name in ("tfserving_grpc", "grps_http", "grps_grpc", "mindie_http"):
            cfg["listeners"][name] = {"enabled": False, "port": free_port()}
        before = [_success_count(tp) for tp in started]
        gw = start_gateway(cfg, tmp)
        _traffic(gw, 20)
        served = [_success_count(tp) - b for tp, b in zip(started, before, strict=True)]
        assert ("triton-headless.test", 1) in dns.queries  # the name was resolved by our server
        assert sum(served) == 40 and min(served) >= 10, f"requests per replica: {served}"
    finally:
        if gw is not None:
            stop_gateway(gw)
        if dns is not None:
            dns.close()
        for tp in started:
            tp.stop()
