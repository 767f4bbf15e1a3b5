"""Start-up checks that turn the usual failures into one sentence saying what failed and what to do.

* a configuration that cannot run with several workers (gateway/process/shared.py), naming the field;
* a port already in use: which port, which setting holds it, and how to change it;
* the upstream Triton unreachable (``gateway serve``): a warning naming the target and the setting
  (the gateway still starts: it reconnects by itself and answers UNAVAILABLE meanwhile).

``gateway local`` (gateway/local/localtriton.py) uses the same port message for Triton's own ports.
"""

from __future__ import annotations

import errno
import socket
import sys

from gateway.settings import ENV_PREFIX, Settings, upstream_addresses


def env_name(setting: str) -> str:
    """The environment variable that overrides a dotted setting (``listeners.x.port`` → GATEWAY__LISTENERS__X__PORT)."""
    return ENV_PREFIX + "__".join(part.upper() for part in setting.split("."))


def port_in_use(host: str, port: int) -> bool:
    """True when ``host:port`` cannot be bound because something listens there (as the gateway binds)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def port_in_use_message(host: str, port: int, setting: str, what: str) -> str:
    return (
        f"port {port} on {host} ({what}, setting `{setting}`) is already in use: stop the process that "
        f"holds it (`ss -ltnp 'sport = :{port}'` shows it; often an earlier `make run` still running) or "
        f"choose another port: `{setting}` in the config file, or {env_name(setting)}=<port>"
    )


def listener_port_problems(settings: Settings) -> list[str]:
    """One message per enabled listener whose port is taken."""
    return [
        port_in_use_message(lst.host, lst.port, f"listeners.{lst.name}.port", lst.description)
        for lst in settings.listeners.values()
        if lst.enabled and port_in_use(lst.host, lst.port)
    ]


def upstream_problem(target: str, timeout: float = 3.0, credentials=None, options: tuple = ()) -> str | None:
    """None when Triton answers ServerReady=true at ``target``; else what is wrong and what to do.

    ``credentials``/``options``: TLS to Triton (``upstream.tls``), as the worker's channel uses them.
    """
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    where = (f"set `upstream.grpc` in the config file (or {env_name('upstream.grpc')}=host:port) to "
             f"Triton's KServe V2 gRPC address")
    if credentials is not None:
        where += " (and check `upstream.tls`)"
        channel = grpc.secure_channel(target, credentials, options=list(options))
    else:
        channel = grpc.insecure_channel(target, options=list(options))
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            if _tcp_open(target):
                return (f"something listens at {target} but does not speak gRPC{' over TLS' if credentials else ''} "
                        f"(is it Triton's HTTP port? its gRPC port is 8001 by default, 18001 for `gateway local`; "
                        f"or does it expect {'plaintext' if credentials else 'TLS, `upstream.tls`'}?): {where}")
            return (f"upstream Triton at {target} is not reachable (no connection in {timeout:.0f} s): start "
                    f"Triton there, or {where}. The gateway starts anyway and answers UNAVAILABLE in each "
                    f"dialect's envelope until Triton is up")
        try:
            ready = service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerReady(
                service_pb2.ServerReadyRequest(), timeout=timeout).ready
        except grpc.RpcError as e:
            return (f"something listens at {target} but does not answer Triton's ServerReady "
                    f"({e.code().name}: {e.details()}): is it Triton's gRPC port (not its HTTP port)? {where}")
        if not ready:
            return (f"upstream Triton at {target} is reachable but not ready (models still loading, or one "
                    f"failed: see Triton's log); the gateway answers UNAVAILABLE until it is")
        return None
    finally:
        channel.close()


def _tcp_open(target: str) -> bool:
    """Whether the target's first address accepts TCP connections (settings.upstream_addresses parses
    every target form the gateway accepts; a unix: target has none)."""
    try:
        addresses = upstream_addresses(target)
    except ValueError:
        return False
    if not addresses:
        return False
    host, port = addresses[0]
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=1.0):
            return True
    except OSError:
        return False


def preflight(settings: Settings, upstream: bool = True, out=None) -> bool:
    """Check the listeners' ports (fatal) and, with ``upstream``, Triton (a warning). Prints to stderr."""
    from gateway.process.shared import single_worker_problems

    out = out or sys.stderr
    problems = single_worker_problems(settings) + listener_port_problems(settings)
    for p in problems:
        print(f"error: {p}", file=out, flush=True)
    if problems:
        return False
    if upstream:
        credentials, options = None, ()
        if settings.upstream.tls is not None:
            from gateway.access import channel_credentials

            credentials, options = channel_credentials(settings.upstream.tls)
        problem = upstream_problem(settings.upstream.grpc, credentials=credentials, options=tuple(options))
        if problem:
            print(f"warning: {problem}", file=out, flush=True)
    return True
