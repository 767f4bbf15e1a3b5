"""The same small ModelInfer to a real Triton as a grpc.aio unary call or as one on the HTTP/2
client, CPU per request on both sides.

A client process (on uvloop, as a gateway worker is) sends N requests of bench/cases.py's small V2
request (four FP32 values to saved_model_half_plus_three, each with an id of its own) from CONC
callers, either as unary calls the way grpc.aio makes them (gateway/upstream/direct.py, mode
``unary``) or on gateway/h2/client.py's ``Channel.call`` (mode ``h2``: the translating dialects'
call, ``upstream.transport: h2``). Per mode and concurrency: the client's CPU time per request (its
own ``process_time``, every thread), and Triton's (utime+stime of its processes, the python-backend
stubs included, from /proc). Modes are alternated in rounds; the median of the rounds is printed.
bench/h2_vs_grpc.py drives its own modes with this module's driver.

    .venv/bin/python -m bench.stream_vs_unary                     CPU time (wall-clock noise: a quiet machine)
    .venv/bin/python -m bench.stream_vs_unary --callgrind         the client's instructions per request
    env: N=3000 CONC=1,8,64 MODES=unary,h2 ROUNDS=3 INSTANCES=(the repository's) N1=500 N2=2500
         TASKSET_CLIENT / TASKSET_TRITON: CPU lists ("0-1", as taskset writes them) to pin the two sides to

``--callgrind`` runs the client under valgrind's callgrind (instrumentation off until warm) and
prints (I(N2) - I(N1)) / (N2 - N1): the instructions of the client's process per request, gRPC
core's threads included, with bench/instructions.py's caveat about spin loops under valgrind.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import cases, procstat

MODEL_INFER = cases.MODEL_INFER


# -- the client (a child process) ---------------------------------------------------------------
async def _client(target: str, mode: str, conc: int) -> None:
    if mode == "h2":
        one = h2_unary(target)
    elif mode == "unary":
        import grpc

        from bench import grpcload
        from gateway.upstream import direct

        call = direct.unary(grpc.aio.insecure_channel(target, options=grpcload.CHANNEL_OPTIONS), MODEL_INFER)

        async def one(data: bytes) -> bytes:
            return await call(data, timeout=60)
    else:
        raise ValueError(f"mode {mode!r}: unary or h2")

    await serve(one, conc)


def h2_unary(target: str):
    """``one(data)``: a ModelInfer on gateway/h2/client.py's ``Channel.call``, as the translating
    dialects send theirs (``upstream.transport: h2``, the default: keepalive as the gateway has it)."""
    from gateway.h2 import client as h2call
    from gateway.upstream.client import keepalive

    host, _, port = target.rpartition(":")
    channel = h2call.Channel([(host, int(port))], keepalive=keepalive())

    async def one(data: bytes) -> bytes:
        return await channel.call(data, 60.0)

    return one


async def serve(one, conc: int) -> None:
    """The client's side of the driver's pipe: ``ready``, then for each line ``n``, ``n`` requests
    (the small request, an id of its own each) by ``conc`` callers of ``one(data) -> answer``."""
    from gateway.core.protowire import delimited

    base = cases._v2_request(cases.SMALL)
    seq = [0]

    async def run(n: int) -> None:
        left = [n]

        async def caller():
            while left[0] > 0:
                left[0] -= 1
                seq[0] += 1
                answer = await one(base + delimited(3, b"r%d" % seq[0]))
                if len(answer) < 16:
                    raise RuntimeError(f"answer {answer!r}")

        await asyncio.gather(*(caller() for _ in range(conc)))

    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.strip():
            break
        n = int(line)
        c0, t0 = time.process_time(), time.perf_counter()
        await run(n)
        print(f"done {time.process_time() - c0:.6f} {time.perf_counter() - t0:.6f}", flush=True)


def client_main(argv: list[str]) -> int:
    import uvloop

    uvloop.install()
    asyncio.run(_client(argv[0], argv[1], int(argv[2])))
    return 0


# -- the driver ---------------------------------------------------------------------------------
class Client:
    def __init__(self, target: str, mode: str, conc: int, callgrind: Path | None = None,
                 module: str = "bench.stream_vs_unary"):
        from bench.stack import floor_env
        from tests.support import ROOT

        cmd = [sys.executable, "-m", module, "client", target, mode, str(conc)]
        if callgrind is not None:
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={callgrind}", *cmd]
        from bench.stack import pin

        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=floor_env(), text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        pin([self.proc.pid], "TASKSET_CLIENT")  # (not a preexec_fn: no Python between fork and exec; its threads inherit it)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("client did not start")

    def run(self, n: int) -> tuple[float, float]:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "done":
            raise RuntimeError(f"client failed ({line})")
        return float(line[1]), float(line[2])

    def close(self) -> None:
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(30)
        except Exception:  # noqa: BLE001
            self.proc.kill()


def _cpu(stack, target: str, modes: list[str], concs: list[int], n: int, rounds: int,
         module: str = "bench.stream_vs_unary") -> list[dict]:
    rows = []
    for conc in concs:
        per = {m: {"client": [], "triton": [], "rps": []} for m in modes}
        for r in range(rounds):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                client = Client(target, mode, conc, module=module)
                try:
                    client.run(max(300, n // 5))  # warm: streams open, caches filled
                    t0 = procstat.ticks(stack.triton_pids())
                    cpu, wall = client.run(n)
                    t1 = procstat.ticks(stack.triton_pids())
                finally:
                    client.close()
                per[mode]["client"].append(cpu / n * 1e6)
                per[mode]["triton"].append((t1 - t0) / procstat.CLK_TCK / n * 1e6)
                per[mode]["rps"].append(n / wall)
        for mode in modes:
            row = {"mode": mode, "conc": conc, **{k: statistics.median(v) for k, v in per[mode].items()},
                   "rounds": {k: [round(x, 1) for x in v] for k, v in per[mode].items()}}
            rows.append(row)
            spread = row["rounds"]["client"]
            print(f"conc {conc:3d} {mode:6s} client {row['client']:7.1f} µs ({min(spread)}-{max(spread)})  "
                  f"triton {row['triton']:7.1f} µs  {row['rps']:8.0f} req/s", flush=True)
    return rows


def _callgrind(target: str, modes: list[str], concs: list[int], module: str = "bench.stream_vs_unary") -> list[dict]:
    from bench.instructions import totals

    n1, n2 = int(os.environ.get("N1", 500)), int(os.environ.get("N2", 2500))
    rows = []
    for conc in concs:
        for mode in modes:
            out = Path(tempfile.mkdtemp(prefix="svu-")) / "callgrind.out"
            client = Client(target, mode, conc, callgrind=out, module=module)
            try:
                client.run(300)
                ctl = ["callgrind_control"]
                subprocess.run([*ctl, "-i", "on", str(client.proc.pid)], check=True, capture_output=True)
                counts = []
                for n in (n1, n2):
                    client.run(n)
                    subprocess.run([*ctl, "-d", str(client.proc.pid)], check=True, capture_output=True)
                    counts.append(totals(Path(f"{out}.{len(counts) + 1}")))
            finally:
                client.close()
                shutil.rmtree(out.parent, ignore_errors=True)
            per = (counts[1] - counts[0]) / (n2 - n1)
            rows.append({"mode": mode, "conc": conc, "instructions": per})
            print(f"conc {conc:3d} {mode:6s} {per:10,.0f} instructions a request (client)", flush=True)
    return rows


def main(argv: list[str], module: str = "bench.stream_vs_unary", default_modes: str = "unary,h2") -> int:
    """The driver (``module``'s client processes, ``MODES`` or ``default_modes``), or with
    ``client`` first, this module's client."""
    if argv[:1] == ["client"]:
        return client_main(argv[1:])
    from bench.stack import Stack, pin

    modes = os.environ.get("MODES", default_modes).split(",")
    concs = [int(c) for c in os.environ.get("CONC", "1,8,64").split(",")]
    instances = os.environ.get("INSTANCES")
    with Stack() as stack:
        tp = stack.start_triton(int(instances) if instances else None)
        if os.environ.get("TASKSET_TRITON"):
            os.environ["BENCH_CPUS_TRITON"] = os.environ["TASKSET_TRITON"]
            pin(stack.triton_pids(), "BENCH_CPUS_TRITON")
        if "--callgrind" in argv:
            rows = _callgrind(tp.grpc_target, modes, concs, module)
        else:
            rows = _cpu(stack, tp.grpc_target, modes, concs, int(os.environ.get("N", 3000)),
                        int(os.environ.get("ROUNDS", 3)), module)
    out = os.environ.get("RESULTS")
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
