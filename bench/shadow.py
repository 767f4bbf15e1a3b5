"""`make bench`'s cut-over row: a TF Serving REST predict on the `shadow` route beside `triton` and `legacy`.

Two gateways beside the bench's Triton: the stand-in legacy server (a gateway speaking TF Serving
REST, one worker, docs/migration.md, answering from half_plus_two: the same values from another
model instance) and the front gateway (one worker) whose
``dialects.tfserving.legacy`` routes three names of saved_model_half_plus_three:

  triton   hp3_triton  today's path: front -> Triton
  legacy   hp3_legacy  front -> legacy gateway -> Triton, the answer relayed unchanged
  shadow   hp3_shadow  as legacy for the client, and front -> Triton in the background, both answers
                       decoded and compared (every request fits: shadow_concurrency 64)

Load: aiohttp callers in one process, each one request at a time (a closed loop), at each of
``CONCURRENCY`` (1: the path's latency with the CPU idle between requests; 8: the cores saturated,
where the shadow's CPU is taken from the same cores as the client's answer), the small predict of
bench/cases.py; rounds alternated (triton, legacy, shadow) ``repeats`` times, ``duration_s`` each,
latencies pooled per route. Client latency p50 / p99; the front gateway's CPU
per request (its workers' utime + stime from /proc over the requests answered; the legacy
gateway's and Triton's are not counted). The client's latency under shadow is to be read against
``legacy`` (the same path for the client); its CPU against both: shadow does the legacy relay and
the Triton call and the comparison.

    .venv/bin/python -m bench.shadow        # alone, on its own Triton (about a minute)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench import procstat

CONCURRENCY = (1, 8)
ROUTES = ("triton", "legacy", "shadow")
HPT = "saved_model_half_plus_three"
BODY = json.dumps({"instances": [1.0, 2.0, 5.0, 7.0]}).encode()
WANT = b"3.5, 4.0, 5.5, 6.5"


def need_s(duration_s: float, repeats: int) -> float:
    return 30.0 + len(CONCURRENCY) * len(ROUTES) * repeats * (duration_s + 1.0)


def _models() -> dict:
    return {f"hp3_{r}": {"triton": HPT, "signatures": {"serving_default": {"elementwise": True}}} for r in ROUTES}


def _legacy_models() -> dict:
    """The stand-in legacy server answers from another Triton model (its own python-backend instance, as
    a separate server would be): half_plus_two's y2 = 0.5·x + 3 under the name y, the same values."""
    sig = {"serving_default": {"inputs": {"x": "x"}, "outputs": {"y": "y2"}}}
    return {f"hp3_{r}": {"triton": "half_plus_two", "signatures": sig} for r in ROUTES}


async def _round(url: str, duration_s: float, callers: int) -> tuple[list[float], int]:
    """(latencies in seconds, errors) of ``callers`` closed-loop callers for ``duration_s``."""
    lat: list[float] = []
    errors = 0
    end = time.monotonic() + duration_s
    conn = aiohttp.TCPConnector(limit=callers)
    async with aiohttp.ClientSession(connector=conn) as http:
        async def caller():
            nonlocal errors
            while time.monotonic() < end:
                t0 = time.perf_counter()
                async with http.post(url, data=BODY, headers={"Content-Type": "application/json"}) as r:
                    body = await r.read()
                lat.append(time.perf_counter() - t0)
                if r.status != 200 or WANT not in body:
                    errors += 1

        await asyncio.gather(*(caller() for _ in range(callers)))
    return lat, errors


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def run(triton_target: str, tmp: Path, duration_s: float, repeats: int) -> dict:
    def rounds(front, route: str, duration: float, callers: int):
        return _round(f"{front.url('tfserving_rest')}/v1/models/hp3_{route}:predict", duration, callers)

    return measure(triton_target, tmp, duration_s, repeats, listener="tfserving_rest", name="shadow",
                   legacy_link=lambda legacy: {"http": legacy.url("tfserving_rest")}, rounds=rounds)


def measure(triton_target: str, tmp: Path, duration_s: float, repeats: int, *, listener: str, name: str,
            legacy_link: Callable[[Any], dict], rounds: Callable[[Any, str, float, int], Awaitable]) -> dict:
    """The cut-over rows' bench on one TF Serving ``listener`` (this file's REST, bench/shadow_grpc.py's
    gRPC): the legacy and front gateways (their folders ``{name}-legacy``, ``{name}-front``), the front's
    ``legacy`` section pointed at the legacy one by ``legacy_link(legacy gateway)``, and
    ``rounds(front, route, duration_s, callers)`` -> (latencies, errors) alternated per route."""
    from tests.support import free_port, gateway_config, start_gateway, stop_gateway

    listeners = (listener, "admin_http")
    legacy = start_gateway(gateway_config(triton_target, {n: free_port() for n in listeners}, {
        "log_level": "WARNING", "access_log": False, "dialects": {"tfserving": {"models": _legacy_models()}}}),
        _folder(tmp, f"{name}-legacy"))
    front = None
    try:
        front = start_gateway(gateway_config(triton_target, {n: free_port() for n in listeners}, {
            "log_level": "WARNING", "access_log": False, "dialects": {"tfserving": {"models": _models(), "legacy": {
                **legacy_link(legacy), "shadow_concurrency": 64, "mismatches": {"path": str(tmp / f"{name}-migration")},
                "models": {"hp3_legacy": {"route": "legacy"}, "hp3_shadow": {"route": "shadow"}}}}}}),
            _folder(tmp, f"{name}-front"))
        pids = procstat.process_tree(front.proc.pid)
        for route in ROUTES:  # warm-up
            asyncio.run(rounds(front, route, 0.5, 2))
        time.sleep(0.5)
        out = {"concurrency": list(CONCURRENCY), "duration_s": duration_s, "repeats": repeats, "rows": []}
        for callers in CONCURRENCY:
            samples: dict[str, list[float]] = {r: [] for r in ROUTES}
            cpu: dict[str, list[tuple[int, int]]] = {r: [] for r in ROUTES}
            errors = dict.fromkeys(ROUTES, 0)
            for _ in range(repeats):
                for route in ROUTES:
                    before = procstat.ticks(pids)
                    lat, err = asyncio.run(rounds(front, route, duration_s, callers))
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


def _folder(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _counts(gw) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(gw.url("admin_http") + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "gateway_migration_total":
                out[s.labels["outcome"]] = out.get(s.labels["outcome"], 0) + s.value
    return out


def markdown(sc: dict) -> list[str]:
    return table(sc, "TF Serving REST small predict", "callers", "bench/shadow.py")


def table(sc: dict, what: str, callers: str, source: str) -> list[str]:
    """bench/report.md's section of a cut-over row (this file's, bench/shadow_grpc.py's)."""
    from bench.report import num

    lines = ["", f"## Cut-over: {what} on the shadow route (one front worker)", ""]
    if sc.get("skipped"):
        return lines + [f"skipped: {sc['skipped']}"]
    lines += [f"Closed-loop {callers}, {sc['repeats']} × {sc['duration_s']:g} s per route, alternated; the legacy "
              f"server is a second gateway ({source}). CPU: the front gateway's alone. Comparisons "
              f"counted: {sc.get('migration', {})}.", "",
              "| callers | route | requests | errors | p50 ms | p99 ms | front CPU µs/req |",
              "|---|---|---|---|---|---|---|"]
    for r in sc["rows"]:
        lines.append(f"| {r['concurrency']} | {r['route']} | {r['requests']} | {r['errors']} | {num(r['p50_ms'])} | "
                     f"{num(r['p99_ms'])} | {num(r['cpu_us'])} |")
    return lines


def main() -> int:
    return alone(run, markdown, "gateway-bench-shadow-", repeats=3)


def alone(run_row: Callable[[str, Path, float, int], dict], markdown_row: Callable[[dict], list[str]], prefix: str,
          repeats: int) -> int:
    """``python -m bench.shadow`` (or ``bench.shadow_grpc``): the row on a Triton of its own, 3 s a round."""
    import tempfile

    from gateway.local import localtriton
    from gateway.settings import LocalTriton
    from tests.support import ROOT, free_port

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    tp = localtriton.start(LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository"),
                                       workdir=str(tmp / "triton"), http_port=free_port(), grpc_port=free_port(),
                                       metrics_port=free_port(), startup_timeout_s=180), ROOT,
                           log_path=tmp / "triton.log")
    try:
        res = run_row(tp.grpc_target, tmp, 3.0, repeats)
    finally:
        tp.stop()
    print("\n".join(markdown_row(res)))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
