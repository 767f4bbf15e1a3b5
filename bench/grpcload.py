"""Bounded gRPC load: a closed loop of ``concurrency`` callers (unary calls, or streams of one
message a turn) on one grpc.aio channel, or spread over ``channels`` channels, each its own
connection: the several clients a gateway with several workers, each a process of its own, needs to
be loaded as a whole.

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


CONNECT_S = 10.0  # a load's channels connect within this, or the load fails at once


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


def channel_options(own_connection: bool) -> list[tuple[str, int]]:
    """A channel's options; ``own_connection``: its own subchannel pool, so that channels to the same
    target do not share one connection (grpc's global pool would), and the kernel can hand each to
    another worker (SO_REUSEPORT)."""
    return CHANNEL_OPTIONS + ([("grpc.use_local_subchannel_pool", 1)] if own_connection else [])


async def _closed_loop(target: str, open_rpc, caller, concurrency: int, duration_s: float, channels: int,
                       start_at: float | None) -> LoadResult:
    """``concurrency`` callers ``caller(rpc, end, res)``, each until ``end`` (``time.perf_counter()``);
    caller i uses channel i mod ``channels``, ``open_rpc(channel)`` its multi-callable. ``start_at``:
    the wall-clock time (``time.time()``) the run starts at, once every channel is ready (several
    client processes start together)."""
    _check_target(target)
    if channels < 1:
        raise ValueError(f"channels must be at least 1, not {channels}")
    res = LoadResult()
    chans = [grpc.aio.insecure_channel(target, options=channel_options(channels > 1)) for _ in range(channels)]
    try:
        try:
            await asyncio.wait_for(asyncio.gather(*(ch.channel_ready() for ch in chans)), CONNECT_S)
        except TimeoutError:
            states = ", ".join(sorted({ch.get_state().name for ch in chans}))
            raise ConnectionError(f"{target}: {channels} channel(s) not all ready in {CONNECT_S:g} s ({states})") from None
        rpcs = [open_rpc(ch) for ch in chans]
        if start_at is not None and start_at > time.time():
            await asyncio.sleep(start_at - time.time())
        start = time.perf_counter()
        await asyncio.gather(*(caller(rpcs[i % channels], start + duration_s, res) for i in range(concurrency)))
        res.duration_s = time.perf_counter() - start
    finally:
        await asyncio.gather(*(ch.close() for ch in chans))
    return res


def _failed(res: LoadResult, why: str) -> None:
    res.errors += 1
    res.first_error = res.first_error or why


async def unary(target: str, method: str, request: bytes, concurrency: int, duration_s: float,
                timeout: float = 30, channels: int = 1, start_at: float | None = None) -> LoadResult:
    """``concurrency`` callers each send ``request`` again as soon as the last answer came."""

    async def caller(rpc, end: float, res: LoadResult) -> None:
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                return
            try:
                await rpc(request, timeout=timeout)
            except grpc.aio.AioRpcError as e:
                _failed(res, f"{e.code().name}: {e.details()}")
                continue
            res.requests += 1
            res.latencies_s.append(time.perf_counter() - t0)

    return await _closed_loop(target, lambda ch: ch.unary_unary(method), caller, concurrency, duration_s,
                              channels, start_at)


async def stream(target: str, method: str, request: bytes, concurrency: int, duration_s: float,
                 timeout: float = 60, channels: int = 1, start_at: float | None = None) -> LoadResult:
    """``concurrency`` bidirectional streams, each writing one message and reading its answer in
    turn; latency is per message on an established stream."""

    async def caller(rpc, end: float, res: LoadResult) -> None:
        call = rpc(timeout=duration_s + timeout)
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                await call.write(request)
                if await call.read() is grpc.aio.EOF:
                    _failed(res, "stream ended early")
                    return
                res.requests += 1
                res.latencies_s.append(time.perf_counter() - t0)
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as e:
            _failed(res, f"{e.code().name}: {e.details()}")
        finally:
            call.cancel()

    return await _closed_loop(target, lambda ch: ch.stream_stream(method), caller, concurrency, duration_s,
                              channels, start_at)


_KINDS = {"grpc_unary": unary, "grpc_stream": stream}


def merged(parts: list[LoadResult]) -> LoadResult:
    """Runs made side by side (one per client process) as one: the requests and errors added, the
    latencies pooled, the longest duration."""
    out = LoadResult()
    for p in parts:
        out.requests += p.requests
        out.errors += p.errors
        out.latencies_s.extend(p.latencies_s)
        out.duration_s = max(out.duration_s, p.duration_s)
        out.first_error = out.first_error or p.first_error
    return out


def _share(total: int, parts: int, i: int) -> int:
    return total // parts + (1 if i < total % parts else 0)


def _in_process(args: tuple) -> LoadResult:
    kind, target, method, request, concurrency, duration_s, channels, start_at = args
    return asyncio.run(_KINDS[kind](target, method, request, concurrency, duration_s, channels=channels,
                                    start_at=start_at))


def load(kind: str, target: str, method: str, request: bytes, concurrency: int, duration_s: float,
         channels: int = 1, processes: int = 1) -> LoadResult:
    """A ``grpc_unary`` or ``grpc_stream`` load (``unary``, ``stream``) from ``processes`` client
    processes at once, the callers (calls or streams) and channels shared out among them: one Python
    client tops out near 10 k calls a second, below what several gateway workers on many cores
    answer. Each process connects, then all start at the same moment."""
    run = _KINDS[kind]
    if processes <= 1:
        return asyncio.run(run(target, method, request, concurrency, duration_s, channels=channels))
    if concurrency < processes or channels < processes:
        raise ValueError(f"{processes} client processes need at least as many callers and channels "
                         f"({concurrency} callers, {channels} channels)")
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    start_at = time.time() + 3.0  # spawned, grpc imported and connected by then
    jobs = [(kind, target, method, request, _share(concurrency, processes, i), duration_s,
             _share(channels, processes, i), start_at) for i in range(processes)]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        return merged(list(pool.map(_in_process, jobs)))
