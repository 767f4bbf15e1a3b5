"""The cut-over on TF Serving gRPC (:8500): a small Predict on `triton`, `legacy` and `shadow`.

bench/shadow.py's set-up on the gRPC listener: the stand-in legacy server (a gateway speaking TF
Serving gRPC, one worker, answering from half_plus_two's y2: the same values from another model
instance) and the front gateway (one worker) whose ``dialects.tfserving.legacy.grpc`` routes three
names of saved_model_half_plus_three: ``hp3_triton`` (today's path), ``hp3_legacy`` (the bytes
relayed), ``hp3_shadow`` (relayed for the client, Triton called and compared in the background).
Closed-loop grpc.aio callers in this process (one channel, ``callers`` calls in flight); rounds
alternated; client latency p50 / p99 and the front gateway's CPU per request (its utime + stime).

    .venv/bin/python -m bench.shadow_grpc        # alone, on its own Triton (about a minute)
    BENCH_ONLY=shadow_grpc make bench             # the row of `make bench` (bench/run.py)
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import grpc
import numpy as np

from bench import procstat
from bench.shadow import ROUTES, _counts, _folder, _legacy_models, _models, _pct, need_s

CONCURRENCY = (1, 8)
PREDICT = "/tensorflow.serving.PredictionService/Predict"


def _request(model: str) -> bytes:
    from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
    from gateway._proto.tensorflow_serving.apis import predict_pb2

    arr = np.asarray([1.0, 2.0, 5.0, 7.0], dtype=np.float32)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT, tensor_content=arr.tobytes(),
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=4)])))
    return req.SerializeToString()


async def _round(target: str, model: str, duration_s: float, callers: int) -> tuple[list[float], int]:
    lat: list[float] = []
    errors = 0
    data = _request(model)
    end = time.monotonic() + duration_s
    async with grpc.aio.insecure_channel(target) as ch:
        call = ch.unary_unary(PREDICT)

        async def caller():
            nonlocal errors
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    await call(data, timeout=30)
                except grpc.aio.AioRpcError:
                    errors += 1
                lat.append(time.perf_counter() - t0)

        await asyncio.gather(*(caller() for _ in range(callers)))
    return lat, errors


def run(triton_target: str, tmp: Path, duration_s: float, repeats: int) -> dict:
    from tests.support import free_port, gateway_config, start_gateway, stop_gateway

    listeners = ("tfserving_grpc", "admin_http")
    legacy = start_gateway(gateway_config(triton_target, {n: free_port() for n in listeners}, {
        "log_level": "WARNING", "access_log": False, "dialects": {"tfserving": {"models": _legacy_models()}}}),
        _folder(tmp, "shadow-grpc-legacy"))
    front = None
    try:
        front = start_gateway(gateway_config(triton_target, {n: free_port() for n in listeners}, {
            "log_level": "WARNING", "access_log": False, "dialects": {"tfserving": {"models": _models(), "legacy": {
                "grpc": legacy.target("tfserving_grpc"), "shadow_concurrency": 64,
                "mismatches": {"path": str(tmp / "shadow-grpc-migration")},
                "models": {"hp3_legacy": {"route": "legacy"}, "hp3_shadow": {"route": "shadow"}}}}}}),
            _folder(tmp, "shadow-grpc-front"))
        target = front.target("tfserving_grpc")
        pids = procstat.process_tree(front.proc.pid)
        for route in ROUTES:  # warm-up
            asyncio.run(_round(target, f"hp3_{route}", 0.5, 2))
        time.sleep(0.5)
        out = {"concurrency": list(CONCURRENCY), "duration_s": duration_s, "repeats": repeats, "rows": []}
        for callers in CONCURRENCY:
            samples: dict[str, list[float]] = {r: [] for r in ROUTES}
            cpu: dict[str, list[tuple[int, int]]] = {r: [] for r in ROUTES}
            errors = dict.fromkeys(ROUTES, 0)
            for _ in range(repeats):
                for route in ROUTES:
                    before = procstat.ticks(pids)
                    lat, err = asyncio.run(_round(target, f"hp3_{route}", duration_s, callers))
                    time.sleep(0.3)  # the last background comparisons finish inside the measured ticks
                    cpu[route].append((procstat.ticks(pids) - before, len(lat)))
                    samples[route] += lat
                    errors[route] += err
            for route in ROUTES:
                ticks = sum(t for t, _ in cpu[route])
                n = sum(k for _, k in cpu[route])
                out["rows"].append({
                    "concurrency": callers, "route": route, "requests": n, "errors": errors[route],
                    "rps": n / (duration_s * repeats), "p50_ms": 1e3 * _pct(samples[route], 0.5),
                    "p99_ms": 1e3 * _pct(samples[route], 0.99), "cpu_us": procstat.us_per_request(0, ticks, n)})
        out["migration"] = _counts(front)
        return out
    finally:
        if front is not None:
            stop_gateway(front)
        stop_gateway(legacy)


def markdown(sc: dict) -> list[str]:
    from bench.report import num

    lines = ["", "## Cut-over: TF Serving gRPC small Predict on the shadow route (one front worker)", ""]
    if sc.get("skipped"):
        return lines + [f"skipped: {sc['skipped']}"]
    lines += [f"Closed-loop grpc.aio callers, {sc['repeats']} × {sc['duration_s']:g} s per route, alternated; the "
              "legacy server is a second gateway (bench/shadow_grpc.py). CPU: the front gateway's alone. "
              f"Comparisons counted: {sc.get('migration', {})}.", "",
              "| callers | route | requests | errors | p50 ms | p99 ms | front CPU µs/req |",
              "|---|---|---|---|---|---|---|"]
    for r in sc["rows"]:
        lines.append(f"| {r['concurrency']} | {r['route']} | {r['requests']} | {r['errors']} | {num(r['p50_ms'])} | "
                     f"{num(r['p99_ms'])} | {num(r['cpu_us'])} |")
    return lines


def main() -> int:
    import tempfile

    from gateway.local import localtriton
    from gateway.settings import LocalTriton
    from tests.support import ROOT, free_port

    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-shadow-grpc-"))
    tp = localtriton.start(LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository"),
                                       workdir=str(tmp / "triton"), http_port=free_port(), grpc_port=free_port(),
                                       metrics_port=free_port(), startup_timeout_s=180), ROOT,
                           log_path=tmp / "triton.log")
    try:
        res = run(tp.grpc_target, tmp, 3.0, 2)
    finally:
        tp.stop()
    print("\n".join(markdown(res)))
    print(json.dumps(res, indent=1))
    return 0


__all__ = ["CONCURRENCY", "markdown", "need_s", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
