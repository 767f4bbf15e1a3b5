"""A gRPC listener to attack: the server the gateway runs for ``grpc_server: h2`` (h2serve's
``Server``) or for ``grpc_server: grpc`` (grpc.aio's), built with the options the gateway's worker
gives it (gateway/app.py ``grpc_server_options``: message limit, streams per connection, keepalive
policy), serving a small echo service, without Triton: what is measured is the HTTP/2 layer alone.

Run as ``python -m tests.h2target --kind h2|grpc [--port N]``: it prints ``PORT <n>`` once
listening and serves until SIGTERM/SIGINT or until its stdin closes (the parent gone), so a
harness that dies leaves nothing behind. Used by tests/contract/test_h2spec.py (h2spec),
tests/fuzz/test_h2frames.py (in process: ``h2_server``) and bench/h2flood.py.

The service ``/h2proof.Echo/``:

    Unary    unary-unary: the request's bytes back
    Stream   unary-stream: the request is 8 bytes, ``count`` and ``size`` (big-endian u32 each):
             ``count`` answers of ``size`` bytes (at most 10,000 of at most 4 MiB)
    Sink     stream-unary: reads every message, answers their total size as 8 bytes
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
from pathlib import Path

import grpc

from gateway.app import grpc_server_options
from gateway.settings import Settings

SERVICE = "h2proof.Echo"
UNARY, STREAM, SINK = (f"/{SERVICE}/{m}" for m in ("Unary", "Stream", "Sink"))
_PAIR = struct.Struct(">II")


def h2serve_module():
    """The module of h2serve's ``Server``."""
    from gateway.h2 import server

    return server


async def _unary(request: bytes, _context) -> bytes:
    return request


async def _stream(request: bytes, _context):
    count, size = _PAIR.unpack(request[:8]) if len(request) >= 8 else (1, 0)
    body = b"x" * min(size, 4 << 20)
    for _ in range(min(count, 10_000)):
        yield body


async def _sink(requests, _context) -> bytes:
    total = 0
    async for message in requests:
        total += len(message)
    return struct.pack(">Q", total)


def echo_handler() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream),
        "Sink": grpc.stream_unary_rpc_method_handler(_sink),
    })


def h2_server():
    """h2serve's Server as gateway/app.py's worker builds it, the echo service added."""
    options = dict(grpc_server_options(Settings(), False))
    size = options["grpc.max_receive_message_length"]
    server = h2serve_module().Server(size if size >= 0 else None, options["grpc.max_concurrent_streams"],
                                     options["grpc.http2.min_ping_interval_without_data_ms"] / 1000,
                                     bool(options["grpc.keepalive_permit_without_calls"]))
    server.add_generic_rpc_handlers((echo_handler(),))
    return server


_SKIP = (type, asyncio.AbstractEventLoop, asyncio.Future, asyncio.Handle, asyncio.AbstractServer,
         grpc.RpcMethodHandler, grpc.GenericRpcHandler, socket.socket)


def held_bytes(root) -> int:
    """The memory an h2serve ``Server`` holds for its connections, whatever its classes name it:
    ``sys.getsizeof`` of every object reachable from them (attributes, containers, buffers; an
    object shared counts once), plus each transport's write buffer. Functions, tasks, loops,
    handlers and sockets are not walked."""
    total, seen, todo = 0, set(), [root]
    while todo and len(seen) < 1_000_000:
        obj = todo.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (bool, _SKIP)) or callable(obj) and not hasattr(obj, "__dict__"):
            continue
        seen.add(id(obj))
        if isinstance(obj, asyncio.BaseTransport):
            if hasattr(obj, "get_write_buffer_size"):
                total += obj.get_write_buffer_size()
            continue
        total += obj.nbytes if isinstance(obj, memoryview) else sys.getsizeof(obj)
        if isinstance(obj, (bytes, bytearray, str, memoryview, int, float)):
            continue
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            todo.extend(obj)
        else:
            if hasattr(obj, "__dict__"):
                todo.append(vars(obj))
            for cls in type(obj).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    todo.append(getattr(obj, name, None))
    return total


def _control(server, stop: asyncio.Event) -> None:
    """A line on stdin: ``stats`` -> ``STATS <held bytes> <connections>`` on stdout; its end: stop."""
    line = sys.stdin.readline()
    if not line:
        return stop.set()
    if line.strip() == "stats":
        conns = getattr(server, "connections", None)  # grpc.aio's server: not ours to walk
        held = held_bytes(list(conns)) if conns is not None else -1
        print(f"STATS {held} {len(conns or ())}", flush=True)


async def serve(kind: str, port: int, ready) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if kind == "h2":
        server = h2_server()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        await server.start(sock)
        bound = server.port
    else:
        server = grpc.aio.server(options=grpc_server_options(Settings(), False))
        server.add_generic_rpc_handlers((echo_handler(),))
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
    ready(bound)
    if stat.S_ISFIFO(os.fstat(0).st_mode):  # a parent's pipe: its lines are asked, its end closed is ours
        loop.add_reader(0, _control, server, stop)
    await stop.wait()
    await server.stop(0.5)


class Target:
    """A listener in a process of its own (``start``): ``port``, ``pid``, ``stop()``."""

    def __init__(self, kind: str, log: Path | str | None = None):
        """``log``: where its stderr goes (appended; default: discarded)."""
        root = Path(__file__).resolve().parent.parent
        self.kind = kind
        with open(log or os.devnull, "a") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.h2target", "--kind", kind], cwd=root,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"h2target {kind} did not start: {line!r}")
        self.port = int(line.split()[1])
        self.pid = self.proc.pid

    def held(self, timeout: float = 10.0) -> tuple[int, int]:
        """(bytes the server holds for its connections, connections): see ``held_bytes``. Raises
        TimeoutError when the listener's loop does not answer within ``timeout`` (hung)."""
        import select

        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the {self.kind} listener's loop did not answer in {timeout} s")
        words = self.proc.stdout.readline().split()
        return int(words[1]), int(words[2])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:  # its loop hung (that is what some probes find)
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("h2", "grpc"), required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    def ready(port: int) -> None:
        print(f"PORT {port}", flush=True)

    asyncio.run(serve(args.kind, args.port, ready))


if __name__ == "__main__":
    main()
