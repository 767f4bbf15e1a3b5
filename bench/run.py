"""`make bench`: every path through the gateway, directly to Triton and through the floor, on a stack of its own.

Starts the local CPU Triton (gateway.local.localtriton), the gateway (`python -m gateway serve`,
tests/support.py) and the floor (bench/floor.py: each path done the least possible way on the
same stack) on free 127.0.0.1 ports, measures every case in bench/cases.py, then the
scaling of the small TF Serving REST predict with 1, 2 and nproc workers (beside Triton's own HTTP
at the same load: the ceiling) and the workers' memory, and the same for the V2 gRPC unary
passthrough and the V2 gRPC stream (their load spread over several connections and client processes,
beside Triton's gRPC);
writes bench/results/{results.json,results.md,results.png} and stops everything (also on Ctrl-C
and SIGTERM). Bounded: each run lasts its duration, and a case that would not fit in the
remaining budget is skipped, said at once, listed at the end and in results.md. By default the
budget is what every path and scaling row needs (``plan_seconds``, printed first): every row runs.

Environment (defaults: full / BENCH_QUICK=1):
  BENCH_QUICK=1            short runs for development
  BENCH_DURATION           seconds per run (3 / 2)
  BENCH_LLM_DURATION       seconds per LLM run (4 / 2)
  BENCH_REPEATS            repeats of every run (2 / 2)
  BENCH_WARMUP             seconds of warm-up per side and case (0.5 / 0.5)
  BENCH_IDLE               seconds of idle CPU measured after each gateway start (3 / 1)
  BENCH_CONCURRENCY        connections / callers for the small payloads (8)
  BENCH_BIG_CONCURRENCY    for the image-sized and 16 MiB payloads (2)
  BENCH_SCALING_CONCURRENCY  connections of the scaling runs (16); callers (calls, streams) of the gRPC ones
  BENCH_SCALING_CHANNELS   gRPC connections the gRPC scaling runs spread their callers over (16): one
                           connection reaches one worker, so this bounds how many workers share the load
  BENCH_SCALING_CLIENTS    client processes of the gRPC scaling runs (nproc / 4, at least 1): one Python
                           client tops out near 10 k calls/s
  BENCH_WORKERS            gateway workers of the main runs (1)
  BENCH_SCALING_WORKERS    comma-separated worker counts of the scaling runs (1,2,nproc)
  BENCH_TRITON_INSTANCES   python-backend instances per CPU model (the repository's own count, 1): one
                           instance runs one request at a time, so on many cores it is the ceiling
  BENCH_WRK_THREADS        wrk threads (1; more where one wrk thread cannot keep many workers busy)
  BENCH_FLOOR=0            no floor runs (a third less time)
  BENCH_BUDGET_S           wall-clock budget of the measurements (default: what every row needs, plus a quarter);
                           a smaller one skips the rows that no longer fit, each named
  BENCH_ONLY               comma-separated case keys (v2_unary, v2_stream, v2_rest_json, v2_rest_binary,
                           tf_rest_small, tf_rest_image,
                           tf_grpc, grps_gtensors, grps_bin, v2_rest_big, v2_grpc_big, llm_mindie,
                           llm_openai, scaling, scaling_grpc, scaling_stream, llm_added, llm_streams,
                           llm_tokenize: the last three on a stack of their own, bench/llmscale.py;
                           shadow: the cut-over row, two more gateways beside the bench's Triton,
                           bench/shadow.py; shadow_grpc: the same on TF Serving gRPC, bench/shadow_grpc.py,
                           run only when named: the default run's plan stays under 15 minutes)
  BENCH_RESULTS            output folder (bench/results)
  BENCH_UPSTREAM_TRANSPORT=grpc|h2  the gateway's upstream.transport (unset: the default, h2)
  BENCH_UPSTREAM_CANCEL=streams|all|none  the gateway's upstream.cancel (unset: the default, streams; all
                           cancels every call whose client left, as the gateway did before: Triton 2.51 can crash)
  BENCH_GRPC_SERVER=h2|grpc  the gateway's grpc_server: its gRPC listeners on h2serve or grpc.aio (unset: the default)
  BENCH_CPUS_LOAD / BENCH_CPUS_GATEWAY / BENCH_CPUS_TRITON  CPU lists ("0-3,8") to pin the load
                           generators (this process and what it starts), the gateway (and the floor)
                           and Triton to: cores that are each side's alone (unset: not pinned)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from bench import cases as cases_mod
from bench import grpcload, llmload, llmscale, procstat, report, shadow, shadow_grpc, stats, wrk
from bench.stack import Stack, StackDied, cpu_list, http
from tests.support import ROOT

MIB = 1024 * 1024


# rows run only when BENCH_ONLY names them (the default run's plan stays under 15 minutes without them)
ASKED_ONLY = frozenset({"shadow_grpc"})


@dataclass(frozen=True)
class Settings:
    quick: bool
    duration_s: float
    llm_duration_s: float
    repeats: int
    warmup_s: float
    idle_s: float
    concurrency: int
    big_concurrency: int
    scaling_concurrency: int
    workers: int
    scaling_workers: tuple[int, ...]
    budget_s: float | None  # None: plan_seconds, every row
    only: tuple[str, ...]
    floor: bool = True
    wrk_threads: int = 1
    triton_instances: int | None = None
    scaling_channels: int = 16
    scaling_clients: int = 1

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        quick = env.get("BENCH_QUICK", "") not in ("", "0", "false", "no")

        def get(name: str, full, fast, typ=float):
            return typ(env.get(name) or (fast if quick else full))

        nproc = os.cpu_count() or 1
        return cls(
            quick=quick,
            duration_s=get("BENCH_DURATION", 3, 2),
            llm_duration_s=get("BENCH_LLM_DURATION", 4, 2),
            repeats=get("BENCH_REPEATS", 2, 2, int),
            warmup_s=get("BENCH_WARMUP", 0.5, 0.5),
            idle_s=get("BENCH_IDLE", 3, 1),
            concurrency=get("BENCH_CONCURRENCY", 8, 8, int),
            big_concurrency=get("BENCH_BIG_CONCURRENCY", 2, 2, int),
            scaling_concurrency=get("BENCH_SCALING_CONCURRENCY", 16, 16, int),
            workers=get("BENCH_WORKERS", 1, 1, int),
            scaling_workers=tuple(sorted({int(w) for w in env.get("BENCH_SCALING_WORKERS", "").split(",") if w.strip()}
                                         or {1, 2, nproc})),
            budget_s=float(env["BENCH_BUDGET_S"]) if env.get("BENCH_BUDGET_S") else None,
            only=tuple(k.strip() for k in env.get("BENCH_ONLY", "").split(",") if k.strip()),
            floor=env.get("BENCH_FLOOR", "1") not in ("0", "false", "no"),
            wrk_threads=get("BENCH_WRK_THREADS", 1, 1, int),
            triton_instances=int(env["BENCH_TRITON_INSTANCES"]) if env.get("BENCH_TRITON_INSTANCES") else None,
            scaling_channels=get("BENCH_SCALING_CHANNELS", 16, 16, int),
            scaling_clients=get("BENCH_SCALING_CLIENTS", max(1, nproc // 4), max(1, nproc // 4), int),
        )

    def wants(self, key: str) -> bool:
        if key in ASKED_ONLY:
            return key in self.only
        return not self.only or key in self.only


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _raise_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)


# -- one run of one side ------------------------------------------------------------------------
class Runner:
    def __init__(self, stack: Stack, settings: Settings):
        self.stack, self.s = stack, settings
        self._scripts: dict[int, Path] = {}

    def _script(self, side: cases_mod.Side) -> Path:
        key = id(side)
        if key not in self._scripts:
            n = len(self._scripts)
            body = self.stack.tmp / f"body-{n}.bin"
            body.write_bytes(side.body)
            script = self.stack.tmp / f"post-{n}.lua"
            script.write_text(wrk.lua_script(body, side.headers))
            self._scripts[key] = script
        return self._scripts[key]

    def check(self, side: cases_mod.Side) -> None:
        """One request, its answer checked: raises BadAnswer (or the transport's error)."""
        if side.kind in ("http", "llm"):
            status, _, body = http("POST", side.address, side.body, side.headers)
            cases_mod.expect(status == 200, f"HTTP {status}: {body[:200]!r}")
            side.check(body)
        elif side.kind == "grpc_unary":
            side.check(asyncio.run(grpcload.call_once(side.address, side.method, side.body)))
        elif side.kind == "grpc_stream":
            side.check(asyncio.run(grpcload.stream_once(side.address, side.method, side.body)))
        else:
            raise ValueError(side.kind)

    def load(self, side: cases_mod.Side, concurrency: int, duration: float, channels: int = 1,
             processes: int = 1) -> dict:
        """Load ``side`` for ``duration`` seconds: the run's numbers, without CPU. A gRPC load may
        spread its callers (calls or streams) over ``channels`` connections from ``processes``
        client processes."""
        if side.kind == "http":
            r = wrk.run(side.address, self._script(side), concurrency, duration, threads=self.s.wrk_threads)
            out = {"requests": r.requests, "duration_s": r.duration_s, "req_per_s": r.requests_per_s,
                   "p50_ms": r.latency_s["50"] * 1e3 if r.requests else None,
                   "p99_ms": r.latency_s["99"] * 1e3 if r.requests else None, "errors": r.errors}
            if r.errors:
                out["error"] = f"{r.non_2xx} non-2xx, socket errors {r.socket_errors}"
            return out
        if side.kind in ("grpc_unary", "grpc_stream"):
            r = grpcload.load(side.kind, side.address, side.method, side.body, concurrency, duration, channels, processes)
            out = {"requests": r.requests, "duration_s": r.duration_s, "req_per_s": r.requests_per_s,
                   "p50_ms": stats.percentile(r.latencies_s, 50) * 1e3 if r.latencies_s else None,
                   "p99_ms": stats.percentile(r.latencies_s, 99) * 1e3 if r.latencies_s else None,
                   "errors": r.errors}
            if r.errors:
                out["error"] = r.first_error
            return out
        if side.kind == "llm":
            r = asyncio.run(llmload.run(side.address, side.body, side.is_token, duration))
            pct = lambda xs, q: stats.percentile(xs, q) * 1e3 if xs else None  # noqa: E731
            out = {"requests": r.requests, "tokens": r.tokens, "duration_s": r.duration_s,
                   "req_per_s": r.requests_per_s, "tokens_per_s": r.tokens_per_s,
                   "ttft_p50_ms": pct(r.ttft_s, 50), "ttft_p99_ms": pct(r.ttft_s, 99),
                   "itl_p50_ms": pct(r.itl_s, 50), "itl_p99_ms": pct(r.itl_s, 99),
                   "ttft_samples": len(r.ttft_s), "itl_samples": len(r.itl_s), "errors": r.errors}
            if r.errors:
                out["error"] = r.first_error
            return out
        raise ValueError(side.kind)

    def measure(self, side: cases_mod.Side, concurrency: int, duration: float, hop: str | None = "gateway",
                channels: int = 1, processes: int = 1) -> dict:
        """A load run with the CPU time Triton and ``hop`` (the process in between: gateway, floor,
        or None when the load goes to Triton directly) spent on it; the ticks of every process."""
        pids = {"gateway": self.stack.gateway_pids, "floor": self.stack.floor_pids, "triton": self.stack.triton_pids()}
        before = {name: procstat.ticks(p) for name, p in pids.items()}
        out = self.load(side, concurrency, duration, channels, processes)
        after = {name: procstat.ticks(p) for name, p in pids.items()}
        if hop is not None:
            out[f"{hop}_cpu_us"] = procstat.us_per_request(before[hop], after[hop], out["requests"])
            if "tokens" in out:
                out[f"{hop}_cpu_us_token"] = procstat.us_per_request(before[hop], after[hop], out["tokens"])
        out["triton_cpu_us"] = procstat.us_per_request(before["triton"], after["triton"], out["requests"])
        for name in pids:
            out[f"{name}_ticks"] = after[name] - before[name]
        return out


METRICS = ("req_per_s", "p50_ms", "p99_ms", "gateway_cpu_us", "gateway_cpu_us_token", "floor_cpu_us",
           "floor_cpu_us_token", "triton_cpu_us", "tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
           "itl_p99_ms")
# one side's own process: no ratio by metric
HOP_CPU = ("gateway_cpu_us", "gateway_cpu_us_token", "floor_cpu_us", "floor_cpu_us_token")


def summarise(runs: list[dict]) -> dict:
    out = {}
    for metric in METRICS:
        s = stats.spread([r.get(metric) for r in runs])
        if s is not None:
            out[metric] = s.as_dict()
    return out


def _ratio(a: dict | None, b: dict | None) -> float | None:
    return stats.ratio(stats.Spread(**a) if a else None, stats.Spread(**b) if b else None)


def ratios(gateway: dict, other: dict) -> dict:
    """gateway ÷ direct (or ÷ floor) of the medians, metric by metric (the hops' own CPU apart)."""
    out = {}
    for metric in METRICS:
        if metric in HOP_CPU:
            continue
        r = _ratio(gateway.get(metric), other.get(metric))
        if r is not None:
            out[metric] = r
    return out


def floor_ratios(gateway: dict, floor: dict) -> dict:
    """gateway ÷ floor: every common metric, and ``cpu_us``, the gateway's CPU per request over the floor's."""
    out = ratios(gateway, floor)
    r = _ratio(gateway.get("gateway_cpu_us"), floor.get("floor_cpu_us"))
    if r is not None:
        out["cpu_us"] = r
    r = _ratio(gateway.get("gateway_cpu_us_token"), floor.get("floor_cpu_us_token"))
    if r is not None:  # the LLM streams: per token (a chat template can change how many a request yields)
        out["cpu_us_token"] = r
    return out


def case_need(case: cases_mod.Case, s: Settings) -> float:
    """Seconds a case's sides take (warm-up and repeats of each)."""
    duration = s.llm_duration_s if case.direct.kind == "llm" else s.duration_s
    sides = 2 + (1 if case.floor is not None and s.floor else 0)
    return sides * (s.warmup_s + s.repeats * (duration + 0.5)) + 2


def scaling_need(s: Settings) -> tuple[float, float]:
    """Seconds a scaling row takes before its worker counts (Triton direct), and for each of them."""
    return 2 * (s.warmup_s + s.repeats * (s.duration_s + 0.5)) + 15, s.warmup_s + s.repeats * (s.duration_s + 0.5) + 15


def plan_seconds(s: Settings, cases: list[cases_mod.Case]) -> float:
    """What every wanted case and scaling row needs, by the sums each checks against the budget."""
    total = sum(case_need(c, s) for c in cases if s.wants(c.key))
    first, each = scaling_need(s)
    rows = sum(s.wants(k) for k in ("scaling", "scaling_grpc", "scaling_stream"))
    shadow_need = sum(mod.need_s(s.duration_s, s.repeats) for key, mod in SHADOW_ROWS if s.wants(key))
    return total + rows * (first + each * len(s.scaling_workers)) + llm_scale_need(s) + shadow_need


def llm_scale_rows(s: Settings) -> tuple[str, ...]:
    return tuple(k for k in llmscale.ROWS if s.wants(k))


def llm_scale_need(s: Settings) -> float:
    rows = llm_scale_rows(s)
    return llmscale.need_s(s.llm_duration_s, s.repeats, rows) if rows else 0.0


def skipped_rows(res: dict) -> list[str]:
    """Every row the run skipped, with why."""
    out = [f"{c['title']} (conc {c['concurrency']}): {c['skipped']}" for c in res["cases"] if c.get("skipped")]
    for key in ("scaling", "scaling_grpc", "scaling_stream"):
        out += [f"{key}: {why}" for why in (res.get(key) or {}).get("skipped", [])]
    if (res.get("llm_scale") or {}).get("skipped"):
        out.append(f"{', '.join(res['llm_scale'].get('rows', []))}: {res['llm_scale']['skipped']}")
    for key, _mod in SHADOW_ROWS:
        if (res.get(key) or {}).get("skipped"):
            out.append(f"{key}: {res[key]['skipped']}")
    return out


def run_case(runner: Runner, case: cases_mod.Case, s: Settings, budget: Budget) -> dict:
    duration = s.llm_duration_s if case.direct.kind == "llm" else s.duration_s
    floor = case.floor if s.floor else None
    out = {"key": case.key, "kind": case.direct.kind, "title": case.title, "payload": case.payload,
           "concurrency": case.concurrency,
           "direct": {"how": case.direct.how, "runs": []}, "gateway": {"how": case.gateway.how, "runs": []},
           "ratio": {}, "errors": []}
    sides = [("direct", case.direct), ("gateway", case.gateway)] + ([("floor", floor)] if floor else [])
    need = case_need(case, s)
    if budget.left() < need:
        out["skipped"] = f"needed about {need:.0f} s, {budget.left():.0f} s of the budget left"
        print(f"  skipped: {out['skipped']}", flush=True)
        return out
    try:
        runner.stack.assert_running()
    except StackDied as e:  # nothing measured past it: the rest of the bench is skipped, its results written
        out["skipped"] = e.headline
        print(f"  skipped: {out['skipped']}", flush=True)
        return out
    for label, side in list(sides):
        try:
            runner.check(side)
        except Exception as e:  # noqa: BLE001 - reported, and the case is skipped (the floor alone: left out)
            why = f"{label} answer check failed: {type(e).__name__}: {e}"
            if label == "floor":
                sides.remove((label, side))
                out["errors"].append(why)
                print(f"  no floor: {why}", flush=True)
                continue
            out["skipped"] = why
            print(f"  skipped: {out['skipped']}", flush=True)
            return out
    if len(sides) == 3:
        out["floor"] = {"how": floor.how, "runs": []}
    try:
        for _, side in sides:
            runner.load(side, case.concurrency, s.warmup_s)
        for rep in range(s.repeats):
            for label, side in sides if rep % 2 == 0 else sides[::-1]:  # interleaved, alternating order
                run = runner.measure(side, case.concurrency, duration, hop=None if label == "direct" else label)
                out[label]["runs"].append(run)
                if run.get("error"):
                    out["errors"].append(f"{label} repeat {rep + 1}: {run['errors']} errors ({run['error']})")
                print(f"  {label:<8} {_line(run)}", flush=True)
    except Exception as e:  # noqa: BLE001 - a load that could not run: the case is skipped, the bench goes on
        out["skipped"] = f"a load failed: {type(e).__name__}: {e}"
        print(f"  skipped: {out['skipped']}", flush=True)
        return out
    for label, _ in sides:
        out[label]["summary"] = summarise(out[label]["runs"])
    out["ratio"] = ratios(out["gateway"]["summary"], out["direct"]["summary"])
    if "floor" in out:
        out["floor_ratio"] = floor_ratios(out["gateway"]["summary"], out["floor"]["summary"])
    if case.direct.kind == "llm":
        out["samples"] = {}
        for label, _ in sides:
            n = [r["ttft_samples"] for r in out[label]["runs"]]
            out["samples"][label] = f"{min(n)}–{max(n)}" if min(n) != max(n) else str(n[0])
    return out


def _line(run: dict) -> str:
    keys = ("req_per_s", "p50_ms", "p99_ms", "ttft_p50_ms", "itl_p50_ms", "gateway_cpu_us", "floor_cpu_us",
            "triton_cpu_us", "errors")
    return "  ".join(f"{k}={report.num(run[k])}" for k in keys if k in run and run[k] is not None)


# -- memory and scaling -------------------------------------------------------------------------
def idle_snapshot(stack: Stack, seconds: float) -> dict[int, dict]:
    """Memory right after start-up, and the CPU each process burns with no request at all."""
    before = {pid: procstat.ticks([pid]) for pid in stack.gateway_pids}
    time.sleep(seconds)
    out = memory_snapshot(stack)
    for pid, t0 in before.items():
        out[pid]["idle_cpu_pct"] = (procstat.ticks([pid]) - t0) / procstat.CLK_TCK / seconds * 100
    return out


def memory_snapshot(stack: Stack) -> dict[int, dict]:
    return {pid: procstat.memory_kib(pid) for pid in stack.gateway_pids}


def memory_rows(workers: int, stack: Stack, idle: dict[int, dict], loaded: dict[int, dict]) -> list[dict]:
    rows = []
    workers_pids = set(stack.worker_pids())
    for pid in stack.gateway_pids:
        i, ld = idle.get(pid, {}), loaded.get(pid, {})
        mib = lambda kib: kib / 1024 if kib is not None else None  # noqa: E731
        rows.append({"workers": workers, "pid": pid, "role": "worker" if pid in workers_pids else "supervisor",
                     "idle_mib": mib(i.get("rss_kib")), "loaded_mib": mib(ld.get("rss_kib")),
                     "peak_mib": mib(ld.get("hwm_kib")), "idle_cpu_pct": i.get("idle_cpu_pct")})
    return rows


def scaling(runner: Runner, stack: Stack, s: Settings, budget: Budget, memory: list[dict] | None,
            case: cases_mod.Case, address: Callable[[Stack], str], channels: int = 1, clients: int = 1) -> dict:
    """``case`` through 1, 2, … workers (``s.scaling_workers``) at ``s.scaling_concurrency``, after
    Triton direct at the same load; ``address``: the gateway side's address once a gateway with that
    many workers runs. A gRPC case spreads its callers over ``channels`` connections from ``clients``
    processes (both sides alike); ``memory`` (None: not kept) gets each worker count's memory rows."""
    grpc_load = case.gateway.kind in ("grpc_unary", "grpc_stream")
    channels, clients = (channels, clients) if grpc_load else (1, 1)
    out = {"title": case.title, "concurrency": s.scaling_concurrency, "runs": [], "skipped": [],
           "direct": {"how": case.direct.how, "runs": []}}
    if grpc_load:
        out.update(kind=case.gateway.kind, channels=channels, clients=clients)
    need, each = scaling_need(s)
    if budget.left() < need:
        out["skipped"].append(f"all: needed about {need:.0f} s, {budget.left():.0f} s left")
        print(f"  skipped: {out['skipped'][-1]}", flush=True)
        return out
    try:
        stack.assert_running()
    except StackDied as e:
        out["skipped"].append(f"all: {e.headline}")
        print(f"  skipped: {out['skipped'][-1]}", flush=True)
        return out
    load = {"channels": channels, "processes": clients}
    try:  # the ceiling: Triton's own front end, same load
        runner.load(case.direct, s.scaling_concurrency, s.warmup_s, **load)
        for rep in range(s.repeats):
            run = runner.measure(case.direct, s.scaling_concurrency, s.duration_s, hop=None, **load)
            out["direct"]["runs"].append(run)
            print(f"  Triton direct repeat {rep + 1}: {_line(run)}", flush=True)
    except Exception as e:  # noqa: BLE001 - reported; the worker counts still run, and the rest of the bench
        _skip(out, f"Triton direct: {type(e).__name__}: {e}")
    out["direct"]["summary"] = summarise(out["direct"]["runs"])
    for workers in s.scaling_workers:
        if budget.left() < each:
            out["skipped"].append(f"{workers} workers: needed about {each:.0f} s, {budget.left():.0f} s left")
            print(f"  skipped: {out['skipped'][-1]}", flush=True)
            continue
        try:  # Triton (or the floor) gone since: nothing left to measure
            stack.assert_running()
            stack.start_gateway(workers)
        except RuntimeError as e:  # StackDied, or the gateway did not start
            _skip(out, f"{workers} workers: {getattr(e, 'headline', None) or str(e).splitlines()[0]}")
            continue
        idle = idle_snapshot(stack, s.idle_s)
        side = replace(case.gateway, address=address(stack))
        runs = []
        try:
            runner.check(side)
            runner.load(side, s.scaling_concurrency, s.warmup_s, **load)
            for rep in range(s.repeats):
                run = runner.measure(side, s.scaling_concurrency, s.duration_s, **load)
                runs.append(run)
                print(f"  workers={workers} repeat {rep + 1}: {_line(run)}", flush=True)
        except Exception as e:  # noqa: BLE001 - reported with the repeats it had; the next worker count runs
            _skip(out, f"{workers} workers: {type(e).__name__}: {e}")
        if memory is not None:
            memory.extend(r for r in memory_rows(workers, stack, idle, memory_snapshot(stack)) if workers != s.workers)
        if runs:
            out["runs"].append({"workers": workers, "pids": list(stack.gateway_pids), "runs": runs,
                                "summary": summarise(runs)})
    return out


def llm_scale(s: Settings, budget: Budget, tmp: Path, log_dir: Path) -> dict:
    """bench/llmscale.py's rows on their own Triton and gateway; skipped (and said) when they do not fit."""
    rows, need = llm_scale_rows(s), llm_scale_need(s)
    if budget.left() < need:
        out = {"rows": list(rows), "skipped": f"needed about {need:.0f} s, {budget.left():.0f} s of the budget left"}
        print(f"  skipped: {out['skipped']}", flush=True)
        return out
    t0 = time.monotonic()
    try:
        out = llmscale.run(ROOT, tmp, rows, s.llm_duration_s, s.repeats, log_dir)
    except Exception as e:  # noqa: BLE001 - reported as skipped, with why; the results are still written
        out = {"rows": list(rows), "skipped": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        print(f"  skipped: {out['skipped']}", flush=True)
    out["rows"], out["wall_s"] = list(rows), time.monotonic() - t0
    return out


# the cut-over rows: (BENCH_ONLY key, module), each module with need_s, run and markdown
SHADOW_ROWS = (("shadow", shadow), ("shadow_grpc", shadow_grpc))


def shadow_row(s: Settings, budget: Budget, stack: Stack, mod=shadow) -> dict:
    """bench/shadow.py (or shadow_grpc.py): the shadow route beside triton and legacy; skipped (and
    said) when it does not fit."""
    need = mod.need_s(s.duration_s, s.repeats)
    if budget.left() < need:
        out = {"skipped": f"needed about {need:.0f} s, {budget.left():.0f} s of the budget left"}
        print(f"  skipped: {out['skipped']}", flush=True)
        return out
    try:
        return mod.run(stack.triton.grpc_target, stack.tmp, s.duration_s, s.repeats)
    except Exception as e:  # noqa: BLE001 - reported as skipped, with why; the results are still written
        out = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        print(f"  skipped: {out['skipped']}", flush=True)
        return out


def _skip(out: dict, why: str) -> None:
    out["skipped"].append(why)
    print(f"  failed: {why}", flush=True)


# -- main ---------------------------------------------------------------------------------------
def main() -> int:
    s = Settings.from_env()
    if os.environ.get("BENCH_CPUS_LOAD"):  # inherited by wrk and the gRPC load processes
        os.sched_setaffinity(0, cpu_list(os.environ["BENCH_CPUS_LOAD"]))
    results_dir = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    wrk.binary()  # fail early, before starting anything
    budget = Budget(s.budget_s if s.budget_s is not None else 3600.0)  # set below, once the cases are known
    started = datetime.now(UTC)
    t_start = time.monotonic()
    load_before = report.loadavg()
    res: dict = {"cases": [], "scaling": None, "scaling_grpc": None, "scaling_stream": None, "memory": [],
                 "llm_scale": None, "shadow": None, "shadow_grpc": None}
    print(f"bench: {'quick' if s.quick else 'full'} mode, {s.repeats} × {s.duration_s:g} s per side"
          f"{'' if s.floor else ' (no floor)'}, "
          f"results in {results_dir}", flush=True)
    shutil.rmtree(results_dir / "logs", ignore_errors=True)  # this run's logs only
    with Stack(log_dir=results_dir / "logs") as stack:
        tp = stack.start_triton(s.triton_instances)
        if s.floor:
            stack.start_floor()
        stack.start_gateway(s.workers)
        idle = idle_snapshot(stack, s.idle_s)
        triton_version = stack.triton_version()  # read now: a Triton that dies later answers nothing
        print(f"Triton {triton_version} at {tp.grpc_target} (pids {stack.triton_pids()}), "
              f"gateway pids {stack.gateway_pids}, floor pids {stack.floor_pids}", flush=True)
        all_cases = cases_mod.build(
            tp.http_url, tp.grpc_target, stack.gateway.url, stack.gateway.target,
            s.concurrency, s.big_concurrency, latency_concurrency=1 if s.concurrency != 1 else None)
        if s.floor:
            cases_mod.with_floors(all_cases, stack.floor_http, stack.floor_grpc)
        plan = plan_seconds(s, all_cases)
        if s.budget_s is None:
            budget = Budget(plan * 1.25)
        print(f"the rows need about {plan:.0f} s; budget {budget.left():.0f} s"
              f"{' (BENCH_BUDGET_S: rows that no longer fit are skipped, each named)' if s.budget_s is not None else ''}",
              flush=True)
        runner = Runner(stack, s)
        for case in all_cases:
            if not s.wants(case.key):
                continue
            print(f"{case.title}, concurrency {case.concurrency}:", flush=True)
            res["cases"].append(run_case(runner, case, s, budget))
        res["memory"] = memory_rows(s.workers, stack, idle, memory_snapshot(stack))
        if s.wants("scaling"):
            print("Scaling, TF Serving REST small predict:", flush=True)
            small = next(c for c in all_cases if c.key == "tf_rest_small")
            res["scaling"] = scaling(runner, stack, s, budget, res["memory"], small,
                                     lambda st: st.gateway.url("tfserving_rest") + cases_mod.TF_PREDICT_PATH)
        if s.wants("scaling_grpc"):
            print(f"Scaling, V2 gRPC unary passthrough ({s.scaling_channels} connections, {s.scaling_clients} "
                  f"client process{'es' if s.scaling_clients != 1 else ''}):", flush=True)
            unary = next(c for c in all_cases if c.key == "v2_unary" and c.concurrency == s.concurrency)
            res["scaling_grpc"] = scaling(runner, stack, s, budget, None, unary, lambda st: st.gateway.target("v2_grpc"),
                                          channels=s.scaling_channels, clients=s.scaling_clients)
        if s.wants("scaling_stream"):
            print(f"Scaling, V2 gRPC streamed ({s.scaling_concurrency} streams on {s.scaling_channels} connections, "
                  f"{s.scaling_clients} client process{'es' if s.scaling_clients != 1 else ''}):", flush=True)
            streamed = next(c for c in all_cases if c.key == "v2_stream")
            res["scaling_stream"] = scaling(runner, stack, s, budget, None, streamed,
                                            lambda st: st.gateway.target("v2_grpc"),
                                            channels=s.scaling_channels, clients=s.scaling_clients)
        if any(s.wants(key) for key, _mod in SHADOW_ROWS):
            stack.stop_gateway()  # the rows' own gateways in its place
        if s.wants("shadow"):
            print("Cut-over, TF Serving REST small predict: triton, legacy, shadow (bench/shadow.py):", flush=True)
            res["shadow"] = shadow_row(s, budget, stack)
        if s.wants("shadow_grpc"):
            print("Cut-over, TF Serving gRPC small Predict: triton, legacy, shadow (bench/shadow_grpc.py):", flush=True)
            res["shadow_grpc"] = shadow_row(s, budget, stack, shadow_grpc)
        if llm_scale_rows(s):
            print("LLM at scale (model_repository_trtllm/, one worker):", flush=True)
            res["llm_scale"] = llm_scale(s, budget, stack.tmp, results_dir / "logs")
    res["meta"] = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "wall_s": time.monotonic() - t_start,
        "machine": report.machine(),
        "loadavg_before": load_before,
        "loadavg_after": report.loadavg(),
        "versions": report.versions(triton_version, report.wrk_version()),
        "git": report.git(ROOT),
        "settings": {**asdict(s), "scaling_workers": list(s.scaling_workers), "only": list(s.only),
                     "clk_tck": procstat.CLK_TCK},
    }
    for path in report.write(res, results_dir):
        print(f"wrote {path}")
    skipped = skipped_rows(res)
    if skipped:
        print(f"skipped {len(skipped)} row{'s' if len(skipped) != 1 else ''}:", *skipped, sep="\n  ", flush=True)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # everything is stopped and removed by now (Stack.close in finally)
        print("\nbench: interrupted; Triton and the gateway are stopped", file=sys.stderr)
        raise SystemExit(130) from None
