"""The gateway against KServe's transformer pattern, side by side (``make bench-kserve``).

Both sides take the same TF Serving style request, ``POST /v1/models/saved_model_half_plus_three:predict``
with ``{"instances": [...]}``, and reach the same CPU Triton over KServe V2 gRPC:

- the gateway: one worker, ``make run``'s settings (gateway.yaml: access log, fast path...), its
  TF Serving REST listener;
- KServe: bench/kserve_transformer.py, a ``kserve.Model`` whose preprocess builds a V2 ``InferRequest``
  and whose predict is the SDK's own gRPC client to ``--predictor_host`` (``--predictor_protocol
  grpc-v2``), postprocess back to ``{"predictions": [...]}``, served by ``kserve.ModelServer`` with
  ``--workers`` 1 (its default, and the gateway's count) or what ``--kserve-workers`` lists. It runs
  in .venv-kserve (requirements/bench-kserve.txt), never in the gateway's environment.

First each request is sent once to both and their answers compared (the parsed predictions as FP32,
and whether the bytes are the same: the gateway writes TF Serving's bytes, KServe orjson's). Then the
same wrk load (the four-float predict at several concurrencies, the 150,528-float one at one) runs on
each side in turn, the order swapped every round: req/s, p50/p99 latency, CPU µs per request of the
side's processes and of Triton (utime+stime from /proc, bench/procstat.py). Medians and ranges over
the rounds go to bench/results/kserve/ (results.md, results.json). Cores are pinned as ``make bench``
pins them (BENCH_CPUS_LOAD, BENCH_CPUS_TRITON, and BENCH_CPUS_GATEWAY for the gateway and the
transformer alike: their runs never overlap). Everything listens on 127.0.0.1;
Triton, the gateway and the transformer are stopped at the end, on an error and on Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import yaml

from bench import cases, procstat, report, stats, wrk
from bench.stack import Session, Stack, cpu_list, http, pin
from tests.support import ROOT, free_port, gateway_config, start_gateway, wait_http

KSERVE_VENV = ROOT / ".venv-kserve"
TRANSFORMER = ROOT / "bench" / "kserve_transformer.py"
SIDES = ("gateway", "kserve")
METRICS = ("req_per_s", "p50_ms", "p99_ms", "side_cpu_us", "triton_cpu_us")
JSON_HEADERS = {"Content-Type": "application/json"}
CPU_VARS = ("BENCH_CPUS_LOAD", "BENCH_CPUS_TRITON", "BENCH_CPUS_GATEWAY")


@dataclass(frozen=True)
class Load:
    key: str  # "small", "image"
    title: str
    concurrency: int
    instances: tuple[float, ...]

    @property
    def body(self) -> bytes:
        return request_body(self.instances)


def request_body(instances) -> bytes:
    return b'{"instances": ' + orjson.dumps(np.asarray(instances, dtype=np.float32),
                                            option=orjson.OPT_SERIALIZE_NUMPY) + b"}"


def loads(small_concurrency: list[int], image_concurrency: int | None) -> list[Load]:
    """The four-float predict at each of ``small_concurrency``, then the image-sized one (None: left out)."""
    out = [Load("small", "TF Serving REST predict, 4 FP32", c, tuple(cases.SMALL)) for c in small_concurrency]
    if image_concurrency:
        image = tuple(float(v) for v in cases.image_values())
        out.append(Load("image", f"TF Serving REST predict, {cases.IMAGE_FLOATS:,} FP32", image_concurrency, image))
    return out


def side_order(round_no: int) -> tuple[str, ...]:
    """Who goes first alternates by round, so drift in the machine's load falls on both sides alike."""
    return SIDES if round_no % 2 == 0 else SIDES[::-1]


# -- the answers --------------------------------------------------------------------------------
def compare_answers(instances, gateway_raw: bytes, kserve_raw: bytes) -> dict:
    """Both answers' ``predictions`` against each other and against x/2 + 3, as FP32 (the wire carries
    FP32; how each side prints it differs); and whether the bytes are the same."""
    want = np.asarray(instances, dtype=np.float32) * np.float32(0.5) + np.float32(3)
    got = {}
    for side, raw in (("gateway", gateway_raw), ("kserve", kserve_raw)):
        try:
            got[side] = np.asarray(json.loads(raw)["predictions"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            got[side] = None
            got[f"{side}_error"] = f"{type(e).__name__}: {e}"
    g, k = got["gateway"], got["kserve"]
    same = g is not None and k is not None and g.shape == k.shape and bool(np.array_equal(g, k))
    out = {
        "same_values": same,
        "gateway_correct": g is not None and g.shape == want.shape and bool(np.array_equal(g, want)),
        "kserve_correct": k is not None and k.shape == want.shape and bool(np.array_equal(k, want)),
        "same_bytes": gateway_raw == kserve_raw,
        "gateway_bytes": len(gateway_raw),
        "kserve_bytes": len(kserve_raw),
        "gateway_head": gateway_raw[:60].decode("utf-8", "replace"),
        "kserve_head": kserve_raw[:60].decode("utf-8", "replace"),
    }
    for side in SIDES:
        if f"{side}_error" in got:
            out[f"{side}_error"] = got[f"{side}_error"]
    return out


# -- the KServe side ----------------------------------------------------------------------------
def transformer_command(python: Path, model: str, triton_grpc: str, http_port: int, workers: int,
                        extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The transformer as a KServe deployment starts one (its ModelServer's arguments), on 127.0.0.1:
    its own gRPC listener off (the load is REST; it would listen on every interface); ``extra``
    last (``--enable_latency_logging false``...)."""
    return [str(python), str(TRANSFORMER), "--model_name", model, "--predictor_host", triton_grpc,
            "--predictor_protocol", "grpc-v2", "--http_port", str(http_port), "--enable_grpc", "false",
            "--workers", str(workers), *extra]


class Transformer(Session):
    """bench/kserve_transformer.py in a session of its own (its workers are its process group; ``stop``
    ends the group)."""

    def __init__(self, tmp: Path, triton_grpc: str, model: str, workers: int, extra: list[str] | None = None):
        self.tmp, self.triton_grpc, self.model, self.workers = tmp, triton_grpc, model, workers
        self.extra = list(extra or [])
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.pids: list[int] = []
        self.log_path = tmp / f"kserve-w{workers}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> None:
        python = KSERVE_VENV / "bin" / "python"
        if not python.exists():
            raise RuntimeError(f"{python} is missing: make bench-kserve installs it (requirements/bench-kserve.txt)")
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                transformer_command(python, self.model, self.triton_grpc, self.port, self.workers, self.extra),
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_http(f"{self.url}/v1/models/{self.model}", timeout=timeout, proc=self.proc)
            want = 1 if self.workers == 1 else self.workers + 1
            deadline = time.monotonic() + 30
            while len(self.pids) < want and time.monotonic() < deadline:
                self.pids = procstat.process_tree(self.proc.pid)
                time.sleep(0.2)
        except Exception:
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"the KServe transformer did not start:\n{tail}") from None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


# -- the gateway side ---------------------------------------------------------------------------
def make_run_config(triton_grpc: str, tf_port: int, admin_port: int, path: Path = ROOT / "gateway.yaml",
                    v2_grpc_port: int | None = None) -> dict:
    """gateway.yaml (what ``make run`` serves with) pointed at this Triton, with only the TF Serving REST
    and admin listeners (and the V2 gRPC passthrough on ``v2_grpc_port``), on free 127.0.0.1 ports."""
    conf = yaml.safe_load(path.read_text())
    conf.pop("local_triton", None)  # `gateway serve` talks to the Triton named in upstream.grpc
    ports = {"tfserving_rest": tf_port, "admin_http": admin_port}
    if v2_grpc_port is not None:
        ports["v2_grpc"] = v2_grpc_port
    conf["listeners"] = gateway_config(triton_grpc, ports)["listeners"]
    conf.setdefault("upstream", {})["grpc"] = triton_grpc
    return conf


# -- measuring ----------------------------------------------------------------------------------
def measure(url: str, script: Path, concurrency: int, seconds: float, side_pids: list[int],
            triton_pids: list[int], timeout_s: float) -> dict:
    """One wrk run and the CPU time the side's processes and Triton spent on it."""
    before = procstat.ticks(side_pids), procstat.ticks(triton_pids)
    r = wrk.run(url, script, concurrency, seconds, timeout_s=timeout_s)
    after = procstat.ticks(side_pids), procstat.ticks(triton_pids)
    out = {"requests": r.requests, "duration_s": r.duration_s, "req_per_s": r.requests_per_s,
           "p50_ms": r.latency_s["50"] * 1e3 if r.requests else None,
           "p99_ms": r.latency_s["99"] * 1e3 if r.requests else None, "errors": r.errors,
           "side_cpu_us": procstat.us_per_request(before[0], after[0], r.requests),
           "triton_cpu_us": procstat.us_per_request(before[1], after[1], r.requests),
           "side_ticks": after[0] - before[0], "triton_ticks": after[1] - before[1]}
    if r.errors:
        out["error"] = f"{r.non_2xx} non-2xx, socket errors {r.socket_errors}"
    return out


def summarise(runs: list[dict]) -> dict:
    """Median and range of each metric over the runs without errors."""
    clean = [r for r in runs if not r.get("errors")]
    return {m: (s.as_dict() if (s := stats.spread([r.get(m) for r in clean])) else None) for m in METRICS}


def _median(summary: dict, metric: str) -> float | None:
    s = summary.get(metric)
    return s["median"] if s else None


def per_round(gateway_runs: list[dict], kserve_runs: list[dict], metric: str = "req_per_s") -> list[float]:
    """gateway ÷ KServe of ``metric`` round by round (the two runs of a round are adjacent in time, so
    the machine's drift falls on both); rounds where either side had errors or no value are left out."""
    out = []
    for g, k in zip(gateway_runs, kserve_runs, strict=False):
        if g.get("errors") or k.get("errors") or g.get(metric) is None or not k.get(metric):
            continue
        out.append(g[metric] / k[metric])
    return out


def compare(gateway: dict, kserve: dict, target: float = 3.0, rounds: list[float] | None = None) -> dict:
    """The gateway's throughput over KServe's, KServe's CPU per request over the gateway's (each of the
    medians), whether the throughput ratio reaches ``target``; ``rounds``: the throughput ratio of each
    round (``per_round``), kept as its spread."""
    def over(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    throughput = over(_median(gateway, "req_per_s"), _median(kserve, "req_per_s"))
    spread = stats.spread(rounds or [])
    return {
        "throughput_x": throughput,
        "meets_target": None if throughput is None else throughput >= target,
        "target_x": target,
        "throughput_x_rounds": spread.as_dict() if spread else None,
        "cpu_per_request_x": over(_median(kserve, "side_cpu_us"), _median(gateway, "side_cpu_us")),
        "p50_x": over(_median(kserve, "p50_ms"), _median(gateway, "p50_ms")),
    }


# -- the report ---------------------------------------------------------------------------------
def _oneline(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("`", "'")


def _yes(v: bool | None) -> str:
    return "–" if v is None else ("yes" if v else "**no**")


def markdown(res: dict) -> str:
    meta = res.get("meta", {})
    set_ = meta.get("settings", {})
    lines = [
        "# The gateway against KServe's transformer (bench/kserve_side.py)", "",
        f"{meta.get('started', '?')}; KServe's ModelServer with "
        f"{' '.join(set_.get('kserve_args') or []) or 'its default arguments'}; "
        f"{'cores ' + ', '.join(f'{k}={v}' for k, v in set_['cpus'].items()) if set_.get('cpus') else 'no core pinned'}; "
        f"{set_.get('rounds', '?')} rounds × {set_.get('seconds', '?')} s per side "
        f"and row, sides alternated (round by round: each round's gateway ÷ KServe req/s, the two runs "
        f"adjacent in time); load average {meta.get('loadavg_before', '?')} before, "
        f"{meta.get('loadavg_after', '?')} after (a shared machine: CPU per request is the steadier figure). "
        f"Cells: median (min–max) over the rounds.", "",
        "## The same answer", "",
    ]
    lines += report._table(
        ["request", "same predictions (FP32)", "both = x/2+3", "same bytes", "gateway bytes", "KServe bytes"],
        [[c["load"], _yes(c["same_values"]), _yes(c["gateway_correct"] and c["kserve_correct"]), _yes(c["same_bytes"]),
          str(c["gateway_bytes"]), str(c["kserve_bytes"])] for c in res.get("checks", [])])
    heads = [f"- {c['load']}: gateway `{_oneline(c['gateway_head'])}`…, KServe `{_oneline(c['kserve_head'])}`…"
             for c in res.get("checks", [])]
    lines += ["", *heads, ""]
    for run in res.get("configs", []):
        lines += [f"## KServe ModelServer with {run['kserve_workers']} worker{'s' if run['kserve_workers'] != 1 else ''}, "
                  f"gateway with {run['gateway_workers']}", ""]
        rows, ratio_rows = [], []
        for row in run["rows"]:
            if row.get("skipped"):
                rows.append([row["title"], str(row["concurrency"]), "–", f"skipped: {row['skipped']}", "", "", "", ""])
                continue
            for side in SIDES:
                s = row[side]["summary"]
                rows.append([row["title"], str(row["concurrency"]), side, report.cell(s["req_per_s"]),
                             report.cell(s["p50_ms"]), report.cell(s["p99_ms"]), report.cell(s["side_cpu_us"]),
                             report.cell(s["triton_cpu_us"])])
            c = row["compare"]
            ratio_rows.append([row["title"], str(row["concurrency"]), report.times(c["throughput_x"]),
                               report.times_spread(c.get("throughput_x_rounds")), _yes(c["meets_target"]),
                               report.times(c["cpu_per_request_x"]), report.times(c["p50_x"])])
        lines += report._table(["request", "concurrency", "side", "req/s", "p50 ms", "p99 ms",
                                "side CPU µs/req", "Triton CPU µs/req"], rows)
        lines += [""]
        lines += report._table(["request", "concurrency", "throughput gateway/KServe", "round by round",
                                f"≥ {run['target_x']:g}×", "CPU/req KServe/gateway", "p50 KServe/gateway"], ratio_rows)
        lines += [""]
    errors = [f"- {e}" for e in res.get("errors", [])]
    if errors:
        lines += ["## Errors", "", *errors, ""]
    v = meta.get("versions", {})
    lines += [f"Versions: {', '.join(f'{k} {val}' for k, val in v.items())}; git {meta.get('git', {}).get('commit', '?')[:12]}"
              f"{' (dirty)' if meta.get('git', {}).get('dirty') else ''}.", ""]
    return "\n".join(lines)


def write(res: dict, out_dir: Path) -> list[Path]:
    return report.write_text(res, markdown(res), out_dir)


# -- the run ------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.kserve_side", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=8, help="length of each wrk run (default 8)")
    p.add_argument("--rounds", type=int, default=3, help="runs per side and row, sides alternated (default 3)")
    p.add_argument("--warmup", type=float, default=2, help="unrecorded run per side before each row (default 2 s)")
    p.add_argument("--concurrency", default="1,8,64", help="of the four-float predict (default 1,8,64)")
    p.add_argument("--image-concurrency", type=int, default=2, help="of the 150,528-float predict; 0: left out")
    p.add_argument("--image-max-s", type=float, default=10,
                   help="the image rows are skipped when one answer takes longer than this (default 10 s)")
    p.add_argument("--kserve-workers", default="",
                   help="ModelServer worker counts, one configuration each (default: 1, its default, and the "
                        "gateway's count when that differs)")
    p.add_argument("--kserve-args", default="",
                   help="more ModelServer arguments, e.g. '--enable_latency_logging false' (default: none: its defaults)")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "kserve")
    a = p.parse_args(argv)
    a.concurrency = [int(c) for c in str(a.concurrency).split(",") if c.strip()]
    a.kserve_workers = [int(w) for w in str(a.kserve_workers).split(",") if w.strip()]
    a.kserve_args = shlex.split(a.kserve_args)
    if a.rounds < 1 or a.seconds < 1 or not a.concurrency:
        p.error("--rounds and --seconds must be at least 1, --concurrency name one or more")
    return a


def worker_counts(asked: list[int], gateway_workers: int) -> list[int]:
    """What ``--kserve-workers`` lists, or KServe's default (1) then the gateway's count, each once."""
    return list(dict.fromkeys(asked or [1, gateway_workers]))


def _raise_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def _script(tmp: Path, load: Load, scripts: dict) -> Path:
    if load.key not in scripts:
        body = tmp / f"kserve-side-{load.key}.json"
        body.write_bytes(load.body)
        script = tmp / f"kserve-side-{load.key}.lua"
        script.write_text(wrk.lua_script(body, JSON_HEADERS))
        scripts[load.key] = script
    return scripts[load.key]


def _check(load: Load, urls: dict[str, str]) -> tuple[dict, float]:
    """One request of ``load`` to each side; the comparison and the slower side's seconds."""
    raw, slowest = {}, 0.0
    for side in SIDES:
        t0 = time.monotonic()
        status, _, body = http("POST", urls[side], load.body, JSON_HEADERS, timeout=120)
        slowest = max(slowest, time.monotonic() - t0)
        if status != 200:
            raise RuntimeError(f"{side} answered HTTP {status} to the {load.key} predict: {body[:300]!r}")
        raw[side] = body
    return {"load": load.key, **compare_answers(load.instances, raw["gateway"], raw["kserve"])}, slowest


def run_config(stack: Stack, transformer: Transformer, gateway_url: str, gateway_workers: int,
               all_loads: list[Load], a: argparse.Namespace, res: dict) -> dict:
    urls = {"gateway": gateway_url + cases.TF_PREDICT_PATH, "kserve": transformer.url + cases.TF_PREDICT_PATH}
    pids = {"gateway": stack.gateway_pids, "kserve": transformer.pids}
    scripts: dict = {}
    out = {"kserve_workers": transformer.workers, "gateway_workers": gateway_workers, "target_x": 3.0,
           "pids": {**pids, "triton": stack.triton_pids()}, "rows": []}
    checked: dict[str, float] = {}
    for load in all_loads:
        row = {"load": load.key, "title": load.title, "concurrency": load.concurrency}
        out["rows"].append(row)
        if load.key not in checked:
            check, slowest = _check(load, urls)
            checked[load.key] = slowest
            if not any(c["load"] == load.key for c in res["checks"]):
                res["checks"].append(check)
            print(f"  {load.key}: same predictions {check['same_values']}, same bytes {check['same_bytes']} "
                  f"({check['gateway_bytes']} vs {check['kserve_bytes']} bytes), slower answer {slowest:.2f} s",
                  flush=True)
            if not (check["same_values"] and check["gateway_correct"] and check["kserve_correct"]):
                raise RuntimeError(f"the two sides answer the {load.key} predict differently: {check}")
        if checked[load.key] > a.image_max_s:
            row["skipped"] = f"one answer took {checked[load.key]:.1f} s (> {a.image_max_s:g} s)"
            continue
        script = _script(stack.tmp, load, scripts)
        timeout_s = max(30.0, checked[load.key] * 20)
        for side in SIDES:
            row[side] = {"runs": []}
            if a.warmup >= 1:
                measure(urls[side], script, load.concurrency, a.warmup, pids[side], stack.triton_pids(), timeout_s)
        for r in range(a.rounds):
            for side in side_order(r):
                stack.assert_running()
                if not transformer.alive():
                    raise RuntimeError(f"the KServe transformer exited:\n{transformer.log_tail()}")
                m = measure(urls[side], script, load.concurrency, a.seconds, pids[side], stack.triton_pids(), timeout_s)
                row[side]["runs"].append(m)
                print(f"  {load.key} c={load.concurrency} round {r + 1} {side:7s}: {m['req_per_s']:8.1f} req/s, "
                      f"p50 {m['p50_ms'] or 0:.2f} ms, p99 {m['p99_ms'] or 0:.2f} ms, "
                      f"{side} {m['side_cpu_us'] or 0:.0f} µs CPU/req, Triton {m['triton_cpu_us'] or 0:.0f}"
                      f"{', ' + m['error'] if m.get('error') else ''}", flush=True)
        for side in SIDES:
            row[side]["summary"] = summarise(row[side]["runs"])
        row["compare"] = compare(row["gateway"]["summary"], row["kserve"]["summary"],
                                 rounds=per_round(row["gateway"]["runs"], row["kserve"]["runs"]))
    return out


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    wrk.binary()  # fail early, before starting anything
    if os.environ.get("BENCH_CPUS_LOAD"):  # as make bench: inherited by wrk
        os.sched_setaffinity(0, cpu_list(os.environ["BENCH_CPUS_LOAD"]))
    started, t0, load_before = datetime.now(UTC), time.monotonic(), report.loadavg()
    all_loads = loads(a.concurrency, a.image_concurrency or None)
    res: dict = {"checks": [], "configs": [], "errors": []}
    triton_version = "?"
    with Stack(log_dir=a.results / "logs") as stack:
        transformer: Transformer | None = None
        try:
            tp = stack.start_triton()
            triton_version = stack.triton_version()
            tf_port, admin_port = free_port(), free_port()
            conf = make_run_config(tp.grpc_target, tf_port, admin_port)
            gateway_workers = conf.get("workers", 1)
            folder = stack.tmp / "gateway"
            folder.mkdir()
            stack.gateway = start_gateway(conf, folder)
            stack.gateway_pids = stack._wait_workers(gateway_workers)
            pin(stack.gateway_pids, "BENCH_CPUS_GATEWAY")  # Triton: BENCH_CPUS_TRITON, in start_triton
            print(f"Triton {triton_version} at {tp.grpc_target}; gateway ({gateway_workers} worker, gateway.yaml) "
                  f"pids {stack.gateway_pids}", flush=True)
            for workers in worker_counts(a.kserve_workers, gateway_workers):
                transformer = Transformer(stack.tmp, tp.grpc_target, cases.HPT, workers, a.kserve_args)
                transformer.start()
                pin(transformer.pids, "BENCH_CPUS_GATEWAY")  # the gateway's cores: the two never run at once
                print(f"KServe transformer, {workers} worker{'s' if workers != 1 else ''}: pids {transformer.pids}",
                      flush=True)
                try:
                    res["configs"].append(run_config(stack, transformer, stack.gateway.url("tfserving_rest"),
                                                     gateway_workers, all_loads, a, res))
                finally:
                    transformer.stop()
                    stack._keep_log(transformer.log_path, transformer.log_path.name)
                    transformer = None
        except (RuntimeError, wrk.WrkError, OSError) as e:
            res["errors"].append(str(e).splitlines()[0] if str(e) else type(e).__name__)
            print(f"bench-kserve: {e}", file=sys.stderr, flush=True)
        finally:
            if transformer is not None:
                transformer.stop()
    res["meta"] = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"), "wall_s": time.monotonic() - t0,
        "machine": report.machine(), "loadavg_before": load_before, "loadavg_after": report.loadavg(),
        "versions": {**report.versions(triton_version, report.wrk_version()), "kserve": kserve_version()},
        "git": report.git(ROOT),
        "settings": {"seconds": a.seconds, "rounds": a.rounds, "warmup": a.warmup, "concurrency": a.concurrency,
                     "image_concurrency": a.image_concurrency, "kserve_args": a.kserve_args,
                     "cpus": {v: os.environ[v] for v in CPU_VARS if os.environ.get(v)}, "clk_tck": procstat.CLK_TCK},
    }
    for path in write(res, a.results):
        print(f"wrote {path}")
    return 1 if res["errors"] else 0


def kserve_version() -> str:
    for dist in (KSERVE_VENV / "lib").glob("python*/site-packages/kserve-*.dist-info"):
        return dist.name.removeprefix("kserve-").removesuffix(".dist-info")
    return "?"


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # Stack.close and Transformer.stop ran in finally
        print("\nbench-kserve: interrupted; Triton, the gateway and the transformer are stopped", file=sys.stderr)
        raise SystemExit(130) from None
