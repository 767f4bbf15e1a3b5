"""Starting local processes: the bundled CPU Triton for ``gateway local``, and the MindIE PD cluster
of gateway processes for ``gateway run-pd`` (``make run-pd``).

Both stop what they started on Ctrl-C or SIGTERM, also while Triton is still starting, and when
their parent (``make``) dies, through Linux's PR_SET_PDEATHSIG: make does not pass SIGTERM on to
its children, so without it a supervisor stopping make would leave Triton and its stubs running.

The PD cluster on 127.0.0.1 (``run_pd``):

    coordinator   :1025        P instances   :2025, :2026        D instances   :3025, :3026
    admin (/health, /metrics) of each: :9190 (coordinator), :9191.. (P, then D)

Each instance is a ``gateway serve`` process with only its MindIE listener and its admin
listener, configured by a YAML file written to ``.run/pd/``, in front of the one local Triton.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from gateway.dialects import LISTENERS
from gateway.local import localtriton, parent
from gateway.settings import Settings

PD_PORTS = (1025, 2025, 2026, 3025, 3026)  # coordinator, P1, P2, D1, D2
PD_ADMIN_BASE = 9190


def raise_exit(signum, _frame) -> None:
    """A signal handler: SIGTERM as SystemExit, so that ``finally`` blocks stop what was started."""
    raise SystemExit(128 + signum)


PARENT_GONE = ("the process that started it exited, so it stops too (on purpose: an interrupted `make run` "
               "leaves no Triton behind); for a server that outlives its shell, run `gateway serve` under a "
               "supervisor: systemd, compose or Kubernetes (docs/deploy.md)")


def exit_with_parent() -> int:
    """Get SIGTERM when the starting process dies (Linux PR_SET_PDEATHSIG), for this process itself.
    Returns the parent's pid, for ``say_if_parent_gone`` at the end."""
    import os

    ppid = os.getppid()
    gone = parent.die_with(ppid)
    if gone or (gone is not None and ppid == 1):  # it died before prctl took effect (or was never there: setsid -f)
        print(f"stopping: {PARENT_GONE}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
    return ppid


def say_if_parent_gone(ppid: int) -> None:
    """Why a stop came when nobody asked for one: the process that started this one (``ppid``, from
    ``exit_with_parent``) is gone, and PR_SET_PDEATHSIG sent the SIGTERM."""
    import os

    if os.getppid() != ppid:
        print(f"stopped: {PARENT_GONE}", file=sys.stderr, flush=True)


def start_triton(settings: Settings, on_progress: Callable[[str], None] | None = None,
                 label: str = "Triton (local, CPU) KServe V2 gRPC / HTTP"):
    """The bundled tritonserver of ``local_triton``, started and ready; None (said on stderr) when it
    cannot start. Prints one line with its addresses."""
    try:
        tp = localtriton.start(settings.local_triton, Path.cwd(), on_progress=on_progress)
    except localtriton.TritonStartError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return None
    print(f"{label:<70} {tp.grpc_target} / {tp.http_url}", flush=True)
    return tp


def wait_health(url: str, proc: subprocess.Popen | None = None, timeout: float = 60.0, stop: list | None = None) -> None:
    """Until ``url`` answers 200; RuntimeError when ``proc`` exits first, TimeoutError after ``timeout``
    (returns early once ``stop`` holds anything: the caller stops everything)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    if not stop:
        raise TimeoutError(f"{url} not healthy after {timeout}s")


# -- the MindIE PD cluster ------------------------------------------------------------------------
def pd_instance_config(triton: str, role: str, port: int, admin_port: int, pd: dict) -> dict:
    listeners = {name: {"enabled": False} for name in LISTENERS}
    listeners["mindie_http"] = {"host": "127.0.0.1", "port": port}
    if admin_port:
        listeners["admin_http"] = {"host": "127.0.0.1", "port": admin_port}
    return {"upstream": {"grpc": triton, "timeout_s": 60}, "listeners": listeners, "log_level": "INFO",
            "dialects": {"mindie": {"pd": {"role": role, **pd}}}}


def pd_plan(triton: str, ports: list[int], admin_base: int) -> list[tuple[str, dict]]:
    """(name, settings) of each instance, in start order: P and D first, the coordinator last."""
    coord, p1, p2, d1, d2 = ports
    addr = [f"127.0.0.1:{p}" for p in (p1, p2, d1, d2)]
    roles = [("prefill-1", "prefill", p1, {}), ("prefill-2", "prefill", p2, {}),
             ("decode-1", "decode", d1, {}), ("decode-2", "decode", d2, {}),
             ("coordinator", "coordinator", coord, {"prefill": addr[:2], "decode": addr[2:]})]
    out = []
    for i, (name, role, port, pd) in enumerate(roles):
        admin = admin_base + (0 if role == "coordinator" else i + 1) if admin_base else 0
        out.append((name, pd_instance_config(triton, role, port, admin, pd)))
    return out


def run_pd(settings: Settings, ports: list[int], admin_base: int) -> int:
    """Triton, then each instance of ``pd_plan`` as a ``gateway serve`` process; until Ctrl-C/SIGTERM."""
    signal.signal(signal.SIGTERM, raise_exit)
    ppid = exit_with_parent()
    workdir = Path(".run/pd").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    tp = None
    stop: list[int] = []  # Ctrl-C / SIGTERM once Triton runs: a clean stop, also while instances start
    try:
        tp = start_triton(settings, label="Triton (local, CPU) KServe V2 gRPC / HTTP")
        if tp is None:
            return 1
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        for name, cfg in pd_plan(tp.grpc_target, ports, admin_base):
            if stop:
                return 0
            path = workdir / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the child's life
            proc = subprocess.Popen(parent.ending_with_us([sys.executable, "-m", "gateway", "serve", "--config", str(path)]),
                                    stdout=log, stderr=subprocess.STDOUT)
            procs.append(proc)
            port = cfg["listeners"]["mindie_http"]["port"]
            wait_health(f"http://127.0.0.1:{port}/health", proc, stop=stop)
            admin = cfg["listeners"]["admin_http"].get("port")
            print(f"{'MindIE PD ' + name:<40} 127.0.0.1:{port}  (admin {f':{admin}' if admin else 'off'}, "
                  f"log {workdir / (name + '.log')})", flush=True)
        while not stop:
            if any(p.poll() is not None for p in procs):
                print("error: an instance exited; stopping", file=sys.stderr)
                return 1
            time.sleep(0.3)
        return 0
    except (RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if tp is not None:
            tp.stop()
        print("stopped the PD instances and Triton", file=sys.stderr, flush=True)
        say_if_parent_gone(ppid)
