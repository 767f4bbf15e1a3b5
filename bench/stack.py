"""The benchmark's own stack: the local CPU Triton, the gateway and the floor, on free loopback ports.

Everything it starts lives in one temporary folder (Triton's prepared tree, logs, the gateway's
YAML) that ``close()`` removes after stopping both processes; ``close()`` runs from ``finally``, on
SIGTERM/SIGHUP (turned into SystemExit by bench.run) and from atexit, whichever comes first.
The gateway is started exactly as the tests start it (tests/support.py), so any YAML schema
change the gateway makes reaches the benchmark through ``gateway_config``. The floor
(bench/floor.py: every path done the least possible way on the same stack) is one more process,
started once against the same Triton and stopped like the gateway.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import procstat
from gateway.dialects import LISTENERS
from gateway.local import localtriton, parent
from gateway.process import grpcruntime
from gateway.settings import LocalTriton
from tests.support import (
    ROOT,
    GatewayProcess,
    free_port,
    gateway_config,
    start_gateway,
    stop_gateway,
    wait_http,
)

_CPU_COUNT = re.compile(r"(kind:\s*KIND_CPU\s*,\s*count:\s*)\d+")

# urllib would honour http_proxy from the environment: the benchmark only talks to loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(method: str, url: str, body: bytes | None = None, headers: dict | None = None,
         timeout: float = 60) -> tuple[int, dict, bytes]:
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"refusing to send anything but to 127.0.0.1: {url}")
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()



def floor_env() -> dict[str, str]:
    """The floor's environment: gRPC's runtime choices as a gateway worker makes them
    (gateway/process/grpcruntime.py: ``GRPC_EXPERIMENTS``, unless the operator set it), so the floor runs
    the same gRPC, not grpc's defaults (this process has loaded grpc before it could choose)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    grpcruntime.configure(env, grpc_loaded=False)
    return env


def cpu_list(text: str) -> set[int]:
    """CPUs written as taskset does: "0-3,8"."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def pin(pids, var: str) -> None:
    """Every thread of ``pids`` onto the CPUs the environment variable ``var`` names (BENCH_CPUS_TRITON,
    BENCH_CPUS_GATEWAY; unset: left alone). Processes and threads they start later inherit them."""
    text = os.environ.get(var, "")
    if not text:
        return
    cpus = cpu_list(text)
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass


class Session:
    """A process started in a session of its own (``start_new_session=True``): its process group is it
    and what it forks (a server's workers). ``stop`` ends that group by its id: SIGTERM, SIGKILL to
    what is left after ``term_s``."""

    proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, term_s: float = 15) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, 5)):
            if not procstat.process_group(proc.pid):
                break
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and procstat.process_group(proc.pid):
                proc.poll()
                time.sleep(0.1)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


class StackDied(RuntimeError):
    """A process of the stack exited while the bench ran: ``headline`` says which and how, ``tail``
    is the end of its log."""

    def __init__(self, headline: str, tail: str):
        super().__init__(f"{headline}:\n{tail}" if tail else headline)
        self.headline = headline

class Stack:
    """Triton once; the gateway (re)started with a given number of workers."""

    def __init__(self, log_dir: Path | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
        self.log_dir = log_dir
        self.triton: localtriton.TritonProcess | None = None
        self.gateway: GatewayProcess | None = None
        self.gateway_pids: list[int] = []
        self._gateway_runs = 0
        self.floor: subprocess.Popen | None = None
        self.floor_pids: list[int] = []
        self.floor_http = ""  # http://127.0.0.1:port
        self.floor_grpc = ""  # 127.0.0.1:port
        self._closed = False
        atexit.register(self.close)

    # -- Triton ---------------------------------------------------------------------------------
    def start_triton(self, instances: int | None = None) -> localtriton.TritonProcess:
        """The repository as it is, or a copy with ``instances`` python-backend instances per CPU model."""
        repo = ROOT / "model_repository" if instances is None else self._repository_copy(instances)
        cfg = LocalTriton(
            venv=str(ROOT / ".venv-triton"),
            model_repository=str(repo),
            workdir=str(self.tmp / "triton"),
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            startup_timeout_s=180,
        )
        self.triton = localtriton.start(cfg, ROOT, log_path=self.tmp / "triton.log")
        pin(self.triton_pids(), "BENCH_CPUS_TRITON")
        return self.triton

    def _repository_copy(self, instances: int) -> Path:
        """model_repository/ with every ``KIND_CPU`` instance group's count set to ``instances``: one
        python-backend instance runs one request at a time, the ceiling of a many-core benchmark."""
        repo = self.tmp / "model_repository"
        shutil.copytree(ROOT / "model_repository", repo, ignore=shutil.ignore_patterns("__pycache__", "*.plan"))
        for config in [*repo.glob("*/config.pbtxt"), *repo.glob("*/configs/*.pbtxt")]:
            text = config.read_text()
            config.write_text(_CPU_COUNT.sub(lambda m: f"{m[1]}{instances}", text))
        return repo

    def triton_pids(self) -> list[int]:
        """tritonserver and its python-backend stubs: its own process group (localtriton starts a session)."""
        return procstat.process_group(self.triton.proc.pid) if self.triton else []

    def triton_version(self) -> str:
        status, _, body = http("GET", f"{self.triton.http_url}/v2")
        return json.loads(body).get("version", "?") if status == 200 else "?"

    # -- gateway --------------------------------------------------------------------------------
    def start_gateway(self, workers: int) -> GatewayProcess:
        self.stop_gateway()
        self._gateway_runs += 1
        folder = self.tmp / f"gateway-{self._gateway_runs}-w{workers}"
        folder.mkdir()
        ports = {name: free_port() for name in LISTENERS}
        conf = gateway_config(self.triton.grpc_target, ports, {"workers": workers, "log_level": "WARNING"})
        transport = os.environ.get("BENCH_UPSTREAM_TRANSPORT", "")  # grpc|h2; unset: the default
        if transport:
            conf["upstream"]["transport"] = transport
        cancel = os.environ.get("BENCH_UPSTREAM_CANCEL", "")  # streams|all|none; unset: the default (upstream.cancel)
        if cancel:
            conf["upstream"]["cancel"] = cancel
        server = os.environ.get("BENCH_GRPC_SERVER", "")  # h2|grpc; unset: the default (grpc_server)
        if server:
            conf["grpc_server"] = server
        self.gateway = start_gateway(conf, folder)
        self.gateway_pids = self._wait_workers(workers)
        pin(self.gateway_pids, "BENCH_CPUS_GATEWAY")
        return self.gateway

    def _wait_workers(self, workers: int, timeout: float = 60) -> list[int]:
        """The gateway's process tree once every worker answers (with several workers /health is
        answered by whichever worker the kernel picks, so wait for the processes too)."""
        want = 1 if workers == 1 else workers + 1
        deadline = time.monotonic() + timeout
        while True:
            pids = [p for p in procstat.process_tree(self.gateway.proc.pid) if self._is_gateway(p)]
            if len(pids) >= want or time.monotonic() > deadline:
                return pids
            time.sleep(0.2)

    @staticmethod
    def _is_gateway(pid: int) -> bool:
        """Workers, not multiprocessing's helper processes (resource tracker)."""
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return b"resource_tracker" not in cmd

    def assert_running(self) -> None:
        """Stop measuring, rather than measure error pages, when Triton, the gateway or the floor died
        (``StackDied``: the bench skips what is left and writes what it measured)."""
        if self.triton is not None and self.triton.proc.poll() is not None:
            raise StackDied(f"Triton exited with {self.triton.proc.returncode} (logs/triton.log)",
                            self.triton.log_tail())
        if self.gateway is not None and self.gateway.proc.poll() is not None:
            raise StackDied(f"the gateway exited with {self.gateway.proc.returncode}", self.gateway.log_tail())
        if self.floor is not None and self.floor.poll() is not None:
            raise StackDied(f"the floor exited with {self.floor.returncode} (logs/floor.log)", "")

    def worker_pids(self) -> list[int]:
        """The processes that serve requests: the only process, or every child of the supervisor."""
        if len(self.gateway_pids) <= 1:
            return list(self.gateway_pids)
        return self.gateway_pids[1:]

    def stop_gateway(self) -> None:
        if self.gateway is None:
            return
        gw = self.gateway
        tree = [procstat.read_stat(pid) for pid in procstat.process_tree(gw.proc.pid)]
        self.gateway = None
        try:
            stop_gateway(gw)
        finally:
            self._keep_log(gw.log_path, f"{gw.log_path.parent.name}.log")
            for before in filter(None, tree):  # a worker that outlived its supervisor is still ours
                now = procstat.read_stat(before.pid)
                if now is not None and now.start == before.start and before.pid != os.getpid():
                    try:
                        os.kill(before.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass

    # -- the floor ------------------------------------------------------------------------------
    def start_floor(self) -> None:
        """bench/floor.py against this stack's Triton, on two free ports; returns once it answers."""
        http_port, grpc_port = free_port(), free_port()
        log_path = self.tmp / "floor.log"
        with open(log_path, "wb") as log:
            self.floor = subprocess.Popen(
                parent.ending_with_us([sys.executable, "-m", "bench.floor", self.triton.grpc_target, str(http_port),
                                       str(grpc_port)]),
                cwd=ROOT, env=floor_env(), stdout=log, stderr=subprocess.STDOUT)
        self.floor_http, self.floor_grpc = f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
        try:
            wait_http(f"{self.floor_http}/ready", timeout=60, proc=self.floor)
        except Exception:
            self.stop_floor()
            raise RuntimeError(f"the floor did not start:\n{log_path.read_text(errors='replace')[-4000:]}") from None
        self.floor_pids = procstat.process_tree(self.floor.pid)
        pin(self.floor_pids, "BENCH_CPUS_GATEWAY")

    def stop_floor(self) -> None:
        if self.floor is None:
            return
        proc, self.floor, self.floor_pids = self.floor, None, []
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        self._keep_log(self.tmp / "floor.log", "floor.log")

    # -- teardown -------------------------------------------------------------------------------
    def _keep_log(self, path: Path, name: str) -> None:
        if self.log_dir is None or not path.exists():
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, self.log_dir / name)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            try:
                self.stop_floor()
            finally:
                self.stop_gateway()
        finally:
            try:
                if self.triton is not None:
                    self.triton.stop()
                    self._keep_log(self.triton.log_path, "triton.log")
                    self.triton = None
            finally:
                shutil.rmtree(self.tmp, ignore_errors=True)
                atexit.unregister(self.close)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
