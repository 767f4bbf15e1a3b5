"""User-space instructions per call of one server process, counted by valgrind's callgrind.

CPU time per call on a small shared machine spreads by several per cent from one run to the next,
so a change worth a few per cent needs many interleaved rounds to show (bench/grpc_features.py,
`make bench`). The instructions a process executes for a fixed number of calls vary much less
between runs: a quick figure for what a change does to the gateway's own code and to grpc.aio's and
Sanic's, though not for what it does in the kernel (sockets, wake-ups), which callgrind does not
see, nor for how fast those instructions run. A change it finds should still be confirmed in CPU
time. bench/instructions_check.py keeps three of these figures against a committed baseline.

One part of the count is not the code's: valgrind runs one thread at a time, so a thread that finds
one of gRPC core's mutexes (absl) held by another spins out its whole spin loop before it sleeps,
where on real cores the holder would have let go. How often that happens follows valgrind's
schedule and differs from run to run of the same server; it costs nothing measurable in CPU time.
Hence ``RUNS`` (default 1): the server measured that many times afresh, every figure printed and
the least taken, the run with the fewest such spins.

The server runs under callgrind with instrumentation off; after a warm-up, N1 calls are counted,
then N2 more; (I(N2) - I(N1)) / (N2 - N1) leaves out what does not grow with the calls. Calls come
from CONC callers in this process (not counted): CONC callers of one grpc.aio client, or CONC
HTTP/1.1 keep-alive connections, each sending its next request once the last answer is read.

    .venv/bin/python -m bench.instructions v2|v2s|tf|rest gateway|floor   (needs valgrind: apt install valgrind)
    env: N1=500 N2=2500 CONC=8 RUNS=1 BENCH_GRPC_SERVER=h2|grpc (the gateway's grpc_server)
         BENCH_UPSTREAM_CANCEL=streams|all|none (the gateway's upstream.cancel)

``v2``: the V2 ModelInfer passthrough (floor: bench/floor.py forwarding the bytes); ``v2s``: the
V2 ModelStreamInfer passthrough, CONC streams each writing one message and reading its answer in
turn, counted per message (floor: bench/floor.py forwarding the stream); ``tf``: TF Serving
Predict of four floats (floor: bench/floor.py's Predict); ``rest``: TF Serving REST predict of
the same four floats, ``{"instances": [...]}`` (floor: bench/floor.py's :predict). The gateway
runs with that one listener and the admin port, its timed flushes held (HELD_FLUSHES); every
answer is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import yaml

from bench import cases, grpcload
from bench.stack import Stack, floor_env
from tests.support import ROOT, free_port, gateway_config

# kind: (gRPC method or HTTP path, the gateway's listener)
KINDS = {"v2": (cases.MODEL_INFER, "v2_grpc"),
         "v2s": (cases.MODEL_STREAM_INFER, "v2_grpc"),
         "tf": (cases.TF_PREDICT, "tfserving_grpc"),
         "rest": (cases.TF_PREDICT_PATH, "tfserving_rest")}
REST_BODY = b'{"instances": [1.0, 2.0, 5.0, 7.0]}'
# The gateway, its timed flushes (metrics, access log: at most every tenth of a second) held past the
# measure: under callgrind a call takes long enough that a flush would land every call or two, its
# cost per call set by the machine's speed, where at a real rate it is spread over hundreds.
HELD_FLUSHES = ("import sys; from gateway.observe import logs, metrics; metrics.FLUSH_S = logs.ACCESS_FLUSH_S = 86400.0;"
                " from gateway.cli import main; sys.exit(main(sys.argv[1:]))")


def request(kind: str) -> bytes:
    if kind == "rest":
        return REST_BODY
    return cases._tf_predict_request(cases.SMALL) if kind == "tf" else cases._v2_request(cases.SMALL)


def check(kind: str) -> Callable[[bytes], None]:
    """What a right answer of ``kind`` is (cases.BadAnswer otherwise)."""
    return {"v2": cases._check_v2, "v2s": cases._check_v2_stream, "tf": cases._check_tf_predict,
            "rest": cases._check_predictions(np.array(cases.SMALL_Y))}[kind]


def totals(path: Path) -> int:
    """The ``totals:`` line of a callgrind dump: instructions counted since the last one."""
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ValueError(f"{path}: no totals line")


async def _grpc_calls(kind: str, port: int, n: int, conc: int) -> None:
    """``n`` calls from ``conc`` callers: unary calls, or on ``conc`` streams one message a turn."""
    method, data, ok = KINDS[kind][0], request(kind), check(kind)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=grpcload.CHANNEL_OPTIONS) as channel:
        left = [n]
        if method == cases.MODEL_STREAM_INFER:
            open_stream = channel.stream_stream(method)

            async def caller():
                stream = open_stream(timeout=600)
                while left[0] > 0:
                    left[0] -= 1
                    await stream.write(data)
                    ok(await stream.read())
                await stream.done_writing()
                if await stream.read() is not grpc.aio.EOF:
                    raise RuntimeError("an answer after the last message's")
        else:
            call = channel.unary_unary(method)

            async def caller():
                while left[0] > 0:
                    left[0] -= 1
                    ok(await call(data, timeout=120))

        await asyncio.gather(*(caller() for _ in range(conc)))


async def _http_calls(kind: str, port: int, n: int, conc: int) -> None:
    """``n`` POSTs from ``conc`` HTTP/1.1 keep-alive connections, each sending its next request once
    it has read the last answer (status line, headers, a Content-Length body)."""
    path, body, ok = KINDS[kind][0], request(kind), check(kind)
    message = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    left = [n]

    async def caller():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left[0] > 0:
                left[0] -= 1
                writer.write(message)
                status = await reader.readline()
                length = None
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if not status.startswith(b"HTTP/1.1 200 ") or length is None:
                    raise cases.BadAnswer(f"{path} answered {status!r} (Content-Length {length})")
                ok(await reader.readexactly(length))
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    await asyncio.gather(*(caller() for _ in range(conc)))


def calls(kind: str, port: int, n: int, conc: int) -> None:
    asyncio.run((_http_calls if kind == "rest" else _grpc_calls)(kind, port, n, conc))


@contextlib.contextmanager
def triton_target(triton: str | None) -> Iterator[str]:
    """``triton`` itself, or a Triton of its own (bench/stack.py) for as long as the block runs."""
    if triton is not None:
        yield triton
        return
    with Stack() as stack:
        yield stack.start_triton().grpc_target


def call_counts(n1: int = 500, n2: int = 2500, conc: int = 8) -> tuple[int, int, int]:
    """(N1, N2, CONC): the environment's, else these."""
    return int(os.environ.get("N1", n1)), int(os.environ.get("N2", n2)), int(os.environ.get("CONC", conc))


def measure(kind: str, server: str, triton: str | None = None, n: tuple[int, int, int] | None = None) -> float:
    """Instructions per call of ``kind`` in ``server`` (gateway or floor) under callgrind, sent to
    the Triton at ``triton`` (host:port; None: one started for this measure and stopped after);
    ``n``: (N1, N2, CONC), by default ``call_counts()``."""
    listener = KINDS[kind][1]
    n1, n2, conc = n or call_counts()
    with triton_target(triton) as target, tempfile.TemporaryDirectory(prefix="gateway-instructions-") as tmp:
        port, out = free_port(), Path(tmp) / "callgrind.out"
        if server == "gateway":
            extra = {"log_level": "WARNING"}
            if os.environ.get("BENCH_GRPC_SERVER"):  # h2|grpc: the gateway's grpc_server (unset: its default)
                extra["grpc_server"] = os.environ["BENCH_GRPC_SERVER"]
            cfg = gateway_config(target, {listener: port, "admin_http": free_port()}, extra)
            if os.environ.get("BENCH_UPSTREAM_CANCEL"):  # streams|all|none: the gateway's upstream.cancel
                cfg["upstream"]["cancel"] = os.environ["BENCH_UPSTREAM_CANCEL"]
            (out.parent / "gateway.yaml").write_text(yaml.safe_dump(cfg))
            cmd = [sys.executable, "-c", HELD_FLUSHES, "serve", "--config", str(out.parent / "gateway.yaml")]
            env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        else:
            http_port, grpc_port = (port, free_port()) if kind == "rest" else (free_port(), port)
            cmd = [sys.executable, "-m", "bench.floor", target, str(http_port), str(grpc_port)]
            env = floor_env()
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                                 *cmd], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 480  # under valgrind, start-up takes a while (minutes on a busy machine)
            while True:
                try:
                    calls(kind, port, 1, 1)
                    break
                except (grpc.aio.AioRpcError, OSError, EOFError, cases.BadAnswer):  # not serving yet
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"{server} did not answer under valgrind") from None
                    time.sleep(1)
            calls(kind, port, 300, conc)  # warm
            control = ["callgrind_control"]
            subprocess.run([*control, "-i", "on", str(proc.pid)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            counts = []
            for n in (n1, n2):
                calls(kind, port, n, conc)
                subprocess.run([*control, "-d", str(proc.pid)], check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
                counts.append(totals(Path(f"{out}.{len(counts) + 1}")))
        finally:
            proc.terminate()
            proc.wait(60)
    return (counts[1] - counts[0]) / (n2 - n1)


def valgrind_missing() -> str | None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return "valgrind is not installed (apt install valgrind)"
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in KINDS or argv[1] not in ("gateway", "floor"):
        print(__doc__)
        return 2
    if missing := valgrind_missing():
        print(missing)
        return 2
    with triton_target(None) as target:
        runs = [measure(*argv, triton=target) for _ in range(max(1, int(os.environ.get("RUNS", 1))))]
    each = f" (runs: {', '.join(f'{r:,.0f}' for r in runs)})" if len(runs) > 1 else ""
    print(f"{argv[0]} {argv[1]}: {min(runs):,.0f} instructions a call{each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
