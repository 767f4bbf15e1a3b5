"""HTTP load with wrk: a Lua script that POSTs a body read from a file, and wrk's output parsed."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_TIME = r"([0-9.]+)(us|ms|s|m|h)"


class WrkError(RuntimeError):
    pass


@dataclass(frozen=True)
class WrkResult:
    requests: int
    duration_s: float
    requests_per_s: float
    latency_s: dict[str, float]  # "50", "75", "90", "99" -> seconds
    non_2xx: int
    socket_errors: dict[str, int]  # connect, read, write, timeout

    @property
    def errors(self) -> int:
        return self.non_2xx + sum(self.socket_errors.values())


def seconds(value: str, unit: str) -> float:
    return float(value) * _UNITS[unit]


def parse(output: str) -> WrkResult:
    """Parse what ``wrk --latency`` prints (wrk 4.x)."""
    m = re.search(r"^\s*(\d+) requests in " + _TIME, output, re.M)
    if not m:
        raise WrkError(f"no request count in wrk output:\n{output}")
    requests, duration = int(m.group(1)), seconds(m.group(2), m.group(3))
    rps = re.search(r"^Requests/sec:\s*([0-9.]+)", output, re.M)
    latency = {}
    dist = output.partition("Latency Distribution")[2]
    for q, value, unit in re.findall(r"^\s*(\d+)%\s+" + _TIME, dist, re.M):
        latency[q] = seconds(value, unit)
    if requests and not {"50", "99"} <= latency.keys():
        raise WrkError(f"no latency distribution in wrk output (run it with --latency):\n{output}")
    non2xx = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", output)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    socket_errors = dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()), strict=True)) \
        if sock else {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    return WrkResult(
        requests=requests,
        duration_s=duration,
        requests_per_s=float(rps.group(1)) if rps else (requests / duration if duration else 0.0),
        latency_s=latency,
        non_2xx=int(non2xx.group(1)) if non2xx else 0,
        socket_errors=socket_errors,
    )


def lua_script(body_path: Path, headers: dict[str, str]) -> str:
    """A wrk script that POSTs the bytes of ``body_path`` with ``headers``."""

    def lua_str(s: str) -> str:
        if "]==]" in s:
            raise ValueError(f"cannot quote {s!r}")
        return f"[==[{s}]==]"

    lines = ['wrk.method = "POST"']
    lines += [f"wrk.headers[ {lua_str(k)} ] = {lua_str(v)}" for k, v in headers.items()]  # "[[" would open a string
    lines += [
        f'local f = assert(io.open({lua_str(str(body_path))}, "rb"))',
        'wrk.body = f:read("*a")',
        "f:close()",
    ]
    return "\n".join(lines) + "\n"


def binary() -> str:
    path = shutil.which("wrk")
    if not path:
        raise WrkError("wrk is not installed (make bench installs it with apt-get; or: apt-get install -y wrk)")
    return path


def run(url: str, script: Path, connections: int, duration_s: float, timeout_s: float = 30.0,
        threads: int = 1) -> WrkResult:
    """One wrk run (one thread by default: the machine has few cores and wrk's C loop is cheap)."""
    if not url.startswith("http://127.0.0.1:"):
        raise WrkError(f"refusing to load anything but 127.0.0.1: {url}")
    cmd = [binary(), f"-t{max(1, min(threads, connections))}", f"-c{connections}", f"-d{max(1, round(duration_s))}s", "--latency",
           f"--timeout={timeout_s:g}s", "-s", str(script), url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=duration_s + timeout_s + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    if proc.returncode != 0 or err.strip():  # a broken Lua script only shows on stderr: wrk goes on with GETs
        raise WrkError(f"wrk exited with {proc.returncode}: {err.strip() or out.strip()}")
    return parse(out)
