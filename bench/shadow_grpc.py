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
import time
from pathlib import Path

import grpc
import numpy as np

from bench.shadow import CONCURRENCY, alone, measure, need_s, table

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
    def rounds(front, route: str, duration: float, callers: int):
        return _round(front.target("tfserving_grpc"), f"hp3_{route}", duration, callers)

    return measure(triton_target, tmp, duration_s, repeats, listener="tfserving_grpc", name="shadow-grpc",
                   legacy_link=lambda legacy: {"grpc": legacy.target("tfserving_grpc")}, rounds=rounds)


def markdown(sc: dict) -> list[str]:
    return table(sc, "TF Serving gRPC small Predict", "grpc.aio callers", "bench/shadow_grpc.py")


def main() -> int:
    return alone(run, markdown, "gateway-bench-shadow-grpc-", repeats=2)


__all__ = ["CONCURRENCY", "markdown", "need_s", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
