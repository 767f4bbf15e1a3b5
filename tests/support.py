"""Helpers to start a local Triton and the gateway as processes (tests and benchmarks)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

from gateway.local import launch, parent

ROOT = Path(__file__).resolve().parent.parent


_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port, never one this process handed out before (the kernel may repeat them)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


@contextlib.asynccontextmanager
async def grpc_and_h2(handler, options: tuple = ()):
    """(a grpc.aio channel, an h2call.Channel) to a real grpc.aio server in this process serving
    ``handler`` (a generic handler) on a free port; ``options`` for the server and the channel."""
    import grpc

    from gateway.h2 import client as h2call

    server = grpc.aio.server(options=list(options))
    server.add_generic_rpc_handlers((handler,))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=list(options))
    channel.address = f"127.0.0.1:{port}"
    h2 = h2call.Channel([("127.0.0.1", port)])
    try:
        yield channel, h2
    finally:
        await h2.close()
        await channel.close()
        await server.stop(None)


def wait_http(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """``url`` answers 200 (gateway.local.launch.wait_health, which ``gateway run-pd`` uses too)."""
    launch.wait_health(url, proc, timeout)


@dataclass
class GatewayProcess:
    proc: subprocess.Popen
    ports: dict[str, int]
    config_path: Path
    log_path: Path
    listening: set[int] = field(default_factory=set)  # the enabled listeners' ports

    def port(self, listener: str) -> int:
        return self.ports[listener]

    def target(self, listener: str) -> str:
        """host:port, for gRPC clients."""
        return f"127.0.0.1:{self.ports[listener]}"

    def url(self, listener: str) -> str:
        """http://host:port, for HTTP clients."""
        return f"http://127.0.0.1:{self.ports[listener]}"

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def worker_settings(ports: dict[str, int], upstream: str, **extra: str):
    """Settings for an in-process Worker: only the listeners in ``ports`` enabled, on 127.0.0.1.

    Built through the environment rule (``GATEWAY__...``), as an operator would override a file;
    ``extra`` adds more variables, e.g. ``LIMITS__MAX_INFLIGHT="1"``. The upstream's shared-memory
    region is off (the fakes of Triton these tests run do not serve its shared-memory extension,
    and record the calls they get); ``UPSTREAM__SHARED_MEMORY__ENABLED="auto"`` turns it back on.
    """
    from gateway import config
    from gateway.dialects import LISTENERS

    env = {"GATEWAY__UPSTREAM__GRPC": upstream, "GATEWAY__HOST": "127.0.0.1",
           "GATEWAY__UPSTREAM__SHARED_MEMORY__ENABLED": "false"}
    for name in LISTENERS:
        env[f"GATEWAY__LISTENERS__{name.upper()}__ENABLED"] = "true" if name in ports else "false"
        if name in ports:
            env[f"GATEWAY__LISTENERS__{name.upper()}__PORT"] = str(ports[name])
    env.update({f"GATEWAY__{k}": v for k, v in extra.items()})
    return config.load(None, env=env)


@contextlib.asynccontextmanager
async def running_worker(ports: dict[str, int], upstream: str, *, upstream_factory=None, grace: float = 0.1,
                         **extra: str):
    """(worker, its GatewayContext): an in-process Worker on ``worker_settings(ports, upstream, **extra)``
    (``upstream_factory``: a fake Upstream instead of a client of ``upstream``), stopped at the end."""
    from gateway.app import Worker

    worker = Worker(worker_settings(ports, upstream, **extra), upstream_factory=upstream_factory)
    ctx = await worker.start()
    try:
        yield worker, ctx
    finally:
        await worker.stop(grace=grace)


def http_call(base: str, method: str, path: str, body: bytes | str | None = None, headers: dict | None = None,
              timeout: float = 60) -> tuple[int, str | None, bytes]:
    """(status, Content-Type, body) of one HTTP call, error statuses included (no exception)."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def gateway_config(triton_target: str, ports: dict[str, int], extra: dict | None = None) -> dict:
    """A gateway's settings with the listeners of ``ports`` on 127.0.0.1; every other listener of the
    catalogue is disabled (never left on its default port, which another process may hold)."""
    from gateway.dialects import LISTENERS

    listeners: dict = {name: {"enabled": False} for name in LISTENERS}
    listeners.update({name: {"host": "127.0.0.1", "port": port} for name, port in ports.items()})
    cfg = {
        "upstream": {"grpc": triton_target, "timeout_s": 30},
        "listeners": listeners,
        "log_level": "INFO",
    }
    for key, value in (extra or {}).items():
        cfg[key] = value
    return cfg


def start_gateway(config: dict, tmp: Path) -> GatewayProcess:
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    log_path = tmp / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            parent.ending_with_us([sys.executable, "-m", "gateway", "serve", "--config", str(path)]),
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    ports = {name: lst["port"] for name, lst in config["listeners"].items() if "port" in lst}
    listening = {lst["port"] for lst in config["listeners"].values() if "port" in lst and lst.get("enabled", True)}
    gw = GatewayProcess(proc, ports, path, log_path, listening)
    try:
        wait_http(f"http://127.0.0.1:{ports['admin_http']}/health", timeout=60, proc=proc)
        workers = config.get("workers", 1)
        if workers == "auto":  # the gateway counts as the child would: the same affinity and cgroup
            from gateway.process import cpus

            workers = cpus.usable()
        if workers > 1:  # the first worker up answers /health; wait for every one
            wait_workers_serving(gw, workers, timeout=60)
    except Exception:
        proc.kill()
        raise RuntimeError(f"gateway did not start:\n{gw.log_tail()}") from None
    return gw


def serving_workers(gw: GatewayProcess) -> set[int]:
    """The pids of the gateway's worker processes that listen on every enabled listener's port
    (a worker binds them all, then serves; at any log level)."""
    want = gw.listening
    out = set()
    for child in psutil.Process(gw.proc.pid).children():
        try:
            ports = {c.laddr.port for c in child.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:  # exited between the listing and the look
            continue
        if want <= ports:
            out.add(child.pid)
    return out


def wait_workers_serving(gw: GatewayProcess, count: int, timeout: float = 60.0, pids: set[int] | None = None) -> None:
    """Until ``count`` workers (or every pid of ``pids``) listen on every enabled listener's port."""
    deadline = time.monotonic() + timeout
    while True:
        up = serving_workers(gw)
        if (pids <= up) if pids is not None else len(up) >= count:
            return
        if gw.proc.poll() is not None:
            raise RuntimeError(f"gateway exited with code {gw.proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(up)} of {count} workers serving after {timeout:.0f} s")
        time.sleep(0.1)


def stop_gateway(gw: GatewayProcess) -> None:
    gw.proc.terminate()
    try:
        gw.proc.wait(15)
    except subprocess.TimeoutExpired:
        gw.proc.kill()
        gw.proc.wait(5)


class LaneSpy:
    """How many requests the HTTP fast lane (gateway/edge/fastlane.py) has taken in this process (its
    ``_run``); a request with the id ``gated`` waits in the lane until ``release`` is set
    (``entered`` says it got there)."""

    def __init__(self):
        self.taken = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def held_behind(self, port: int, gated: bytes, held: bytes, read) -> list[bytes]:
        """``gated`` (a request with the id ``gated``) written on a new connection to ``port``; once it
        waits in the lane, ``held`` written behind it; then the gate opened, and ``read(reader)``'s
        answers."""
        self.entered.clear()
        self.release.clear()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(gated)
            await asyncio.wait_for(self.entered.wait(), 10)
            writer.write(held)
            await asyncio.sleep(0.2)  # held meanwhile (else it comes after the answer: the same bytes)
            self.release.set()
            await writer.drain()
            return await read(reader)
        finally:
            writer.close()


def spy_on_lane(monkeypatch) -> LaneSpy:
    from gateway.edge.fastlane import FastLane

    spy = LaneSpy()
    run = FastLane._run

    async def counted(self, handler, request, params):
        spy.taken += 1
        if request.headers.get("x-request-id") == "gated":
            spy.entered.set()
            await spy.release.wait()
        await run(self, handler, request, params)

    monkeypatch.setattr(FastLane, "_run", counted)
    return spy
