"""`python -m tests.compose [--project P] [-f FILE ...] acceptance|faults`: run by
scripts/compose-test.sh (`make compose-test`) against a compose stack it has brought up.

acceptance  tests/acceptance.py, every dialect's real client, against the gateway's published ports
faults      Triton killed under a light load on every dialect (`docker compose kill`, then a crash
            its restart policy restarts), the gateway stopped with requests in flight, then
            started again and timed to ready (tests/compose/faults.py)

The ports are asked from Compose (`docker compose port`), so they are the published ones whatever
the files map them to. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys

from tests.acceptance import Endpoints, run_all
from tests.compose import faults
from tests.compose.stack import Stack


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.compose")
    ap.add_argument("--project", "-p", default="tpg-compose-test")
    ap.add_argument("-f", dest="files", action="append", default=[])
    ap.add_argument("what", choices=["acceptance", "faults"])
    args = ap.parse_args(argv)
    stack = Stack(args.project, args.files or ["compose.yaml", "compose.cpu.yaml"])
    ports = stack.gateway_ports()
    print("published:", ", ".join(f"{k} 127.0.0.1:{v}" for k, v in sorted(ports.items())), flush=True)
    if args.what == "acceptance":
        failed = run_all(Endpoints(ports))
        if failed:
            print(f"acceptance FAILED: {', '.join(failed)}", file=sys.stderr)
            return 1
        print(f"acceptance passed: {len(ports)} listeners, every check")
        return 0
    problems = faults.kill_triton_under_load(stack, ports) + faults.stop_gateway_drains(stack, ports)
    problems += faults.gateway_start_to_ready(stack, ports)
    for p in problems:
        print(f"FAIL {p}", file=sys.stderr)
    if problems:
        print("faults FAILED", file=sys.stderr)
        return 1
    print("faults passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
