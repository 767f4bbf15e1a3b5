"""Run the ``tritonserver`` bundled in the nvidia-pytriton wheel on CPU (for ``gateway local`` and tests).

The wheel needs hand-holding (docs/local-triton.md):
  * no python-backend stub in ``backends/python``: copy the tree to a work dir and add the stub
    matching the stub venv's Python minor version;
  * RPATHs are relative to site-packages: LD_LIBRARY_PATH gets ``nvidia_pytriton.libs`` and the
    interpreter's ``lib`` directory (so the stub loads the right libpython);
  * the stub venv's ``bin`` goes first on PATH so the embedded interpreter finds its site-packages
    (numpy<2 there: the 2.51 stub returns empty outputs with numpy 2).
Triton is started in its own process group so that stopping it also ends every stub process, and it
gets SIGTERM when the process that started it dies, even SIGKILLed (gateway/local/parent.py: a killed
bench, test run or `make run` leaves no Triton behind); the
python backend's shared-memory regions it leaves behind when stopped before it unloads its models
are given back once the group is gone (gateway/local/stubregions.py).

Start-up says what is happening: Triton loads every model before it opens its HTTP and gRPC ports
(so its repository index cannot be polled meanwhile), hence progress comes from its log, read as it
grows (``LoadProgress``): one line per model state change. A failure names what failed and what to
do (``explain_exit``): a port in use, a model that failed to load and Triton's reason, or the last
lines of Triton's log and its path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.local import parent, stubregions
from gateway.process import grpcruntime
from gateway.settings import LocalTriton
from gateway.startup import port_in_use, port_in_use_message


class TritonStartError(RuntimeError):
    pass


def _stub_python_info(venv: Path) -> tuple[str, Path, Path]:
    """(minor version 'X.Y', site-packages, interpreter lib dir) of the stub venv."""
    py = venv / "bin" / "python"
    if not py.exists():
        raise TritonStartError(
            f"Triton's environment {venv} is missing (no {py}): run `make install` (it creates .venv-triton "
            f"with nvidia-pytriton and numpy<2), or point `local_triton.venv` at an existing one")
    code = (
        "import sys, sysconfig, json; print(json.dumps([f'{sys.version_info[0]}.{sys.version_info[1]}',"
        " sysconfig.get_paths()['purelib'], sysconfig.get_config_var('LIBDIR')]))"
    )
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True).stdout
    ver, site, libdir = json.loads(out)
    return ver, Path(site), Path(libdir)


def prepare(cfg: LocalTriton, root: Path) -> tuple[list[str], dict[str, str]]:
    """Lay out the work dir; return the command line and environment to start Triton."""
    venv = (root / cfg.venv).resolve()
    ver, site, libdir = _stub_python_info(venv)
    src = site / "pytriton" / "tritonserver"
    if not (src / "bin" / "tritonserver").exists():
        raise TritonStartError(f"{src} has no tritonserver binary: nvidia-pytriton is not installed in {venv}; "
                               f"run `make install` (or `rm -rf {venv} && make install` to rebuild it)")
    work = (root / cfg.workdir).resolve()
    tree = work / "tritonserver"
    stub = src / "python_backend_stubs" / ver / "triton_python_backend_stub"
    marker = tree / ".prepared"
    if not marker.exists() or marker.read_text() != str(stub):
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(src, tree, ignore=shutil.ignore_patterns("python_backend_stubs"), symlinks=True)
        shutil.copy2(stub, tree / "backends" / "python" / "triton_python_backend_stub")
        marker.write_text(str(stub))
    repo = (root / cfg.model_repository).resolve()
    cmd = [
        str(tree / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={tree / 'backends'}",
        f"--cache-directory={tree / 'caches'}",
        f"--http-address={cfg.host}",
        f"--grpc-address={cfg.host}",
        f"--metrics-address={cfg.host}",
        f"--http-port={cfg.http_port}",
        f"--grpc-port={cfg.grpc_port}",
        f"--metrics-port={cfg.metrics_port}",
        "--allow-gpu-metrics=false",
        "--strict-model-config=false",
        f"--log-verbose={cfg.log_verbose}",
    ]
    if cfg.model_config_name:
        cmd.append(f"--model-config-name={cfg.model_config_name}")
    env = dict(os.environ)
    libs = [str(site / "nvidia_pytriton.libs"), str(libdir)]
    if env.get("LD_LIBRARY_PATH"):
        libs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return cmd, grpcruntime.for_child(env)  # the gateway's gRPC settings are not Triton's


@dataclass
class TritonProcess:
    cfg: LocalTriton
    proc: subprocess.Popen
    log_path: Path
    workdir: Path | None = None  # where the list of its python backend regions is kept (None: not kept)
    regions_before: frozenset[str] = frozenset()  # the python backend regions there were before it started

    @property
    def grpc_target(self) -> str:
        return f"{self.cfg.host}:{self.cfg.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.cfg.host}:{self.cfg.http_port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def diagnosis(self) -> str:
        """Triton's error lines (glog 'E' level) and the log tail, for start-up failures."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        errors = [ln for ln in lines if ln[:1] == "E" and ln[1:5].isdigit()][-10:]
        text = f"log tail ({self.log_path}):\n" + "\n".join(lines[-25:])
        if errors:
            text = "errors:\n" + "\n".join(errors) + "\n" + text
        return text

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the whole process group (server and stubs), SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:  # stubs may outlive the server for a moment; never leave one behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.wait(5)
        self._give_back_regions()

    def _give_back_regions(self, wait_s: float = 2.0) -> None:
        """Once the group's last stub is gone, unlink the python backend regions it left (unmapped)."""
        if self.workdir is None:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)  # a stub still exiting: its mappings go with it
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.05)
        stubregions.forget(self.workdir, stubregions.present() - self.regions_before)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback only
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (urllib.error.URLError, OSError):
        return 0, b""


PORTS = (("http_port", "Triton's HTTP port"), ("grpc_port", "Triton's gRPC port"),
         ("metrics_port", "Triton's metrics port"))


def check_ports(cfg: LocalTriton) -> None:
    """Refuse to start when one of Triton's ports is taken (Triton would load every model first, then exit)."""
    problems = [port_in_use_message(cfg.host, getattr(cfg, name), f"local_triton.{name}", what)
                for name, what in PORTS if port_in_use(cfg.host, getattr(cfg, name))]
    if problems:
        raise TritonStartError("\n".join(problems))


def count_models(repo: Path) -> int:
    """Models Triton will load: every directory of the repository (Triton's MODE_NONE loads them all)."""
    try:
        return sum(1 for d in repo.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        return 0


# Triton 2.x log lines (glog prefix, then a JSON-quoted message with \n escaped).
_LOADING = re.compile(r'"loading: (?P<name>[^:"]+):(?P<version>\d+)"')
_LOADED = re.compile(r"\"successfully loaded '(?P<name>[^']+)'")
_FAILED = re.compile(r"\"failed to load '(?P<name>[^']+)' version (?P<version>\d+): (?P<reason>.*)\"\s*$")
_POLL_FAILED = re.compile(r"\"Poll failed for model directory '(?P<name>[^']+)': (?P<reason>.*)\"\s*$")
_PORT_IN_USE = re.compile(r"failed to start (?P<service>\w+) service: .*?'(?P<host>[^']*):(?P<port>\d+)' already in use")


def _unquote(text: str) -> str:
    """Triton's quoted message text as written (``\n`` and ``\"`` escaped in the log)."""
    try:
        return json.loads(f'"{text}"')
    except ValueError:
        return text


@dataclass
class LoadProgress:
    """Reads Triton's log as it grows and turns it into one line per model state change."""

    total: int = 0
    states: dict[str, str] = field(default_factory=dict)  # model -> LOADING | READY | FAILED
    reasons: dict[str, str] = field(default_factory=dict)  # model -> Triton's reason for FAILED
    port_in_use: tuple[str, str, int] | None = None  # (service, host, port) Triton could not bind
    _partial: str = ""

    @property
    def ready(self) -> int:
        return sum(1 for st in self.states.values() if st == "READY")

    def _count(self) -> str:
        return f"{self.ready}/{max(self.total, len(self.states))}"

    def feed(self, text: str) -> list[str]:
        """Consume more log text; return the progress lines it produces (complete log lines only)."""
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        out: list[str] = []
        for line in lines:
            out.extend(self._line(line.rstrip("\r")))
        return out

    def _line(self, line: str) -> list[str]:
        if m := _LOADING.search(line):
            name = m["name"]
            if self.states.get(name) != "LOADING":
                self.states[name] = "LOADING"
                return [f"Triton: loading {name} (version {m['version']}) ..."]
        elif m := _LOADED.search(line):
            name = m["name"]
            self.states[name] = "READY"
            return [f"Triton: {name} ... READY ({self._count()})"]
        elif (m := _FAILED.search(line)) or (m := _POLL_FAILED.search(line)):
            name = m["name"]
            self.states[name] = "FAILED"
            self.reasons[name] = _unquote(m["reason"]).strip()
            return [f"Triton: {name} ... FAILED: {self.reasons[name].splitlines()[0]}"]
        elif m := _PORT_IN_USE.search(line):
            self.port_in_use = (m["service"], m["host"], int(m["port"]))
        return []

    @property
    def failed(self) -> dict[str, str]:
        return {n: self.reasons.get(n, "") for n, st in self.states.items() if st == "FAILED"}


def explain_exit(cfg: LocalTriton, code: int | None, progress: LoadProgress, log_path: Path,
                 log_lines: list[str]) -> str:
    """What failed and what to do, for a tritonserver that exited during start-up."""
    head = f"tritonserver exited with code {code} during start-up"
    tail = "\n".join(f"  {ln}" for ln in log_lines[-15:])
    if progress.failed:
        repo = Path(cfg.model_repository)
        parts = []
        for name, reason in progress.failed.items():
            reason = "\n    ".join(ln for ln in reason.splitlines() if ln.strip()) or "(no reason in the log)"
            parts.append(f"model '{name}' failed to load: {reason}")
        return (f"{head}: " + "\n".join(parts) + f"\nfix the model (its directory in {repo}: config.pbtxt, "
                f"model files) or move it out of the repository, then start again. Triton's log: {log_path}")
    if progress.port_in_use:
        service, host, port = progress.port_in_use
        name = {"HTTP": "http_port", "GRPC": "grpc_port"}.get(service.upper(), "metrics_port")
        return f"{head}: " + port_in_use_message(host, port, f"local_triton.{name}", f"Triton's {service} port")
    return f"{head}. The last lines of its log ({log_path}):\n{tail}"


def start(cfg: LocalTriton, root: Path | None = None, log_path: Path | None = None,
          on_progress: Callable[[str], None] | None = None) -> TritonProcess:
    """Start Triton and wait until it is ready (and is *our* process answering).

    ``on_progress`` gets one line per model state change while Triton loads (``gateway local``
    prints them); every failure is a ``TritonStartError`` saying what failed and what to do.
    """
    root = root or Path.cwd()
    cmd, env = prepare(cfg, root)
    check_ports(cfg)
    log_path = log_path or (root / cfg.workdir).resolve() / "triton.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    progress = LoadProgress(total=count_models((root / cfg.model_repository).resolve()))
    if on_progress:
        on_progress(f"Triton: loading {progress.total} models from {cfg.model_repository} (log: {log_path})")
    workdir = (root / cfg.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    stubregions.forget(workdir, ())  # a run that could not clean up (SIGKILLed) left its list here
    before = frozenset(stubregions.present())
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(parent.ending_with_us(cmd), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    tp = TritonProcess(cfg, proc, log_path, workdir, before)
    try:
        _wait_ready(tp, progress, on_progress or (lambda _line: None))
    except BaseException:
        tp.stop()
        raise
    stubregions.remember(workdir, stubregions.present() - before)  # for the next start, if this run is killed
    return tp


class _LogReader:
    """The text appended to a file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def read(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return ""
        self.offset += len(data)
        return data.decode(errors="replace")


def _wait_ready(tp: TritonProcess, progress: LoadProgress, on_progress: Callable[[str], None]) -> None:
    cfg, proc = tp.cfg, tp.proc
    reader = _LogReader(tp.log_path)
    t0 = time.monotonic()
    deadline = t0 + cfg.startup_timeout_s

    def follow() -> None:
        for line in progress.feed(reader.read()):
            on_progress(line)

    while time.monotonic() < deadline:
        follow()
        if proc.poll() is not None:
            follow()
            lines = tp.log_path.read_text(errors="replace").splitlines() if tp.log_path.exists() else []
            raise TritonStartError(explain_exit(cfg, proc.returncode, progress, tp.log_path, lines))
        status, _ = _get(f"{tp.http_url}/v2/health/ready")
        if status == 200 and _ours(tp):
            follow()
            on_progress(f"Triton: ready, {progress.ready} models, in {time.monotonic() - t0:.1f} s")
            return
        time.sleep(0.25)
    follow()
    loading = sorted(n for n, st in progress.states.items() if st == "LOADING")
    still = f" (still loading: {', '.join(loading)})" if loading else ""
    raise TritonStartError(
        f"tritonserver was not ready after {cfg.startup_timeout_s:.0f}s{still}: raise "
        f"`local_triton.startup_timeout_s` if the machine is slow; {tp.diagnosis()}")


def _ours(tp: TritonProcess) -> bool:
    """A stray server on the same port would also answer 200: our own log must say it bound it."""
    text = tp.log_path.read_text(errors="replace")
    return f"Started HTTPService at {tp.cfg.host}:{tp.cfg.http_port}" in text


def main() -> int:  # pragma: no cover - manual helper: python -m gateway.local.localtriton
    tp = start(LocalTriton())
    print(f"triton ready: grpc {tp.grpc_target}, http {tp.http_url}", file=sys.stderr)
    try:
        tp.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        tp.stop()
    return 0
