"""User-space instructions per gRPC call of one server process, counted by valgrind's callgrind.

CPU time per call on a small shared machine spreads by ±10 % from one run to the next, so a change
worth 2-5 % needs 40 interleaved rounds to show (bench/grpc_features.py, `make bench`). The
instructions a process executes for a fixed number of calls vary much less between runs: a quick
figure for what a change does to the gateway's own code and to grpc.aio's, though not for what it
does in the kernel (sockets, wake-ups), which callgrind does not see, nor for how fast those
instructions run. A change it finds should still be confirmed in CPU time.

One part of the count is not the code's: valgrind runs one thread at a time, so a thread that finds
one of gRPC core's mutexes (absl) held by another spins out its whole spin loop before it sleeps,
where on real cores the holder would have let go. How often that happens follows valgrind's
schedule: 2 k to 19 k instructions a call between two runs of the same floor (TF Predict,
2026-11-26, tenth session), 13 k a stream message more once the process has any gRPC timer (a
call deadline, keepalive), which costs nothing measurable in CPU time (20 interleaved rounds).
Hence ``RUNS`` (default 1): the server measured that many times afresh, every figure printed and
the least taken, the run with the fewest such spins.

The server runs under callgrind with instrumentation off; after a warm-up, N1 calls are counted,
then N2 more; (I(N2) - I(N1)) / (N2 - N1) leaves out what does not grow with the calls. Calls come
from CONC callers of one grpc.aio client in this process (not counted).

    .venv/bin/python -m bench.instructions v2|v2s|tf gateway|floor     (needs valgrind: apt install valgrind)
    env: N1=500 N2=2500 CONC=8 RUNS=1

``v2``: the V2 ModelInfer passthrough (floor: bench/floor.py forwarding the bytes); ``v2s``: the
V2 ModelStreamInfer passthrough, CONC streams each writing one message and reading its answer in
turn, counted per message (floor: bench/floor.py forwarding the stream); ``tf``: TF Serving
Predict of four floats (floor: bench/floor.py's Predict). The gateway runs with that one listener
and the admin port.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import yaml

from bench import cases, grpcload
from bench.stack import Stack, floor_env
from tests.support import ROOT, free_port, gateway_config

KINDS = {"v2": ("/inference.GRPCInferenceService/ModelInfer", "v2_grpc"),
         "v2s": (cases.MODEL_STREAM_INFER, "v2_grpc"),
         "tf": (cases.TF_PREDICT, "tfserving_grpc")}


def request(kind: str) -> bytes:
    return cases._tf_predict_request(cases.SMALL) if kind == "tf" else cases._v2_request(cases.SMALL)


def totals(path: Path) -> int:
    """The ``totals:`` line of a callgrind dump: instructions counted since the last one."""
    for line in path.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ValueError(f"{path}: no totals line")


async def _calls(target: str, method: str, data: bytes, n: int, conc: int) -> None:
    """``n`` calls from ``conc`` callers: unary calls, or on ``conc`` streams one message a turn."""
    async with grpc.aio.insecure_channel(target, options=grpcload.CHANNEL_OPTIONS) as channel:
        left = [n]
        if method == cases.MODEL_STREAM_INFER:
            open_stream = channel.stream_stream(method)

            async def caller():
                stream = open_stream(timeout=600)
                while left[0] > 0:
                    left[0] -= 1
                    await stream.write(data)
                    await stream.read()
                await stream.done_writing()
                if await stream.read() is not grpc.aio.EOF:
                    raise RuntimeError("an answer after the last message's")
        else:
            call = channel.unary_unary(method)

            async def caller():
                while left[0] > 0:
                    left[0] -= 1
                    await call(data, timeout=120)

        await asyncio.gather(*(caller() for _ in range(conc)))


def measure(kind: str, server: str) -> float:
    method, listener = KINDS[kind]
    n1, n2, conc = int(os.environ.get("N1", 500)), int(os.environ.get("N2", 2500)), int(os.environ.get("CONC", 8))
    data = request(kind)
    with Stack() as stack:
        tp = stack.start_triton()
        port, out = free_port(), Path(tempfile.mkdtemp(dir=stack.tmp)) / "callgrind.out"
        if server == "gateway":
            cfg = gateway_config(tp.grpc_target, {listener: port, "admin_http": free_port()}, {"log_level": "WARNING"})
            (out.parent / "gateway.yaml").write_text(yaml.safe_dump(cfg))
            cmd = [sys.executable, "-m", "gateway", "serve", "--config", str(out.parent / "gateway.yaml")]
            env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        else:
            cmd = [sys.executable, "-m", "bench.floor", tp.grpc_target, str(free_port()), str(port)]
            env = floor_env()
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                                 *cmd], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            target = f"127.0.0.1:{port}"
            deadline = time.monotonic() + 240  # under valgrind, start-up takes a while
            while True:
                try:
                    asyncio.run(_calls(target, method, data, 1, 1))
                    break
                except grpc.aio.AioRpcError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"{server} did not answer under valgrind") from None
                    time.sleep(1)
            asyncio.run(_calls(target, method, data, 300, conc))  # warm
            control = ["callgrind_control"]
            subprocess.run([*control, "-i", "on", str(proc.pid)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            counts = []
            for n in (n1, n2):
                asyncio.run(_calls(target, method, data, n, conc))
                subprocess.run([*control, "-d", str(proc.pid)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
                counts.append(totals(Path(f"{out}.{len(counts) + 1}")))
        finally:
            proc.terminate()
            proc.wait(60)
    return (counts[1] - counts[0]) / (n2 - n1)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in KINDS or argv[1] not in ("gateway", "floor"):
        print(__doc__)
        return 2
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (apt install valgrind)")
        return 2
    runs = [measure(*argv) for _ in range(max(1, int(os.environ.get("RUNS", 1))))]
    each = f" (runs: {', '.join(f'{r:,.0f}' for r in runs)})" if len(runs) > 1 else ""
    print(f"{argv[0]} {argv[1]}: {min(runs):,.0f} instructions a call{each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
