"""Builds every listener from settings and runs one worker. The only module that lists dialects.

A dialect plugs in through one function:
  HTTP:  build(ctx: GatewayContext) -> sanic.Sanic
  gRPC:  register(server: grpc.aio.Server, ctx: GatewayContext) -> None
Each enabled listener gets its own port: its own Sanic app, or its own grpc.aio server.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from gateway.context import GatewayContext
from gateway.settings import Listener, Settings
from gateway.upstream import TritonUpstream

log = logging.getLogger("gateway")

HTTP_LISTENERS: dict[str, str] = {
    "tfserving_rest": "gateway.dialects.tfserving.http:build",
    "grps_http": "gateway.dialects.grps.http:build",
    "mindie_http": "gateway.dialects.mindie.http:build",
    "admin_http": "gateway.admin:build",
}
GRPC_LISTENERS: dict[str, str] = {
    "v2_grpc": "gateway.dialects.v2.passthrough:register",
    "tfserving_grpc": "gateway.dialects.tfserving.grpc:register",
    "grps_grpc": "gateway.dialects.grps.grpc:register",
}


def _load(target: str) -> Callable:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def grpc_server_options(settings: Settings, reuse_port: bool) -> list[tuple[str, int]]:
    size = settings.limits.max_request_bytes
    return [
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", size if size < 2**31 else -1),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


def bind_socket(listener: Listener, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((listener.host, listener.port))
    sock.set_inheritable(True)
    return sock


@dataclass
class Worker:
    """All listeners of one process, started and stopped together."""

    settings: Settings
    reuse_port: bool = False
    ctx: GatewayContext | None = None
    _http: list = field(default_factory=list)
    _grpc: list = field(default_factory=list)

    async def start(self) -> GatewayContext:
        s = self.settings
        upstream = TritonUpstream(
            s.upstream.grpc,
            default_timeout=s.upstream.timeout_s,
            cache_ttl=s.upstream.cache_ttl_s,
            retries=s.upstream.retries,
            lb_policy=s.upstream.lb_policy,
        )
        await upstream.connect()
        self.ctx = ctx = GatewayContext(s, upstream)
        try:
            for name, target in GRPC_LISTENERS.items():
                lst = s.listener(name)
                if lst.enabled:
                    await self._start_grpc(lst, _load(target), ctx)
            for name, target in HTTP_LISTENERS.items():
                lst = s.listener(name)
                if lst.enabled:
                    await self._start_http(lst, _load(target), ctx)
        except BaseException:
            await self.stop()
            raise
        ctx.started.set()
        return ctx

    async def _start_grpc(self, lst: Listener, register: Callable, ctx: GatewayContext) -> None:
        server = grpc.aio.server(options=grpc_server_options(self.settings, self.reuse_port))
        register(server, ctx)
        host = f"[{lst.host}]" if ":" in lst.host else lst.host
        try:
            bound = server.add_insecure_port(f"{host}:{lst.port}")
        except RuntimeError:
            bound = 0
        if not bound:
            raise OSError(f"{lst.name}: cannot listen on {lst.host}:{lst.port} (address in use?)")
        await server.start()
        self._grpc.append(server)

    async def _start_http(self, lst: Listener, build: Callable, ctx: GatewayContext) -> None:
        app = build(ctx)
        sock = bind_socket(lst, self.reuse_port)
        srv = await app.create_server(sock=sock, return_asyncio_server=True, access_log=False)
        await srv.startup()
        await srv.before_start()
        await srv.after_start()
        self._http.append(srv)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let requests in flight finish (up to ``grace`` s), then close everything."""
        grpc_stopped = asyncio.gather(*(s.stop(grace) for s in self._grpc), return_exceptions=True)
        for srv in self._http:
            await _quietly(srv.before_stop())
            srv.close()  # no new connections
        await self._drain(grace)
        for srv in self._http:
            for conn in list(srv.connections):
                if not conn.close_if_idle():
                    conn.close()
            await _quietly(srv.after_stop())
        await grpc_stopped
        self._grpc.clear()
        self._http.clear()
        if self.ctx is not None:
            await self.ctx.upstream.close()

    async def _drain(self, grace: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.ctx is not None and self.ctx.inflight and loop.time() < deadline:
            await asyncio.sleep(0.05)


async def _quietly(coro) -> None:
    try:
        await coro
    except Exception:  # noqa: BLE001 - best effort on shutdown
        log.exception("error while stopping an HTTP listener")


def listener_lines(settings: Settings) -> list[str]:
    return [
        f"{lst.description:<70} {lst.host}:{lst.port}"
        for lst in settings.listeners.values()
        if lst.enabled
    ]
