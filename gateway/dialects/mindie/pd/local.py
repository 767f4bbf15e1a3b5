"""``make run-pd``: one local CPU Triton and a PD cluster of gateway processes on 127.0.0.1.

    coordinator   :1025        P instances   :2025, :2026        D instances   :3025, :3026
    admin (/health, /metrics) of each: :9190 (coordinator), :9191.. (P, then D)

Each instance is a ``gateway serve`` process with only its MindIE listener and its admin listener,
configured by a YAML file written to ``.run/pd/``; Triton is the one of ``local_triton`` in the
given config (config/local.yaml). Ctrl-C or SIGTERM stops every instance and Triton; so does the
death of the parent (``make``), through PR_SET_PDEATHSIG, as ``gateway local`` does.

    python -m gateway.dialects.mindie.pd.local --config config/local.yaml [--ports 1025,2025,2026,3025,3026]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from gateway import localtriton
from gateway import settings as settings_mod
from gateway.cli import _exit_with_parent, _raise_exit
from gateway.dialects import LISTENERS


def _die_with_parent() -> None:  # runs in each child before exec
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def instance_config(triton: str, role: str, port: int, admin_port: int, pd: dict) -> dict:
    listeners = {name: {"enabled": False} for name in LISTENERS}
    listeners["mindie_http"] = {"host": "127.0.0.1", "port": port}
    if admin_port:
        listeners["admin_http"] = {"host": "127.0.0.1", "port": admin_port}
    return {"upstream": {"grpc": triton, "timeout_s": 60}, "listeners": listeners, "log_level": "INFO",
            "dialects": {"mindie": {"pd": {"role": role, **pd}}}}


def plan(triton: str, ports: list[int], admin_base: int) -> list[tuple[str, dict]]:
    coord, p1, p2, d1, d2 = ports
    addr = [f"127.0.0.1:{p}" for p in (p1, p2, d1, d2)]
    roles = [("prefill-1", "prefill", p1, {}), ("prefill-2", "prefill", p2, {}),
             ("decode-1", "decode", d1, {}), ("decode-2", "decode", d2, {}),
             ("coordinator", "coordinator", coord, {"prefill": addr[:2], "decode": addr[2:]})]
    out = []
    for i, (name, role, port, pd) in enumerate(roles):
        admin = admin_base + (0 if role == "coordinator" else i + 1) if admin_base else 0
        out.append((name, instance_config(triton, role, port, admin, pd)))
    return out


def _wait_health(url: str, proc: subprocess.Popen, timeout: float = 60.0, stop: list | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    if stop:
        return  # asked to stop while waiting: the caller stops everything
    raise TimeoutError(f"{url} not healthy after {timeout}s")


def run(config: str | None, ports: list[int], admin_base: int) -> int:
    settings = settings_mod.load(config)
    signal.signal(signal.SIGTERM, _raise_exit)
    _exit_with_parent()
    workdir = Path(".run/pd").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    tp = None
    stop: list[int] = []  # Ctrl-C / SIGTERM once Triton runs: a clean stop, also while instances start
    try:
        try:
            tp = localtriton.start(settings.local_triton, Path.cwd())
        except localtriton.TritonStartError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"{'Triton (local, CPU) KServe V2 gRPC':<40} {tp.grpc_target}", flush=True)
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        for name, cfg in plan(tp.grpc_target, ports, admin_base):
            if stop:
                return 0
            path = workdir / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            log = open(workdir / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the child's life
            proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--config", str(path)],
                                    stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            procs.append(proc)
            port = cfg["listeners"]["mindie_http"]["port"]
            _wait_health(f"http://127.0.0.1:{port}/health", proc, stop=stop)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gateway-pd-local", description=__doc__.splitlines()[0])
    parser.add_argument("--config", "-c", help="YAML settings (local_triton); default: built-in defaults")
    parser.add_argument("--ports", default="1025,2025,2026,3025,3026",
                        help="coordinator,P1,P2,D1,D2 MindIE ports (default %(default)s)")
    parser.add_argument("--admin-base", type=int, default=9190, help="first admin port; 0: no admin listeners (default %(default)s)")
    args = parser.parse_args(argv)
    ports = [int(p) for p in args.ports.split(",")]
    if len(ports) != 5:
        parser.error("--ports needs five ports")
    return run(args.config, ports, args.admin_base)


if __name__ == "__main__":
    sys.exit(main())
