"""Bounded gRPC load: a closed loop of ``concurrency`` callers on one grpc.aio channel.

Requests are serialised once, before the run, and sent as raw bytes (no serializer on either
side), so the client spends as little CPU as a Python client can: it shares the machine's cores
with the gateway and Triton. Every run is bounded by its duration; calls have a deadline.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc

CHANNEL_OPTIONS = [
    ("grpc.enable_http_proxy", 0),  # loopback only, whatever http_proxy says
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]


@dataclass
class LoadResult:
    requests: int = 0
    duration_s: float = 0.0
    errors: int = 0
    latencies_s: list[float] = field(default_factory=list)
    first_error: str = ""

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0


def _check_target(target: str) -> None:
    if not target.startswith("127.0.0.1:"):
        raise ValueError(f"refusing to load anything but 127.0.0.1: {target}")


async def call_once(target: str, method: str, request: bytes, timeout: float = 30) -> bytes:
    """One unary call, for checking an answer before loading."""
    _check_target(target)
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as ch:
        return await ch.unary_unary(method)(request, timeout=timeout)


async def stream_once(target: str, method: str, request: bytes, timeout: float = 30) -> bytes:
    _check_target(target)
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as ch:
        call = ch.stream_stream(method)(timeout=timeout)
        await call.write(request)
        answer = await call.read()
        await call.done_writing()
        while await call.read() is not grpc.aio.EOF:  # no iterator on a call read with read()
            pass
        return answer


async def unary(target: str, method: str, request: bytes, concurrency: int, duration_s: float,
                timeout: float = 30) -> LoadResult:
    """``concurrency`` callers each send ``request`` again as soon as the last answer came."""
    _check_target(target)
    res = LoadResult()
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as ch:
        await asyncio.wait_for(ch.channel_ready(), 10)
        rpc = ch.unary_unary(method)
        start = time.perf_counter()
        end = start + duration_s

        async def caller() -> None:
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    return
                try:
                    await rpc(request, timeout=timeout)
                except grpc.aio.AioRpcError as e:
                    res.errors += 1
                    res.first_error = res.first_error or f"{e.code().name}: {e.details()}"
                    continue
                t1 = time.perf_counter()
                res.requests += 1
                res.latencies_s.append(t1 - t0)

        await asyncio.gather(*(caller() for _ in range(concurrency)))
        res.duration_s = time.perf_counter() - start
    return res


async def stream(target: str, method: str, request: bytes, concurrency: int, duration_s: float,
                 timeout: float = 60) -> LoadResult:
    """``concurrency`` bidirectional streams, each writing one message and reading its answer in
    turn; latency is per message on an established stream."""
    _check_target(target)
    res = LoadResult()
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as ch:
        await asyncio.wait_for(ch.channel_ready(), 10)
        rpc = ch.stream_stream(method)
        start = time.perf_counter()
        end = start + duration_s

        async def caller() -> None:
            call = rpc(timeout=duration_s + timeout)
            try:
                while True:
                    t0 = time.perf_counter()
                    if t0 >= end:
                        break
                    await call.write(request)
                    answer = await call.read()
                    if answer is grpc.aio.EOF:
                        res.errors += 1
                        res.first_error = res.first_error or "stream ended early"
                        return
                    res.requests += 1
                    res.latencies_s.append(time.perf_counter() - t0)
                await call.done_writing()
                while await call.read() is not grpc.aio.EOF:
                    pass
            except grpc.aio.AioRpcError as e:
                res.errors += 1
                res.first_error = res.first_error or f"{e.code().name}: {e.details()}"
            finally:
                call.cancel()

        await asyncio.gather(*(caller() for _ in range(concurrency)))
        res.duration_s = time.perf_counter() - start
    return res
