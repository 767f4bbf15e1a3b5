"""What the prefill/decode split costs: a standard instance vs the PD path through a coordinator.

Starts the bundled Triton (CPU, tiny_llm: 15 ms per token), a standard gateway, and a PD cluster
(one P, one D, a coordinator; the same processes `make run-pd` starts, on free ports), then sends
the same OpenAI chat request N times, one at a time, to each:

  standard     POST /v1/chat/completions on the standard instance;
  PD           the same on the coordinator (P context phase + hand-off to D + D's /dresult relay).

Stream: TTFT = request sent -> first chunk with generated text; total = request sent -> last
byte. Non-stream: total only. Medians (and p90) over the runs; plus the coordinator's hand-off
histogram (P's answer -> D's first record) and P's hand-off call, from their /metrics.
Usage: .venv/bin/python -m bench.pd_latency [--runs 30] [--tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import requests

from bench.stack import Stack
from tests.pd_support import start_role
from tests.support import stop_gateway

PROMPT = "benchmark prompt for the prefill decode split"


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run(url: str, runs: int, tokens: int, stream: bool) -> tuple[list[float], list[float]]:
    body = {"model": "tiny_llm", "stream": stream, "max_tokens": tokens,
            "messages": [{"role": "user", "content": PROMPT}]}
    ttft, total = [], []
    async with aiohttp.ClientSession() as session:
        for _ in range(runs):
            t0, first = time.perf_counter(), None
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    if first is None and stream and re.search(rb'"content":"[^"]', line):
                        first = time.perf_counter() - t0
            total.append(time.perf_counter() - t0)
            if stream:
                ttft.append(first)
    return ttft, total


def _histogram_mean(metrics_url: str, name: str, role: str) -> tuple[float, int]:
    text = requests.get(metrics_url, timeout=5).text
    s = re.search(rf'{name}_sum{{role="{role}"}} ([0-9.e+-]+)', text)
    c = re.search(rf'{name}_count{{role="{role}"}} ([0-9.e+-]+)', text)
    if not s or not c or float(c.group(1)) == 0:
        return 0.0, 0
    return float(s.group(1)) / float(c.group(1)) * 1e3, int(float(c.group(1)))


async def measure(standard: str, coordinator: str, runs: int, tokens: int) -> dict:
    out = {}
    for name, url in (("standard", standard), ("PD", coordinator)):
        await run(url, 3, 2, True)  # warm-up
        out[name, "stream"] = await run(url, runs, tokens, True)
        out[name, "non-stream"] = await run(url, runs, tokens, False)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=16)
    args = ap.parse_args(argv)
    with Stack() as stack:
        tp = stack.start_triton()
        gw = stack.start_gateway(1)
        tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-pd-"))
        started = []
        try:
            for name, pd in (("p", {"role": "prefill"}), ("d", {"role": "decode"})):
                (tmp / name).mkdir()
                started.append(start_role(tp.grpc_target, tmp / name, pd))
            p, d = started
            (tmp / "c").mkdir()
            coord = start_role(tp.grpc_target, tmp / "c", {
                "role": "coordinator", "prefill": [f"127.0.0.1:{p.port('mindie_http')}"],
                "decode": [f"127.0.0.1:{d.port('mindie_http')}"]})
            started.append(coord)
            deadline = time.monotonic() + 20
            while requests.get(coord.url("mindie_http") + "/health").status_code != 200:
                assert time.monotonic() < deadline, "coordinator never linked to D"
                time.sleep(0.1)
            res = asyncio.run(measure(gw.url("mindie_http"), coord.url("mindie_http"), args.runs, args.tokens))
            print(f"OpenAI chat, {args.runs} runs x {args.tokens} tokens, one at a time; milliseconds")
            print(f"{'path':<22}{'TTFT p50':>10}{'TTFT p90':>10}{'total p50':>11}{'total p90':>11}")
            for (name, mode), (ttft, total) in res.items():
                t50 = f"{statistics.median(ttft) * 1e3:.1f}" if ttft else "-"
                t90 = f"{_pct(ttft, 0.9) * 1e3:.1f}" if ttft else "-"
                print(f"{name + ' ' + mode:<22}{t50:>10}{t90:>10}{statistics.median(total) * 1e3:>11.1f}"
                      f"{_pct(total, 0.9) * 1e3:>11.1f}")
            for (label, url, role) in (("coordinator: P answer -> D first chunk", coord, "coordinator"),
                                       ("P: hand-off call to D", p, "prefill")):
                mean, n = _histogram_mean(url.url("admin_http") + "/metrics", "pd_handoff_seconds", role)
                print(f"{label:<44} mean {mean:.2f} ms over {n}")
        finally:
            for g in started:
                stop_gateway(g)
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
