"""The gateway beside its two anchors in one run (``make bench-anchors``; the last part of ``make bench``).

One CPU Triton and one gateway (``make run``'s settings, gateway.yaml: one worker, access log on) on
free 127.0.0.1 ports, then:

- **nginx** (bench/nginx_side.py): Debian's nginx ``grpc_pass`` beside the gateway's V2 gRPC
  passthrough (:v2_grpc), small ModelInfer calls and ModelStreamInfer messages, gateway ÷ nginx
  server CPU per call (the C proxy: what a relay costs done in C);
- **kserve** (bench/kserve_side.py): KServe's transformer pattern beside the gateway's TF Serving
  REST listener, the same predict (what the same translation costs in the KServe SDK).

Everything is stopped at the end, on an error and on Ctrl-C/SIGTERM; each anchor that cannot run
(nginx not installed, .venv-kserve missing) is said in the output and in results.md, and the other
still runs. Writes bench/results/anchors/ (results.md, results.json, logs/). Under ``make bench``
it runs unless ``BENCH_ONLY`` is set without naming ``anchors``. Cores are pinned as ``make bench``
pins them (BENCH_CPUS_LOAD, BENCH_CPUS_TRITON, BENCH_CPUS_GATEWAY: the gateway, nginx and the
transformer alike, since their runs never overlap).

    python -m bench.anchors [--only nginx|kserve] [--rounds 3] [--seconds 5] [--concurrency 8]
                            [--kserve-args "--concurrency 8 --image-concurrency 0 --rounds 3 --seconds 6"]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import cases, kserve_side, nginx_side, procstat, report, wrk
from bench.stack import Stack, cpu_list, pin
from tests.support import ROOT, free_port, start_gateway

ANCHORS = ("nginx", "kserve")
KSERVE_DEFAULT = "--concurrency 8 --image-concurrency 0 --rounds 3 --seconds 6"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.anchors", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=ANCHORS, help="one anchor (default: both)")
    p.add_argument("--rounds", type=int, default=3, help="nginx: alternated rounds per kind (default 3)")
    p.add_argument("--seconds", type=float, default=5, help="nginx: seconds per side and round (default 5)")
    p.add_argument("--warmup", type=float, default=1, help="nginx: unrecorded seconds per side and kind (default 1)")
    p.add_argument("--concurrency", type=int, default=8, help="nginx: grpc.aio callers (default 8)")
    p.add_argument("--kserve-args", default=KSERVE_DEFAULT,
                   help=f"bench/kserve_side.py's options for its rows (default: {KSERVE_DEFAULT!r})")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "anchors")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.seconds <= 0 or a.concurrency < 1:
        p.error("--rounds, --seconds and --concurrency must be positive")
    a.kserve = kserve_side.parse_args(a.kserve_args.split())
    return a


def wanted_by_make_bench(env: dict | None = None) -> bool:
    """``make bench`` runs the anchors unless BENCH_ONLY names rows and not ``anchors``."""
    only = [k.strip() for k in (os.environ if env is None else env).get("BENCH_ONLY", "").split(",") if k.strip()]
    return not only or "anchors" in only


def _raise_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def kserve_row(stack: Stack, gateway_url: str, a: argparse.Namespace, triton: str) -> dict:
    """bench/kserve_side.py's rows against this run's gateway (one KServe worker, its default)."""
    res: dict = {"checks": [], "configs": [], "errors": []}
    if not (kserve_side.KSERVE_VENV / "bin" / "python").exists():
        res["skipped"] = f"{kserve_side.KSERVE_VENV} is missing (make bench-anchors installs it)"
        print(f"  skipped: {res['skipped']}", flush=True)
        return res
    transformer = kserve_side.Transformer(stack.tmp, triton, cases.HPT, 1, a.kserve.kserve_args)
    transformer.start()
    pin(transformer.pids, "BENCH_CPUS_GATEWAY")
    try:
        loads = kserve_side.loads(a.kserve.concurrency, a.kserve.image_concurrency or None)
        res["configs"].append(kserve_side.run_config(stack, transformer, gateway_url, 1, loads, a.kserve, res))
    finally:
        transformer.stop()
        stack._keep_log(transformer.log_path, transformer.log_path.name)
    res["version"] = kserve_side.kserve_version()
    return res


def markdown(res: dict) -> str:
    meta = res.get("meta", {})
    lines = ["# The gateway beside its anchors (bench/anchors.py)", "",
             f"{meta.get('started', '?')}; {meta.get('machine', {}).get('cpu', '?')}, "
             f"{meta.get('machine', {}).get('cores', '?')} cores; load average {meta.get('loadavg_before', '?')} "
             f"before, {meta.get('loadavg_after', '?')} after; one Triton {meta.get('triton', '?')} and one gateway "
             f"(gateway.yaml: one worker) for both anchors; git {meta.get('git', {}).get('commit', '?')[:12]}"
             f"{' (dirty)' if meta.get('git', {}).get('dirty') else ''}.", ""]
    if res.get("nginx") is not None:
        lines += nginx_side.markdown(res["nginx"])
    k = res.get("kserve")
    if k is not None:
        if k.get("skipped"):
            lines += ["## Against the KServe transformer (bench/kserve_side.py)", "", f"Not run: {k['skipped']}", ""]
        else:
            k = {**k, "meta": {**meta, "settings": res.get("kserve_settings", {})}}
            body = kserve_side.markdown(k).splitlines()
            lines += [("#" + ln if ln.startswith("#") else ln) for ln in body]
    errors = [f"- {e}" for e in res.get("errors", [])]
    return "\n".join([*lines, *(["## Errors", "", *errors, ""] if errors else [])])


def write(res: dict, out_dir: Path) -> list[Path]:
    return report.write_text(res, markdown(res), out_dir)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    wanted = [a.only] if a.only else list(ANCHORS)
    if "kserve" in wanted:
        wrk.binary()  # fail early, before starting anything
    if os.environ.get("BENCH_CPUS_LOAD"):
        os.sched_setaffinity(0, cpu_list(os.environ["BENCH_CPUS_LOAD"]))
    started, t0, load_before = datetime.now(UTC), time.monotonic(), report.loadavg()
    res: dict = {"nginx": None, "kserve": None, "errors": []}
    triton_version = "?"
    with Stack(log_dir=a.results / "logs") as stack:
        try:
            tp = stack.start_triton()
            triton_version = stack.triton_version()
            tf_port, admin_port, v2_port = free_port(), free_port(), free_port()
            conf = kserve_side.make_run_config(tp.grpc_target, tf_port, admin_port, v2_grpc_port=v2_port)
            folder = stack.tmp / "gateway"
            folder.mkdir()
            stack.gateway = start_gateway(conf, folder)
            stack.gateway_pids = stack._wait_workers(conf.get("workers", 1))
            pin(stack.gateway_pids, "BENCH_CPUS_GATEWAY")
            print(f"Triton {triton_version} at {tp.grpc_target}; gateway (gateway.yaml) pids {stack.gateway_pids}",
                  flush=True)
            if "nginx" in wanted:
                print(f"V2 gRPC passthrough against nginx grpc_pass, {a.concurrency} callers:", flush=True)
                res["nginx"] = nginx_side.run(tp.grpc_target, stack.gateway.target("v2_grpc"), stack.gateway_pids,
                                              stack.triton_pids, stack.tmp / "nginx", rounds=a.rounds,
                                              seconds=a.seconds, warmup=a.warmup, concurrency=a.concurrency,
                                              alive=stack.assert_running)
            if "kserve" in wanted:
                print("TF Serving REST predict against the KServe transformer:", flush=True)
                res["kserve"] = kserve_row(stack, stack.gateway.url("tfserving_rest"), a, tp.grpc_target)
        except (RuntimeError, wrk.WrkError, OSError) as e:
            res["errors"].append(str(e).splitlines()[0] if str(e) else type(e).__name__)
            print(f"bench-anchors: {e}", file=sys.stderr, flush=True)
        finally:
            nginx_log = stack.tmp / "nginx" / "error.log"
            stack._keep_log(nginx_log, "nginx-error.log")
    res["meta"] = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"), "wall_s": time.monotonic() - t0,
        "machine": report.machine(), "loadavg_before": load_before, "loadavg_after": report.loadavg(),
        "triton": triton_version, "versions": report.versions(triton_version, report.wrk_version()),
        "git": report.git(ROOT), "clk_tck": procstat.CLK_TCK,
        "cpus": {v: os.environ[v] for v in kserve_side.CPU_VARS if os.environ.get(v)},
    }
    res["kserve_settings"] = {"seconds": a.kserve.seconds, "rounds": a.kserve.rounds,
                              "kserve_args": a.kserve.kserve_args, "cpus": res["meta"]["cpus"]}
    for path in write(res, a.results):
        print(f"wrote {path}")
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--make-bench"]:  # the last part of `make bench`
        if not wanted_by_make_bench():
            print("bench-anchors: left out (BENCH_ONLY does not name anchors)")
            raise SystemExit(0)
        del sys.argv[1]
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # Stack.close ran in finally, nginx and the transformer were stopped in theirs
        print("\nbench-anchors: interrupted; Triton, the gateway, nginx and the transformer are stopped", file=sys.stderr)
        raise SystemExit(130) from None
