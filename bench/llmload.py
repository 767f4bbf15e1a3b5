"""Streamed generation, one request at a time (or ``concurrency`` callers, each one at a time): time
to first token and the gaps between tokens.

Each request is sent, then its server-sent events are read as they arrive; an event that carries a
token (``is_token``) is stamped with the time since the request was sent. TTFT = first stamp,
inter-token latency (ITL) = difference of consecutive stamps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp


@dataclass
class LlmResult:
    requests: int = 0
    tokens: int = 0
    duration_s: float = 0.0
    errors: int = 0
    ttft_s: list[float] = field(default_factory=list)
    itl_s: list[float] = field(default_factory=list)
    first_error: str = ""

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.duration_s if self.duration_s else 0.0


def add_stamps(res: LlmResult, stamps: Sequence[float]) -> None:
    """Fold one request's token arrival times (seconds after sending) into ``res``."""
    if not stamps:
        res.errors += 1
        res.first_error = res.first_error or "no token in the answer"
        return
    res.requests += 1
    res.tokens += len(stamps)
    res.ttft_s.append(stamps[0])
    res.itl_s.extend(b - a for a, b in zip(stamps, stamps[1:], strict=False))


async def one(session: aiohttp.ClientSession, url: str, body: bytes,
              is_token: Callable[[bytes], bool]) -> tuple[int, list[float]]:
    stamps: list[float] = []
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        async for line in resp.content:
            if is_token(line):
                stamps.append(time.perf_counter() - t0)
        return resp.status, stamps


async def run(url: str, body: bytes, is_token: Callable[[bytes], bool], duration_s: float,
              max_requests: int = 1000, min_requests: int = 3, concurrency: int = 1) -> LlmResult:
    """Sequential requests until ``duration_s`` has passed (at least ``min_requests``), from each of
    ``concurrency`` callers at once (``max_requests`` and ``min_requests`` count each caller's)."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"refusing to send anything but to 127.0.0.1: {url}")
    res = LlmResult()
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=0)  # one connection per caller
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:  # trust_env=False: no proxies
        start = time.perf_counter()

        async def caller() -> None:
            for i in range(max_requests):
                if i >= min_requests and time.perf_counter() - start >= duration_s:
                    break
                status, stamps = await one(session, url, body, is_token)
                if status != 200:
                    res.errors += 1
                    res.first_error = res.first_error or f"HTTP {status}"
                    continue
                add_stamps(res, stamps)

        await asyncio.gather(*(caller() for _ in range(concurrency)))
        res.duration_s = time.perf_counter() - start
    return res
