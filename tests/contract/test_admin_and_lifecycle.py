"""The admin listener and `gateway local` (what `make run` runs): start, announce, stop cleanly."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.dialects import LISTENERS
from gateway.observe import metrics
from tests.support import (
    ROOT,
    free_port,
    gateway_config,
    start_gateway,
    stop_gateway,
    wait_http,
    wait_workers_serving,
)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_health_is_ready_and_metrics_are_exposed(gateway):
    status, body = _get(gateway.url("admin_http") + "/health")
    assert status == 200 and b'"ready"' in body
    status, body = _get(gateway.url("admin_http") + "/metrics")
    assert status == 200
    assert b"gateway_upstream_ready 1.0" in body
    assert b"gateway_requests_total" in body


def test_health_is_503_when_triton_is_unreachable(tmp_path):
    ports = {"admin_http": free_port(), "v2_grpc": free_port()}
    cfg = gateway_config(f"127.0.0.1:{free_port()}", ports)  # nothing listens there
    for name in LISTENERS.keys() - ports.keys():  # the others off, on ports of their own
        cfg["listeners"][name] = {"enabled": False, "port": free_port()}
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{ports['admin_http']}/health"
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline and status == 0:
            try:
                status, _ = _get(url)
            except OSError:
                time.sleep(0.2)
        assert status == 503
    finally:
        proc.terminate()
        proc.wait(15)


def test_gateway_restart_against_the_same_triton(triton, tmp_path):
    """A second gateway process can come and go while another serves: ports are per listener."""
    ports = {name: free_port() for name in ("v2_grpc", "admin_http")}
    cfg = gateway_config(triton.grpc_target, ports)
    for name in LISTENERS.keys() - ports.keys():  # the others off, on ports of their own
        cfg["listeners"][name] = {"enabled": False, "port": free_port()}
    gw = start_gateway(cfg, tmp_path)
    stop_gateway(gw)
    assert gw.proc.returncode == 0, gw.log_tail()


TWO_STUBS = ("saved_model_half_plus_three", "grps_echo")  # python backend models, each a stub process


def test_local_announces_listeners_and_leaves_nothing_behind_on_sigterm(tmp_path):
    ports, path = _local_config(tmp_path, TWO_STUBS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    log = tmp_path / "local.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "local", "--config", str(path)], cwd=ROOT, env=env,
                                stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{ports['listeners']['admin_http']['port']}/health", timeout=120, proc=proc)
        me = psutil.Process(proc.pid)
        family = me.children(recursive=True)
        assert any("tritonserver" in p.name() for p in family)
        assert any("triton_python_backend_stub" in " ".join(p.cmdline()) for p in family)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    out = log.read_text(errors="replace")
    out_lines = out.splitlines()
    assert proc.returncode == 0, out
    for name in ("KServe V2 gRPC passthrough", "TensorFlow Serving REST", "GRPS HTTP", "admin HTTP"):
        assert any(line.startswith(name) for line in out_lines), out
    time.sleep(0.5)
    leftovers = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    _reap(leftovers)
    assert not leftovers, [(p.pid, p.cmdline()) for p in leftovers]


def _two_workers(triton, tmp_path):
    """A gateway with two worker processes and only the V2 and admin listeners."""
    ports = {name: free_port() for name in ("v2_grpc", "admin_http")}
    cfg = gateway_config(triton.grpc_target, ports)
    cfg["workers"] = 2
    for name in LISTENERS.keys() - ports.keys():  # the others off, on ports of their own
        cfg["listeners"][name] = {"enabled": False, "port": free_port()}
    return start_gateway(cfg, tmp_path)


def test_two_workers_share_the_ports_aggregate_metrics_and_stop_together(triton, tmp_path):
    import numpy as np
    import tritonclient.grpc as grpcclient

    gw = _two_workers(triton, tmp_path)
    try:
        children = psutil.Process(gw.proc.pid).children()
        workers = [p for p in children if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2
        for _ in range(12):  # new connections are spread over the workers by the kernel
            client = grpcclient.InferenceServerClient(gw.target("v2_grpc"))
            x = grpcclient.InferInput("x", [1], "FP32")
            x.set_data_from_numpy(np.array([2.0], np.float32))
            assert client.infer("saved_model_half_plus_three", [x]).as_numpy("y")[0] == 4.0
            client.close()
        want = {"dialect": "v2", "listener": "v2_grpc", "route": "ModelInfer",
                "model": "saved_model_half_plus_three", "outcome": "ok", "status": "OK"}
        # each worker writes its observations at most metrics.FLUSH_S after them; the scrape, answered
        # by either worker, sums both: all 12 within a few flush intervals
        deadline = time.monotonic() + 20 * metrics.FLUSH_S
        while True:
            _, body = _get(gw.url("admin_http") + "/metrics")
            values = [s.value for fam in text_string_to_metric_families(body.decode()) for s in fam.samples
                      if s.name == "gateway_requests_total" and s.labels == want]
            if values == [12.0] or time.monotonic() > deadline:
                break
            time.sleep(metrics.FLUSH_S)
        assert values == [12.0]
    finally:
        stop_gateway(gw)
    assert gw.proc.returncode == 0, gw.log_tail()
    time.sleep(0.5)
    assert not [w for w in children if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


def test_a_worker_that_dies_is_replaced_and_logged(triton, tmp_path):
    gw = _two_workers(triton, tmp_path)
    try:
        def workers():
            out = []
            for p in psutil.Process(gw.proc.pid).children():
                try:
                    if p.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(p.cmdline()):
                        out.append(p)
                except psutil.Error:  # exited between the listing and the look
                    pass
            return out

        before = workers()
        assert len(before) == 2
        before[0].kill()  # SIGKILL: no goodbye
        deadline = time.monotonic() + 60
        now = workers()
        while time.monotonic() < deadline and not (len(now) == 2 and before[0].pid not in {p.pid for p in now}):
            time.sleep(0.2)
            now = workers()
        assert len(now) == 2 and before[0].pid not in {p.pid for p in now}, gw.log_tail()
        assert f"worker {before[0].pid} exited with code -9; started worker" in gw.log_path.read_text()
        # the replacement binds every listener and then says it serves; from then on both workers answer
        wait_workers_serving(gw, 2, timeout=60, pids={p.pid for p in now})
        for _ in range(20):  # every port still answers, whichever worker the kernel picks
            assert _get(gw.url("admin_http") + "/live")[0] == 200
    finally:
        stop_gateway(gw)
    assert gw.proc.returncode == 0, gw.log_tail()


def test_triton_that_cannot_start_fails_clearly_with_its_log_tail(tmp_path):

    import pytest

    from gateway.local import localtriton
    from gateway.settings import LocalTriton

    repo = tmp_path / "repo"
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('name: "broken"\nbackend: "python"\ninput [ { name: ')
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(repo),
                  workdir=str(ROOT / ".run" / "test-broken-triton"), http_port=free_port(),
                  grpc_port=free_port(), metrics_port=free_port(), startup_timeout_s=60)
    with pytest.raises(localtriton.TritonStartError) as err:
        localtriton.start(cfg, ROOT, log_path=tmp_path / "triton.log")
    text = str(err.value)
    assert "tritonserver exited with code" in text
    assert "broken" in text  # the log tail names the model that failed


def test_missing_triton_environment_is_reported(tmp_path):

    import pytest

    from gateway.local import localtriton
    from gateway.settings import LocalTriton

    cfg = LocalTriton(venv=str(tmp_path / "nowhere"))
    with pytest.raises(localtriton.TritonStartError, match="make install"):
        localtriton.start(cfg, ROOT)


def _local_config(tmp_path, models: tuple[str, ...] = ()) -> tuple[dict, object]:
    """`gateway local`'s config on free ports; ``models``: its Triton serves only these (two python
    backend stubs are as much a process family as twelve, and start in a fraction of the time),
    else all of model_repository/."""
    repo = ROOT / "model_repository"
    if models:
        for name in models:
            shutil.copytree(repo / name, tmp_path / "models" / name)
        repo = tmp_path / "models"
    cfg = {
        "local_triton": {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port(),
                         "workdir": str(tmp_path / "triton"), "venv": str(ROOT / ".venv-triton"),
                         "model_repository": str(repo)},
        "listeners": {n: {"host": "127.0.0.1", "port": free_port()} for n in LISTENERS},  # every one, v2_http too
    }
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cfg, path


def _regions_left(before: set[str]) -> set[str]:
    """The python backend's shared-memory regions that appeared since ``before`` and that no process
    maps: what a stopped Triton left in /dev/shm (gateway/local/stubregions.py gives them back)."""
    from gateway.local import stubregions

    return (stubregions.present() - before) - stubregions.mapped()


def test_local_stops_everything_when_its_parent_dies(tmp_path):
    """`make run` does not pass SIGTERM on: when the parent (make) dies, gateway local must stop anyway,
    and give back the shared memory its Triton's python backend held."""
    from gateway.local import stubregions

    regions = stubregions.present()
    cfg, path = _local_config(tmp_path, TWO_STUBS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    # bash stays the parent (a second command follows), like make does for `make run`
    parent = subprocess.Popen(["bash", "-c", f"{sys.executable} -m gateway local --config {path} > {tmp_path}/l.log 2>&1; true"],
                              cwd=ROOT, env=env)
    try:
        wait_http(f"http://127.0.0.1:{cfg['listeners']['admin_http']['port']}/health", timeout=120)
        family = psutil.Process(parent.pid).children(recursive=True)
        assert any("tritonserver" in p.name() for p in family)
    finally:
        parent.kill()  # SIGKILL: the parent cannot forward anything
        parent.wait(10)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            break
        time.sleep(0.5)
    _reap(alive)
    assert not alive, [(p.pid, p.cmdline()[:2]) for p in alive]
    assert not _regions_left(regions)
    log = (tmp_path / "l.log").read_text()  # and its last line says why it stopped
    assert "stopped: the process that started it exited" in log.splitlines()[-1], log[-2000:]


def test_sigterm_while_triton_is_starting_leaves_nothing_behind(tmp_path):
    from gateway.local import stubregions

    regions = stubregions.present()
    cfg, path = _local_config(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    with open(tmp_path / "l.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "local", "--config", str(path)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    family: list = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until tritonserver exists, but is not ready yet
        family = psutil.Process(proc.pid).children(recursive=True)
        if any("tritonserver" in p.name() for p in family):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    time.sleep(0.5)
    leftovers = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    _reap(leftovers)  # a failing run must not leave a Triton behind for the next test
    assert family, "tritonserver never started"
    assert not leftovers, [(p.pid, p.cmdline()[:2]) for p in leftovers]
    assert not _regions_left(regions)  # Triton stopped while loading its python models: their regions given back


def _reap(procs) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
