"""The V2 gRPC passthrough against a C proxy: Debian's nginx ``grpc_pass`` in front of the same Triton.

The anchor for the gateway's :8001 (issue 53, item 5). nginx runs as Debian ships it (``apt-get install
nginx-light``: its http_v2 and grpc modules), one worker process, from a config written here into a
temporary folder (``config_text``): one ``listen 127.0.0.1:<port> http2`` server whose every path is
``grpc_pass`` to an ``upstream`` block with ``keepalive`` (idle HTTP/2 connections to Triton kept for the
next call), its access log on like the gateway's (gateway.yaml: ``access_log: true``), limits that never
end a connection during a run (``keepalive_requests``, timeouts). It is started in a session of its own
and stopped by its pid.

The same closed loop drives both sides (bench/grpcload.py: ``concurrency`` grpc.aio callers on one
channel, pre-serialised bytes): bench/cases.py's small ModelInfer (four FP32 to
saved_model_half_plus_three) as unary calls, and the same request as ModelStreamInfer messages (one
message per turn on ``concurrency`` long-lived streams). Each side's answer is checked first, and the
two sides' answers compared byte for byte (both relay Triton's). Then, per kind, ``rounds`` rounds with
the two sides in alternated order; each run's server CPU per call is the utime+stime of that side's
processes (the gateway's: its worker processes; nginx's: master and worker) from /proc over the run,
divided by the calls it completed (bench/procstat.py), Triton's the same, apart. Printed and kept:
gateway ÷ nginx CPU per call round by round and their median.

Run by bench/anchors.py: alone (``python -m bench.anchors --only nginx``: its own Triton and gateway,
``make run``'s settings) or beside the KServe transformer (``make bench-anchors``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path

from bench import cases, grpcload, procstat, report, stats
from bench.stack import Session, pin
from tests.support import free_port

SIDES = ("gateway", "nginx")
KINDS = {  # kind: (title, grpcload kind, gRPC method)
    "unary": ("ModelInfer, 4 FP32 (unary calls)", "grpc_unary", cases.MODEL_INFER),
    "stream": ("ModelStreamInfer, 4 FP32 (one message per turn)", "grpc_stream", cases.MODEL_STREAM_INFER),
}
INSTALL = "apt-get install -y nginx-light"


class NginxMissing(RuntimeError):
    pass


def binary() -> str:
    """nginx's path, or NginxMissing saying how to install it."""
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if not found:
        raise NginxMissing(f"nginx is not installed ({INSTALL}; `make bench-anchors` tries it): the nginx row cannot run")
    return found


def version(path: str) -> str:
    try:
        out = subprocess.run([path, "-v"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stderr + out.stdout).strip().rpartition("/")[2] or "?"


def config_text(folder: Path, port: int, triton: str) -> str:
    """nginx.conf for one ``grpc_pass`` proxy on 127.0.0.1:``port`` to ``triton`` (host:port)."""
    if not triton.startswith("127.0.0.1:") or not 0 < port < 65536:
        raise ValueError(f"loopback only: 127.0.0.1:{port} -> {triton}")
    return f"""\
worker_processes 1;
daemon off;
master_process on;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log {folder}/access.log;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    client_max_body_size 0;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    client_body_timeout 600s;
    upstream triton {{
        server {triton};
        keepalive 64;
        keepalive_requests 100000000;
        keepalive_timeout 600s;
    }}
    server {{
        listen 127.0.0.1:{port} http2;
        location / {{
            grpc_pass grpc://triton;
            grpc_read_timeout 600s;
            grpc_send_timeout 600s;
        }}
    }}
}}
"""


class Nginx(Session):
    """nginx (master and one worker) in a session of its own, on a free loopback port; ``stop`` ends
    its process group (SIGTERM: nginx's fast shutdown)."""

    def __init__(self, folder: Path, triton: str):
        self.folder, self.triton = folder, triton
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.pids: list[int] = []

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> None:
        path = binary()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = self.folder / "nginx.conf"
        conf.write_text(config_text(self.folder, self.port, self.triton))
        with open(self.folder / "stderr.log", "wb") as log:
            self.proc = subprocess.Popen([path, "-p", str(self.folder), "-c", str(conf), "-e", str(self.folder / "error.log")],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.pids = procstat.process_tree(self.proc.pid)
            if len(self.pids) >= 2 and self._listening():
                return
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"nginx did not start:\n{tail}")

    def _listening(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("stderr.log", "error.log"):
            p = self.folder / name
            if p.exists():
                text += p.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


# -- measuring ----------------------------------------------------------------------------------
def request() -> bytes:
    return cases._v2_request(cases.SMALL)


def check(kind: str, targets: dict[str, str]) -> dict:
    """One call of ``kind`` to each side: each answer checked, and whether the two are the same bytes."""
    _, _, method = KINDS[kind]
    once = grpcload.call_once if kind == "unary" else grpcload.stream_once
    validate = cases._check_v2 if kind == "unary" else cases._check_v2_stream
    answers = {}
    for side in SIDES:
        answers[side] = asyncio.run(once(targets[side], method, request()))
        validate(answers[side])
    return {"kind": kind, "same_bytes": answers["gateway"] == answers["nginx"],
            "bytes": {side: len(a) for side, a in answers.items()}}


def measure(kind: str, target: str, side_pids: list[int], triton_pids: list[int], concurrency: int,
            seconds: float) -> dict:
    """One closed-loop run and the CPU time the side's processes and Triton spent on it."""
    _, load_kind, method = KINDS[kind]
    before = procstat.ticks(side_pids), procstat.ticks(triton_pids)
    r = grpcload.load(load_kind, target, method, request(), concurrency, seconds)
    after = procstat.ticks(side_pids), procstat.ticks(triton_pids)
    out = {"calls": r.requests, "duration_s": r.duration_s, "per_s": r.requests_per_s, "errors": r.errors,
           "p50_ms": stats.percentile(r.latencies_s, 50) * 1e3 if r.latencies_s else None,
           "side_cpu_us": procstat.us_per_request(before[0], after[0], r.requests),
           "triton_cpu_us": procstat.us_per_request(before[1], after[1], r.requests),
           "side_ticks": after[0] - before[0], "triton_ticks": after[1] - before[1]}
    if r.errors:
        out["error"] = r.first_error
    return out


def side_order(round_no: int) -> tuple[str, ...]:
    return SIDES if round_no % 2 == 0 else SIDES[::-1]


def round_ratios(gateway_runs: list[dict], nginx_runs: list[dict]) -> list[float]:
    """gateway ÷ nginx CPU per call, round by round (the two runs of a round adjacent in time); a round
    where either side had errors or no figure is left out."""
    out = []
    for g, n in zip(gateway_runs, nginx_runs, strict=False):
        if g.get("errors") or n.get("errors") or g.get("side_cpu_us") is None or not n.get("side_cpu_us"):
            continue
        out.append(g["side_cpu_us"] / n["side_cpu_us"])
    return out


def summarise(runs: list[dict]) -> dict:
    clean = [r for r in runs if not r.get("errors")]
    return {m: (s.as_dict() if (s := stats.spread([r.get(m) for r in clean])) else None)
            for m in ("per_s", "p50_ms", "side_cpu_us", "triton_cpu_us")}


def run(triton: str, gateway_target: str, gateway_pids: list[int], triton_pids, folder: Path, *, rounds: int = 3,
        seconds: float = 5, warmup: float = 1, concurrency: int = 8, kinds: tuple[str, ...] = ("unary", "stream"),
        alive=lambda: None) -> dict:
    """The row: nginx started in ``folder`` before ``triton``, measured beside the gateway's ``gateway_target``
    (its processes ``gateway_pids``; ``triton_pids()`` Triton's), stopped at the end. ``alive()`` raises
    when the stack under it died. A missing nginx is said in ``skipped``, not raised."""
    out: dict = {"concurrency": concurrency, "rounds": rounds, "seconds": seconds, "kinds": {}, "checks": []}
    try:
        out["nginx_version"] = version(binary())
    except NginxMissing as e:
        out["skipped"] = str(e)
        print(f"  skipped: {e}", flush=True)
        return out
    nginx = Nginx(folder, triton)
    nginx.start()
    pin(nginx.pids, "BENCH_CPUS_GATEWAY")  # the gateway's cores: the two sides never run at once
    try:
        out["pids"] = {"gateway": list(gateway_pids), "nginx": list(nginx.pids)}
        targets = {"gateway": gateway_target, "nginx": nginx.target}
        pids = {"gateway": list(gateway_pids), "nginx": nginx.pids}
        for kind in kinds:
            c = check(kind, targets)
            out["checks"].append(c)
            print(f"  {kind}: both answers right, same bytes {c['same_bytes']} ({c['bytes']})", flush=True)
            row = {side: {"runs": []} for side in SIDES}
            out["kinds"][kind] = row
            for side in SIDES:
                if warmup > 0:
                    measure(kind, targets[side], pids[side], triton_pids(), concurrency, warmup)
            for r in range(rounds):
                for side in side_order(r):
                    alive()
                    if not nginx.alive():
                        raise RuntimeError(f"nginx exited:\n{nginx.log_tail()}")
                    m = measure(kind, targets[side], pids[side], triton_pids(), concurrency, seconds)
                    row[side]["runs"].append(m)
                    print(f"  {kind} round {r + 1} {side:7s}: {m['per_s']:7.0f} calls/s, {side} "
                          f"{report.num(m['side_cpu_us'])} µs CPU/call, Triton {report.num(m['triton_cpu_us'])}"
                          f"{', ' + m['error'] if m.get('error') else ''}", flush=True)
            for side in SIDES:
                row[side]["summary"] = summarise(row[side]["runs"])
            ratios = round_ratios(row["gateway"]["runs"], row["nginx"]["runs"])
            s = stats.spread(ratios)
            row["ratio"] = s.as_dict() if s else None
            row["ratio_rounds"] = ratios
            print(f"  {kind}: gateway ÷ nginx CPU per call {report.times_spread(row['ratio'], 'rounds ')}", flush=True)
    finally:
        nginx.stop()
    return out


# -- the report ---------------------------------------------------------------------------------
def markdown(res: dict) -> list[str]:
    """The row's lines: a table of both sides per kind, and gateway ÷ nginx."""
    lines = ["## The V2 gRPC passthrough against nginx `grpc_pass` (bench/nginx_side.py)", ""]
    if res.get("skipped"):
        return [*lines, f"Not run: {res['skipped']}", ""]
    lines += [f"nginx {res.get('nginx_version', '?')} (one worker, upstream keepalive, access log on) and the "
              f"gateway's :v2_grpc before the same Triton; {res['concurrency']} grpc.aio callers in a closed loop, "
              f"{res['rounds']} rounds × {res['seconds']:g} s per side, sides alternated. Server CPU per call: "
              f"utime+stime of the side's processes (Triton apart). Cells: median (min–max) over the rounds.", ""]
    rows = []
    for kind, row in res.get("kinds", {}).items():
        for side in SIDES:
            s = row[side].get("summary", {})
            rows.append([KINDS[kind][0], side, report.cell(s.get("per_s")), report.cell(s.get("p50_ms")),
                         report.cell(s.get("side_cpu_us")), report.cell(s.get("triton_cpu_us"))])
        rows.append([KINDS[kind][0], "**gateway ÷ nginx**", "", "", f"**{report.times_spread(row.get('ratio'), 'rounds ')}**", ""])
    lines += report._table(["call", "side", "calls/s", "p50 ms", "server CPU µs/call", "Triton CPU µs/call"], rows)
    same = ", ".join(f"{c['kind']} {'yes' if c['same_bytes'] else '**no**'}" for c in res.get("checks", []))
    return [*lines, "", f"The same answer bytes through both: {same}.", ""]

