"""GRPS-style monitoring: per-second request statistics rolled up into GRPS's trend series.

    record(model, seconds, ok)     one finished request (total and per model)
    series(name)                   {"label": "trend", "data": [[0, v], ..., [173, v]]}   (174 points:
                                   30 days, 24 hours, 60 minutes, 60 seconds, oldest first) or
                                   {"label": "cdf", "data": [[10, v], ..., [101, v]]} (20 points;
                                   x=100 is p99.9, x=101 is p99.99), values with 2 decimals
    names()                        every metric name, sorted ("*qps", "*qps[grps_echo-1]", ...)

State lives in the worker process (one Monitor per GatewayContext); a background task closes each
second and samples CPU and memory with psutil.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import numpy as np
import psutil

RINGS = ((30, 86400), (24, 3600), (60, 60), (60, 1))  # (points, seconds per point), oldest first
CDF_X = (*range(10, 100, 10), *range(91, 100), 100, 101)
CDF_Q = (*range(10, 100, 10), *range(91, 100), 99.9, 99.99)
REQUEST_METRICS = ("qps", "fail_rate(%)", "latency_avg(ms)", "latency_max(ms)", "latency_cdf(ms)")
GAUGES = ("cpu_usage(%)", "mem_usage(%)", "process_rss(MiB)")


class Bucket:
    __slots__ = ("count", "fails", "lat_sum", "lat_max", "g_sum", "g_n")

    def __init__(self) -> None:
        self.count = self.fails = self.g_n = 0
        self.lat_sum = self.lat_max = self.g_sum = 0.0

    def merge(self, o: Bucket) -> None:
        self.count += o.count
        self.fails += o.fails
        self.lat_sum += o.lat_sum
        self.lat_max = max(self.lat_max, o.lat_max)
        self.g_sum += o.g_sum
        self.g_n += o.g_n

    def value(self, metric: str, period: int) -> float:
        if metric == "qps":
            return self.count / period
        if metric == "fail_rate(%)":
            return 100.0 * self.fails / self.count if self.count else 0.0
        if metric == "latency_avg(ms)":
            return 1000.0 * self.lat_sum / self.count if self.count else 0.0
        if metric == "latency_max(ms)":
            return 1000.0 * self.lat_max
        return self.g_sum / self.g_n if self.g_n else 0.0  # gauges: the average sample


class Track:
    """One key's buckets at every resolution (the current, still open one of each, plus rings)."""

    def __init__(self) -> None:
        self.rings = [deque(maxlen=n) for n, _ in RINGS]
        self.open = [Bucket() for _ in RINGS]
        self.latencies: deque[float] = deque(maxlen=20000)

    def close(self, t: int) -> None:
        """Close second ``t - 1``; close minutes, hours and days whose boundary is ``t``."""
        for level in range(len(RINGS) - 1, -1, -1):
            period = RINGS[level][1]
            if t % period and level != len(RINGS) - 1:
                break
            bucket = self.open[level]
            self.rings[level].append(bucket)
            self.open[level] = Bucket()
            if level:
                self.open[level - 1].merge(bucket)

    def trend(self, metric: str) -> list[list[float]]:
        data, x = [], 0
        for (points, period), ring in zip(RINGS, self.rings, strict=True):
            values = [0.0] * (points - len(ring)) + [b.value(metric, period) for b in ring]
            for v in values:
                data.append([x, round(v, 2)])
                x += 1
        return data

    def cdf(self) -> list[list[float]]:
        if not self.latencies:
            return [[x, 0.0] for x in CDF_X]
        q = np.percentile(np.fromiter(self.latencies, float), CDF_Q) * 1000.0
        return [[x, round(float(v), 2)] for x, v in zip(CDF_X, q, strict=True)]


class Monitor:
    def __init__(self, clock=time.time) -> None:
        self.clock = clock
        self.now = int(clock())
        self.tracks: dict[str, Track] = {"": Track()}
        self.gauges: dict[str, Track] = {g: Track() for g in GAUGES}
        self._task: asyncio.Task | None = None
        self._proc = psutil.Process()

    # -- recording --------------------------------------------------------------------------------
    def record(self, model: str, seconds: float, ok: bool) -> None:
        """Count one request in the total and, when ``model`` is not empty, under that model."""
        self.advance()
        for key in ("", model) if model else ("",):
            track = self.tracks.get(key) or self.tracks.setdefault(key, Track())
            b = track.open[-1]
            b.count += 1
            b.fails += 0 if ok else 1
            b.lat_sum += seconds
            b.lat_max = max(b.lat_max, seconds)
            track.latencies.append(seconds)

    def sample(self) -> None:
        values = (psutil.cpu_percent(None), psutil.virtual_memory().percent, self._proc.memory_info().rss / 2**20)
        for name, v in zip(GAUGES, values, strict=True):
            b = self.gauges[name].open[-1]
            b.g_sum += v
            b.g_n += 1

    def advance(self) -> None:
        """Close every second that has ended (at most one hour's worth after a long pause)."""
        now = int(self.clock())
        if now <= self.now:  # the second already open (nearly every request)
            return
        start = max(self.now + 1, now - 3600)
        for t in range(start, now + 1):
            for track in (*self.tracks.values(), *self.gauges.values()):
                track.close(t)
        self.now = max(self.now, now)

    # -- reading ----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        out = [f"*{g}" for g in GAUGES]
        for key in self.tracks:
            out += [f"*{m}" + (f"[{key}]" if key else "") for m in REQUEST_METRICS]
        return sorted(out)

    def series(self, name: str) -> dict | None:
        """GRPS's series JSON for ``name``, or None when there is no such metric."""
        self.advance()
        metric, _, key = name.lstrip("*").partition("[")
        key = key[:-1] if key.endswith("]") else key
        if metric in GAUGES and not key:
            return {"label": "trend", "data": self.gauges[metric].trend(metric)}
        track = self.tracks.get(key)
        if track is None or metric not in REQUEST_METRICS or not name.startswith("*"):
            return None
        if metric == "latency_cdf(ms)":
            return {"label": "cdf", "data": track.cdf()}
        return {"label": "trend", "data": track.trend(metric)}

    # -- the per-second task ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the ticking task in the running loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _tick(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(1.0 - (self.clock() % 1.0) + 0.01)
            self.advance()
