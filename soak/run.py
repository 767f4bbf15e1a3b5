"""``make soak``: steady load across dialects while Triton is killed and restarted, clients vanish
mid-stream, and oversized, malformed and schema-fuzzed requests arrive (issue 13, item 7).

    python -m soak.run          (SOAK_SECONDS, default 180; settings below, all from the environment)

Starts its own CPU Triton and gateway on free 127.0.0.1 ports (as bench/stack.py does) and stops
both at the end, also on Ctrl-C or SIGTERM. Every request's outcome is one of ``soak.clients``'
correct / clean / lost. At the end: the gateway's in-flight gauge must be back to 0, no request
answered INTERNAL, lost == 0 and the gateway's RSS growth within SOAK_MAX_RSS_GROWTH_MB; else the
exit status is 1. Writes soak/results/summary.md and results.json.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import psutil
import yaml

from gateway.dialects import LISTENERS
from gateway.local import localtriton
from gateway.settings import LocalTriton
from soak import openapi_fuzz
from soak.clients import CLEAN, CORRECT, LOST, Clients
from tests.support import ROOT, free_port, gateway_config, http_call, start_gateway, stop_gateway


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


SECONDS = _env("SOAK_SECONDS", 180)
KILL_EVERY = _env("SOAK_KILL_EVERY", 50)  # seconds between SIGKILLs of Triton
DOWN_FOR = _env("SOAK_DOWN_FOR", 5)  # seconds Triton stays dead before it is restarted
CLIENTS = int(_env("SOAK_CLIENTS", 6))  # steady-load threads
WORKERS = int(_env("SOAK_WORKERS", 1))  # the gateway's `workers` (issue 22: several processes, one set of ports)
PAUSE = _env("SOAK_PAUSE", 0.02)  # seconds between one thread's requests (the machine is shared)
FUZZ_EXAMPLES = int(_env("SOAK_FUZZ_EXAMPLES", 40))  # schemathesis examples per operation and mode
MAX_GROWTH_MB = _env("SOAK_MAX_RSS_GROWTH_MB", 64)
MAX_REQUEST_BYTES = 4 << 20  # the soak gateway's limit: oversized requests are 4 MiB + 1 KiB
RESULTS = ROOT / "soak" / "results"

STEADY = ("tf_rest", "tf_grpc", "grps_http", "grps_grpc", "openai_stream", "v2_grpc", "v2_http")
FAULTS = ("openai_vanish", "grps_stream_cancel")
HOSTILE = ("oversized_tf", "oversized_grpc", "malformed_tf", "malformed_mindie", "malformed_grps",
           "malformed_tensorproto", "malformed_v2_http")


class Soak:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gateway-soak-"))
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.lost_examples: list[str] = []
        self.triton: localtriton.TritonProcess | None = None
        self.gateway = None
        self.kills: list[dict] = []
        self.fuzz = openapi_fuzz.Report()
        self.rss: dict[str, float] = {}
        self.rss_series: list[tuple[int, float]] = []
        self._closed = False
        atexit.register(self.close)

    # -- processes --------------------------------------------------------------------------------
    def start(self) -> None:
        self.triton_cfg = LocalTriton(
            venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository"),
            workdir=str(self.tmp / "triton"), http_port=free_port(), grpc_port=free_port(),
            metrics_port=free_port(), startup_timeout_s=180)
        self.triton = localtriton.start(self.triton_cfg, ROOT, log_path=self.tmp / "triton-0.log")
        dialects: dict = {}
        for f in sorted((ROOT / "tests" / "config").glob("*.yaml")):
            dialects.update((yaml.safe_load(f.read_text()) or {}).get("dialects") or {})
        dialects["grps"]["models"]["soak_llm-1"] = {"triton_model": "tiny_llm", "triton_version": "1",
                                                    "inputs": {"max_tokens": 24}}
        ports = {name: free_port() for name in LISTENERS}
        extra = {"dialects": dialects, "log_level": "WARNING", "limits": {"max_request_bytes": MAX_REQUEST_BYTES},
                 "workers": WORKERS}
        self.gateway = start_gateway(gateway_config(self.triton.grpc_target, ports, extra), self.tmp)
        self.clients = Clients(ports, MAX_REQUEST_BYTES + 1024)
        http_call(self.gateway.url("grps_http"), "POST", "/grps/v1/health/online")

    def kill_triton(self) -> None:
        """SIGKILL Triton's whole process group (server and python-backend stubs)."""
        try:
            os.killpg(self.triton.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.triton.proc.wait(10)

    def restart_triton(self, n: int) -> float:
        """A new Triton on the same ports; seconds it took to be ready."""
        t0 = time.monotonic()
        tp = localtriton.start(self.triton_cfg, ROOT, log_path=self.tmp / f"triton-{n}.log")
        if self._closed:  # stopped meanwhile: close() no longer sees it
            tp.stop()
        self.triton = tp
        return time.monotonic() - t0

    def gateway_rss_mb(self) -> float:
        proc = psutil.Process(self.gateway.proc.pid)
        procs = [proc, *proc.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs if "resource_tracker" not in " ".join(p.cmdline())) / 2**20

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop.set()
        try:
            if self.gateway is not None:
                if hasattr(self, "clients"):
                    self.clients.close()
                log = self.gateway.log_path
                stop_gateway(self.gateway)
                RESULTS.mkdir(parents=True, exist_ok=True)
                if log.exists():
                    shutil.copyfile(log, RESULTS / "gateway.log")
        finally:
            try:
                if self.triton is not None:
                    self.triton.stop()
            finally:
                self._kill_leftovers()
                shutil.rmtree(self.tmp, ignore_errors=True)
                atexit.unregister(self.close)

    def _kill_leftovers(self) -> None:
        """A Triton that a restart was starting when the soak was stopped: every process whose
        command line names this soak's own temporary folder is ours (the folder is unique)."""
        for p in psutil.process_iter(["pid", "cmdline"]):
            if p.pid != os.getpid() and str(self.tmp) in " ".join(p.info["cmdline"] or ()):
                try:
                    p.kill()
                except psutil.Error:
                    pass

    # -- load -------------------------------------------------------------------------------------
    def record(self, kind: str, outcome: str, detail: str = "") -> None:
        with self.lock:
            self.outcomes[kind][outcome] += 1
            if outcome == LOST and len(self.lost_examples) < 30:
                self.lost_examples.append(f"{time.strftime('%H:%M:%S')} {kind}: {detail}")

    def one(self, kind: str) -> None:
        fn = {"openai_vanish": lambda: self.clients.openai_stream(vanish=True)}.get(kind) or getattr(self.clients, kind)
        try:
            outcome = fn()
            outcome, detail = outcome if isinstance(outcome, tuple) else (outcome, "")
        except Exception as e:  # noqa: BLE001 - no answer: reset, refused, timeout (hang)
            outcome, detail = LOST, f"{type(e).__name__}: {str(e)[:200]}"
        self.record(kind, outcome, detail or outcome)

    def steady(self, seed: int) -> None:
        rnd = random.Random(seed)
        while not self.stop.is_set():
            self.one(rnd.choice(STEADY))
            time.sleep(PAUSE)

    def mischief(self) -> None:
        """Vanishing clients and hostile requests, one every ~0.2 s."""
        rnd = random.Random(7)
        while not self.stop.is_set():
            self.one(rnd.choice(FAULTS + HOSTILE))
            time.sleep(0.2)

    def fuzzer(self) -> None:
        """The OpenAPI descriptions, fuzzed by schemathesis (random seeds) until the time is up."""
        admin = self.gateway.url("admin_http")
        while not self.stop.is_set():
            for dialect, listener in openapi_fuzz.LISTENER.items():
                if self.stop.is_set():
                    break
                openapi_fuzz.fuzz(dialect, self.gateway.url(listener), admin, FUZZ_EXAMPLES, derandomize=False,
                                  report=self.fuzz, stop=self.stop.is_set)

    def chaos(self, end: float) -> None:
        """SIGKILL Triton every KILL_EVERY seconds, restart it on the same ports DOWN_FOR later."""
        n = 0
        while not self.stop.wait(KILL_EVERY) and time.monotonic() + DOWN_FOR + 30 < end:
            n += 1
            t = time.monotonic()
            self.kill_triton()
            self.stop.wait(DOWN_FOR)
            took = self.restart_triton(n)
            self.kills.append({"at_s": round(t - self.t0, 1), "down_s": round(time.monotonic() - t, 1),
                               "restart_s": round(took, 1)})

    def run(self) -> dict:
        self.start()
        self.rss["start"] = self.gateway_rss_mb()
        self.t0 = time.monotonic()
        end = self.t0 + SECONDS
        threads = [threading.Thread(target=self.steady, args=(i,), daemon=True) for i in range(CLIENTS)]
        threads += [threading.Thread(target=self.mischief, daemon=True), threading.Thread(target=self.fuzzer, daemon=True)]
        for t in threads:
            t.start()
        chaos = threading.Thread(target=self.chaos, args=(end,), daemon=True)
        chaos.start()
        self.stop.wait(min(15, SECONDS / 4))
        self.rss["warm"] = self.gateway_rss_mb()
        peak = self.rss["warm"]
        self.rss_series = [(round(time.monotonic() - self.t0), round(peak, 1))]
        while time.monotonic() < end and not self.stop.wait(1):
            now = self.gateway_rss_mb()
            peak = max(peak, now)
            if time.monotonic() - self.t0 >= self.rss_series[-1][0] + 30:  # a sample every 30 s: leak or plateau?
                self.rss_series.append((round(time.monotonic() - self.t0), round(now, 1)))
        self.stop.set()
        chaos.join(200)
        for t in threads:
            t.join(60)
        self.rss["peak"] = peak
        return self.finish([t.name for t in threads if t.is_alive()])

    # -- report -----------------------------------------------------------------------------------
    def finish(self, stuck: list[str]) -> dict:
        admin = self.gateway.url("admin_http")
        # the gateway answers correctly again once everything is over
        after = {kind: self.clients.__getattribute__(kind)() for kind in ("tf_rest", "grps_http", "v2_grpc", "v2_http")}
        time.sleep(2)  # cancelled streams unwind
        metrics = http_call(admin, "GET", "/metrics")[2].decode()
        inflight = sum(float(v) for v in re.findall(r"^gateway_inflight_requests(?:\{[^}]*\})? (\S+)$", metrics, re.M))
        self.rss["end"] = self.gateway_rss_mb()
        totals = Counter()
        for c in self.outcomes.values():
            totals.update(c)
        totals[LOST] += len(self.fuzz.failures)
        internal = openapi_fuzz.internal_errors(admin)
        growth = self.rss["end"] - self.rss["warm"]
        checks = {
            "lost == 0": totals[LOST] == 0,
            "no INTERNAL answers": internal == 0,
            "in-flight gauge back to 0": inflight == 0,
            f"RSS growth <= {MAX_GROWTH_MB:g} MiB": growth <= MAX_GROWTH_MB,
            "gateway alive and answering": self.gateway.proc.poll() is None and set(after.values()) == {CORRECT},
            "no client thread stuck": not stuck,
        }
        return {
            "seconds": SECONDS, "clients": CLIENTS, "workers": WORKERS, "triton_kills": self.kills,
            "outcomes": {k: dict(v) for k, v in sorted(self.outcomes.items())},
            "totals": {"sent": sum(totals.values()), CORRECT: totals[CORRECT], CLEAN: totals[CLEAN], LOST: totals[LOST]},
            "fuzz": {"requests": self.fuzz.total, "operations": len(self.fuzz.sent),
                     "statuses": {str(k): v for k, v in sorted(self.fuzz.statuses.items(), key=str)},
                     "failures": self.fuzz.failures[:20], "upstream_5xx": self.fuzz.server_errors[:10]},
            "rss_mb": {k: round(v, 1) for k, v in self.rss.items()}, "rss_growth_mb": round(growth, 1),
            "rss_series_mb": self.rss_series,
            "inflight_at_end": inflight, "internal_answers": internal, "after": after,
            "lost_examples": self.lost_examples, "stuck_threads": stuck, "checks": checks,
            "passed": all(checks.values()),
        }


def summary(r: dict) -> str:
    rows = ["| kind | sent | correct | failed cleanly | lost |", "|---|---:|---:|---:|---:|"]
    for kind, c in r["outcomes"].items():
        rows.append(f"| {kind} | {sum(c.values())} | {c.get(CORRECT, 0)} | {c.get(CLEAN, 0)} | {c.get(LOST, 0)} |")
    t = r["totals"]
    rows.append(f"| **all (fuzz failures counted lost)** | {t['sent']} | {t[CORRECT]} | {t[CLEAN]} | {t[LOST]} |")
    kills = ", ".join(f"at {k['at_s']} s (down {k['down_s']} s, restart {k['restart_s']} s)" for k in r["triton_kills"])
    f = r["fuzz"]
    lines = [
        f"# Soak: {r['seconds']:g} s, {r['clients']} steady clients, {r.get('workers', 1)} gateway worker(s) — "
        f"{'PASSED' if r['passed'] else 'FAILED'}",
        "", *rows, "",
        f"- Triton SIGKILLed and restarted on the same ports {len(r['triton_kills'])} times: {kills or 'none'}",
        f"- schemathesis: {f['requests']} requests over {f['operations']} operations, statuses {f['statuses']}, "
        f"{len(f['failures'])} failures",
        f"- gateway RSS (MiB): {r['rss_mb']}; growth after warm-up {r['rss_growth_mb']} MiB",
        f"- gateway RSS every 30 s (s, MiB): {r['rss_series_mb']}",
        f"- in-flight gauge at the end: {r['inflight_at_end']:g}; INTERNAL answers: {r['internal_answers']:g}",
        f"- after the soak: {r['after']}",
        "", "Checks:", *[f"- [{'x' if ok else ' '}] {name}" for name, ok in r["checks"].items()],
    ]
    if r["lost_examples"] or f["failures"]:
        lines += ["", "Lost (first few):", *[f"- {e}" for e in r["lost_examples"][:15]],
                  *[f"- fuzz: {e}" for e in f["failures"][:10]]]
    if f["upstream_5xx"]:
        lines += ["", "5xx that were not the gateway's own (first few):", *[f"- {e}" for e in f["upstream_5xx"]]]
    return "\n".join(lines) + "\n"


def main() -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    soak = Soak()
    try:
        result = soak.run()
    except KeyboardInterrupt:
        soak.close()
        print("soak: interrupted; everything it started is stopped", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 2
    finally:
        soak.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(json.dumps(result, indent=2))
    text = summary(result)
    (RESULTS / "summary.md").write_text(text)
    print(text)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
