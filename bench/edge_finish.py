"""Micro-benchmark of the edge's per-request bookkeeping: ``Edge.finish`` (metrics, and the access
line when it is on), timed with timeit. docs/operations.md quotes its figures.

    .venv/bin/python -m bench.edge_finish              # metrics only
    .venv/bin/python -m bench.edge_finish json         # + the JSON access line, written to /dev/null
    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) .venv/bin/python -m bench.edge_finish   # as with workers > 1
"""

from __future__ import annotations

import statistics
import sys
import timeit

from gateway.call import Admission, Call
from gateway.edge import Edge
from gateway.observe import logs


def bench(label: str, fn, number: int) -> None:
    runs = [timeit.timeit(fn, number=number) / number * 1e9 for _ in range(7)]
    print(f"{label:<45} median {statistics.median(runs):6.0f} ns   min {min(runs):6.0f} ns")


def main(argv: list[str]) -> None:
    edge = Edge("tfserving", "tfserving_rest", None, Admission(8), 30.0, 600.0)
    call = Call("rid", "predict", 30.0, 600.0)
    call.model = "m"
    bench("finish(call, 'ok')", lambda: edge.finish(call, "ok"), 200_000)
    bench("finish(call, 'ok', 200, 120, 80)", lambda: edge.finish(call, "ok", 200, 120, 80), 200_000)
    if argv:
        with open("/dev/null", "w") as sink:
            logs.setup("INFO", argv[0], True, stream=sink)
            bench(f"finish + access line ({argv[0]})", lambda: edge.finish(call, "ok", 200, 120, 80), 50_000)


if __name__ == "__main__":
    main(sys.argv[1:])
