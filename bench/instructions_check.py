"""The guard for the hot paths: instructions per call (bench/instructions.py) against a baseline.

Three paths of the gateway, each counted under callgrind and compared with
bench/instructions_baseline.json:

    v2    the V2 ModelInfer passthrough (gRPC)
    tf    TF Serving Predict of four floats (gRPC)
    rest  TF Serving REST predict of the same four floats (HTTP/1.1 keep-alive)

A kind more than TOLERANCE above its baseline fails the check, with the figures; one more than
TOLERANCE below passes with a note that the baseline can come down (a change that made the path
cheaper: lower the baseline, or the next change may spend the gain unseen). One caller at a time:
with several, how many requests a wake-up of the event loop finds varies with timing, and the count
with it. Each kind is measured RUNS times (default 3) and the least taken: valgrind's schedule adds
gRPC mutex spins to some runs (bench/instructions.py), never takes any away; a kind found above its
tolerance is measured RUNS times more before it fails.

The count depends on the Python, grpcio and Sanic it runs on: the baseline records them, and a
check under others says so next to any failure. One Triton serves every measure.

    .venv/bin/python -m bench.instructions_check            check (make instructions-check)
    .venv/bin/python -m bench.instructions_check --write    measure and rewrite the baseline
                                                            (make instructions-baseline)
    env: RUNS=3; N1=100 N2=500 CONC=1 (bench/instructions.py)
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sys
from importlib import metadata
from pathlib import Path

from bench import instructions

BASELINE = Path(__file__).with_name("instructions_baseline.json")
GUARDED = ("v2", "tf", "rest")
# per kind: the spread of the least of 3 runs between checks on the 2-core VM (v2 0.9 %, tf 3.6 %,
# rest 7.1 %: the HTTP client loop and sanic vary more under valgrind's schedule), with a margin
TOLERANCE = {"v2": 0.03, "tf": 0.05, "rest": 0.08}
COUNTS = (100, 500, 1)  # N1, N2, CONC: one caller (no batching to vary), few calls to keep CI short


def versions() -> dict[str, str]:
    """What the count depends on besides the gateway's code."""
    return {"python": platform.python_version(), "grpcio": metadata.version("grpcio"),
            "sanic": metadata.version("sanic"), "machine": platform.machine()}


def measure_all(runs: int, baseline: dict | None = None) -> dict[str, list[float]]:
    """Each guarded kind measured ``runs`` times in the gateway, one Triton for all; each run is
    printed as it lands. With a ``baseline``, a kind whose least run is above its tolerance is
    measured ``runs`` times more before it counts as failed: the spins only ever add, so more runs
    can only bring the least down to the code's own count, and a change that costs more stays above."""
    n = instructions.call_counts(*COUNTS)
    measured: dict[str, list[float]] = {kind: [] for kind in GUARDED}
    with instructions.triton_target(None) as triton:
        for kind in GUARDED:
            for _ in range(2 if baseline is not None else 1):
                for _ in range(runs):
                    measured[kind].append(instructions.measure(kind, "gateway", triton, n))
                    print(f"  {kind} run {len(measured[kind])}: {measured[kind][-1]:,.0f}", flush=True)
                if baseline is None or min(measured[kind]) <= baseline["instructions_per_call"][kind] * (1 + TOLERANCE[kind]):
                    break
    return measured


def compare(baseline: dict, measured: dict[str, list[float]], now: dict[str, str],
            tolerance: float | dict[str, float] | None = None) -> tuple[bool, list[str]]:
    """(passed, the lines to print): each kind's least run against its baseline."""
    ok, lines = True, []
    base = baseline["instructions_per_call"]
    for kind, runs in measured.items():
        got, want = min(runs), base[kind]
        tol = tolerance if isinstance(tolerance, float) else (tolerance or TOLERANCE)[kind]
        change = got / want - 1
        each = ", ".join(f"{r:,.0f}" for r in runs)
        line = f"{kind:5} {got:>11,.0f} instructions a call, baseline {want:,.0f} ({change:+.2%}; runs: {each})"
        if change > tol:
            ok = False
            line += f"  FAILED: more than {tol:.0%} above the baseline"
        elif change < -tol:
            line += f"  more than {tol:.0%} below: time to lower the baseline (make instructions-baseline)"
        lines.append(line)
    if baseline.get("versions") != now:
        lines.append(f"note: the baseline was taken with {baseline.get('versions')}, this run with {now};"
                     " where the upgrade is meant, rewrite it (make instructions-baseline)")
    return ok, lines


def write(measured: dict[str, list[float]], now: dict[str, str], path: Path = BASELINE) -> None:
    path.write_text(json.dumps({
        "instructions_per_call": {kind: round(min(runs)) for kind, runs in measured.items()},
        "runs": {kind: [round(r) for r in runs] for kind, runs in measured.items()},
        "versions": now,
        "how": "python -m bench.instructions_check --write (make instructions-baseline)",
    }, indent=2) + "\n")


def main(argv: list[str]) -> int:
    if argv not in ([], ["--write"]):
        print(__doc__)
        return 2
    if missing := instructions.valgrind_missing():
        print(missing)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop valgrind and Triton on the way out
    runs = max(1, int(os.environ.get("RUNS", 3)))
    baseline = None if argv == ["--write"] else json.loads(BASELINE.read_text())
    measured, now = measure_all(runs, baseline), versions()
    if argv == ["--write"]:
        write(measured, now)
        for kind, each in measured.items():
            print(f"{kind:5} {min(each):>11,.0f} instructions a call (runs: {', '.join(f'{r:,.0f}' for r in each)})")
        print(f"written: {BASELINE}")
        return 0
    ok, lines = compare(baseline, measured, now)
    print("\n".join(lines))
    print("instructions check: " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
