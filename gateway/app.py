"""Builds every listener of one worker from the catalogue and the settings, and runs them.

For each dialect with an enabled listener: its state is opened once (``Dialect.open``), then each
of its listeners gets its own port (a Sanic app or a grpc.aio server) and an ``Edge``, and the
listener's ``attach`` adds its handlers behind that edge.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from gateway import access
from gateway.context import GatewayContext
from gateway.core import bounded
from gateway.core.errors import GatewayError
from gateway.dialect import Dialect, load
from gateway.dialects import CATALOGUE
from gateway.edge import Edge, sanicx
from gateway.edge.fastlane import FastLane
from gateway.edge.http import make_app
from gateway.h2 import server as h2serve
from gateway.observe import fastpaths, metrics, tracing
from gateway.ops import grpchealth
from gateway.process import malloc
from gateway.settings import Listener, Settings
from gateway.upstream import Upstream, cancel, from_settings, h2_off

log = logging.getLogger("gateway")


def grpc_server_options(settings: Settings, reuse_port: bool) -> list[tuple[str, int]]:
    size = settings.limits.max_request_bytes
    return [
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", size if size < 2**31 else -1),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.max_concurrent_streams", settings.limits.max_grpc_streams),  # per connection
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
    upstream_factory: Callable[[Settings], Upstream] | None = None  # tests pass a fake
    ctx: GatewayContext | None = None
    health: grpchealth.Health | None = None  # grpc.health.v1 on every gRPC listener
    _http: list = field(default_factory=list)
    _grpc: list = field(default_factory=list)
    _states: list = field(default_factory=list)
    _version_check: asyncio.Task | None = None

    def _upstream(self) -> Upstream:
        if self.upstream_factory is not None:
            return self.upstream_factory(self.settings)
        return from_settings(self.settings)

    async def start(self) -> GatewayContext:
        malloc.keep_large_buffers()  # large bodies without page faults on every request (gateway/process/malloc.py)
        bounded.configure(self.settings.limits)  # the limits pure decoding functions read
        tracing.configure(self.settings.tracing)  # before any Edge exists (off: nothing)
        upstream = self._upstream()
        await upstream.connect()
        self.ctx = ctx = GatewayContext(self.settings, upstream)
        self.health = grpchealth.Health(ctx)
        try:
            for dialect in CATALOGUE:
                listeners = [self.settings.listener(spec.name) for spec in dialect.listeners]
                if any(lst.enabled for lst in listeners):
                    await self._start_dialect(dialect, listeners, ctx)
        except BaseException:
            await self.stop()
            raise
        if self._http:
            sanicx.touch_up(self._http[0].app)
        turned_off = {} if self.settings.http_fast_path else {"http_fast_lane": "http_fast_path: false"}
        if (why := h2_off(self.settings)) is not None:
            turned_off["upstream_h2"] = why
        if self.settings.grpc_server != "h2":
            turned_off["grpc_server_h2"] = f"grpc_server: {self.settings.grpc_server}"
        elif tracing.interceptors():
            turned_off["grpc_server_h2"] = "tracing.enabled"
        fastpaths.announce(log, metrics.FAST_PATH, turned_off)
        self._version_check = asyncio.ensure_future(_warn_on_triton_version(upstream, self.settings.upstream.cancel))
        ctx.started.set()
        return ctx

    async def _start_dialect(self, dialect: Dialect, listeners: list[Listener], ctx: GatewayContext) -> None:
        config = self.settings.dialect(dialect.name)
        models = getattr(config, "triton_models", ())  # the dialect sees only these models (empty: all)
        scope = access.ModelScope(ctx.upstream, models) if models else None
        state = load(dialect.open)(ctx.for_dialect(scope), config)
        self._states.append(state)
        if hasattr(state, "start"):
            await state.start()
        for spec, lst in zip(dialect.listeners, listeners, strict=True):
            if not lst.enabled:
                continue
            edge = Edge(dialect.name, lst.name, state.errors, ctx.admission, lst.timeout_s, lst.stream_timeout_s,
                        keys=access.listener_keys(lst), bodies=ctx.upstream.body_buffer,
                        generated_id_back=spec.generated_id_back)
            attach = load(spec.attach)
            if lst.transport == "grpc":
                await self._start_grpc(lst, attach, edge, state)
            else:
                await self._start_http(lst, attach, edge, state)

    async def _start_grpc(self, lst: Listener, attach: Callable, edge: Edge, state) -> None:
        interceptors = tracing.interceptors()
        if self.settings.grpc_server == "h2" and h2serve.ON and lst.tls is None and not interceptors:
            return await self._start_h2(lst, attach, edge, state)
        server = grpc.aio.server(options=grpc_server_options(self.settings, self.reuse_port),
                                 interceptors=interceptors or None)
        services = grpchealth.ServiceNames(server)
        attach(services, edge, state)
        self.health.attach(services, list(services.names))
        host = f"[{lst.host}]" if ":" in lst.host else lst.host
        try:
            if lst.tls is not None:
                bound = server.add_secure_port(f"{host}:{lst.port}", access.server_credentials(lst.tls, lst.name))
            else:
                bound = server.add_insecure_port(f"{host}:{lst.port}")
        except RuntimeError:
            bound = 0
        if not bound:
            raise OSError(f"{lst.name}: cannot listen on {lst.host}:{lst.port} (address in use?)")
        await server.start()
        self._grpc.append(server)

    async def _start_h2(self, lst: Listener, attach: Callable, edge: Edge, state) -> None:
        """A plain-TCP gRPC listener served on this loop (gateway/h2/server.py), with what
        ``grpc_server_options`` asks of grpc.aio's server: the message limit, the streams per
        connection, the keepalive policy; SO_REUSEPORT with the socket."""
        options = dict(grpc_server_options(self.settings, self.reuse_port))
        size = options["grpc.max_receive_message_length"]
        server = h2serve.Server(size if size >= 0 else None, options["grpc.max_concurrent_streams"],
                                options["grpc.http2.min_ping_interval_without_data_ms"] / 1000,
                                bool(options["grpc.keepalive_permit_without_calls"]),
                                cancel.unary_cancelled(self.settings.upstream.cancel))
        edge.unary_outlives_client = not server.cancel_unary  # upstream calls need no shield of their own
        services = grpchealth.ServiceNames(server)
        attach(services, edge, state)
        self.health.attach(services, list(services.names))
        try:
            sock = bind_socket(lst, self.reuse_port)
        except OSError as exc:
            raise OSError(f"{lst.name}: cannot listen on {lst.host}:{lst.port} (address in use?)") from exc
        await server.start(sock)
        self._grpc.append(server)

    async def _start_http(self, lst: Listener, attach: Callable, edge: Edge, state) -> None:
        app = make_app(lst.name, self.settings, edge)
        attach(app, edge, state)
        sock = bind_socket(lst, self.reuse_port)
        tls = access.server_ssl(lst.tls, lst.name) if lst.tls is not None else None
        fast = self.settings.http_fast_path and sanicx.FAST_LANE
        protocol = FastLane if fast else None  # None: sanic's HttpProtocol
        srv = await app.create_server(sock=sock, ssl=tls, return_asyncio_server=True, access_log=False,
                                      protocol=protocol)
        await srv.startup()
        await srv.before_start()
        await srv.after_start()
        self._http.append(srv)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let requests in flight finish (up to ``grace`` s), then close everything."""
        if self.ctx is not None:
            self.ctx.draining = True
        if self._version_check is not None:
            self._version_check.cancel()
        if self.health is not None:
            await self.health.drain()  # NOT_SERVING before the listeners stop
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
        for state in reversed(self._states):
            if hasattr(state, "close"):
                await _quietly(state.close())
        self._states.clear()
        if self.ctx is not None:
            await self.ctx.upstream.close()
        tracing.shutdown()  # the spans still pending are exported

    async def _drain(self, grace: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.ctx is not None and self.ctx.inflight and loop.time() < deadline:
            await asyncio.sleep(0.05)


def freeze_heap() -> None:
    """Move what start-up built (modules, classes, settings, listeners: ~80,000 objects) out of the
    garbage collector's reach (``gc.freeze``), after one collection of start-up's garbage. Without
    it each full collection walks all of them, the worker holding everything up meanwhile, every
    few tens of thousands of requests (gc.callbacks under a TF REST load shows it); with it a
    full collection walks only what requests left behind. Objects made later are collected as usual.
    A worker process calls it once it serves (gateway/cli.py), not ``Worker.start``, which tests call
    many times in one process."""
    import gc

    gc.collect()
    gc.freeze()


async def _warn_on_triton_version(upstream: Upstream, mode: str, first_wait: float = 1.0) -> None:
    """Triton's version read from its server metadata once it answers (it may start after the
    gateway), and a warning when it is a release known to crash when a call is cancelled
    (gateway/upstream/cancel.py, ``upstream.cancel``)."""
    wait = first_wait
    while True:
        try:
            meta = await upstream.server_metadata()
            break
        except GatewayError:  # Triton not up yet: asked again later
            await asyncio.sleep(wait)
            wait = min(wait * 2, 30.0)
        except Exception:  # noqa: BLE001 - an upstream without metadata (a test's fake): nothing to say
            return
    version = meta.get("version", "") if isinstance(meta, dict) else ""
    if (warning := cancel.crash_warning(version, mode)) is not None:
        log.warning(warning)


async def _quietly(coro) -> None:
    try:
        await coro
    except Exception:  # noqa: BLE001 - best effort on shutdown
        log.exception("error while stopping a listener")


def listener_lines(settings: Settings) -> list[str]:
    return [
        f"{lst.description:<70} {lst.host}:{lst.port}"
        for lst in settings.listeners.values()
        if lst.enabled
    ]
