"""Command line: ``gateway serve`` (the gateway alone), ``gateway local`` (local Triton + gateway),
``gateway run-pd`` (local Triton + a MindIE PD cluster), ``gateway check`` (how each dialect's
names map onto Triton's models) and ``gateway import tfserving|grps`` (gateway/migrate)."""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import replace

from gateway import config as config_mod
from gateway.settings import ENV_PREFIX, Settings, SettingsError

log = logging.getLogger("gateway")


def _setup_logging(s: Settings) -> None:
    from gateway.observe import logs

    logs.setup(s.log_level, s.log_format, s.access_log)


async def _serve_async(settings: Settings, reuse_port: bool, announce: bool) -> None:
    from gateway.app import Worker, freeze_heap, listener_lines

    try:
        import uvloop  # noqa: F401  (the loop policy is set by the caller)
    except ImportError:  # pragma: no cover
        pass
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    from gateway.process import shared

    shared.stop_hook = stop.set  # a route may stop the worker as SIGTERM does (MindIE's /stopService)
    worker = Worker(settings, reuse_port=reuse_port)
    await worker.start()
    freeze_heap()
    if announce:
        for line in listener_lines(settings):
            print(line, flush=True)
    log.info("worker %d serving (upstream %s)", os.getpid(), settings.upstream.grpc)
    await stop.wait()
    log.info("worker %d stopping", os.getpid())
    await worker.stop(grace=settings.limits.drain_s)
    from gateway.observe import logs, metrics

    logs.flush()  # the access lines still queued (a spawned worker exits without atexit handlers)
    metrics.flush()  # and the observations


def _run_loop(coro) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:  # pragma: no cover
        asyncio.run(coro)


def _worker_entry(config: str | None, env: dict[str, str]) -> None:
    os.environ.update(env)
    s = config_mod.load(config)
    _setup_logging(s)
    _run_loop(_serve_async(s, reuse_port=True, announce=False))


def serve(settings: Settings, config: str | None) -> int:
    """Run the gateway in the foreground until SIGINT/SIGTERM; ``workers`` processes share the ports."""
    from gateway import startup
    from gateway.app import listener_lines

    if not startup.preflight(settings):  # ports in use: which and what to change; Triton unreachable: a warning
        return 1
    if settings.workers_auto:
        print(_auto_workers_line(settings.workers), flush=True)
    if settings.workers == 1:
        _run_loop(_serve_async(settings, reuse_port=False, announce=True))
        return 0
    # Several processes, each with every listener, sharing ports through SO_REUSEPORT.
    from gateway.process import shared

    metrics_dir = tempfile.mkdtemp(prefix="gateway-metrics-")
    shared_dir = tempfile.mkdtemp(prefix="gateway-shared-")  # state every worker sees (gateway/process/shared.py)
    env = {
        "PROMETHEUS_MULTIPROC_DIR": metrics_dir,
        shared.ENV: shared_dir,
        ENV_PREFIX + "UPSTREAM__GRPC": settings.upstream.grpc,
    }
    os.environ.update(env)
    ctx = multiprocessing.get_context("spawn")

    def spawn():
        p = ctx.Process(target=_worker_entry, args=(config, env), daemon=False)
        p.start()
        return p

    procs = [spawn() for _ in range(settings.workers)]
    for line in listener_lines(settings):
        print(line, flush=True)
    stopping = False

    def _stop(_sig, _frm):
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.is_alive():
                p.terminate()  # each worker drains (limits.drain_s), then exits

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        return _supervise(procs, spawn, lambda: stopping, _stop)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        shutil.rmtree(shared_dir, ignore_errors=True)


def _auto_workers_line(workers: int) -> str:
    from gateway.process import cpus

    usable = cpus.usable()
    why = f"{usable} usable CPUs" if workers == usable else "a setting keeps state in one process"
    return f"workers: auto: {workers} ({why})"


RESTART_WINDOW_S = 60.0
MAX_RESTARTS = 5  # in RESTART_WINDOW_S; past it the gateway stops instead of crash-looping


def _supervise(procs: list, spawn, stopping, stop) -> int:
    """Restart a worker that dies (logged); stop everything if workers keep dying. Returns the exit code."""
    from multiprocessing.connection import wait

    from prometheus_client import multiprocess

    restarts: collections.deque[float] = collections.deque()
    code = 0
    while not stopping():
        dead = set(wait([p.sentinel for p in procs], timeout=1.0))
        for i, p in enumerate(procs):
            if p.sentinel not in dead or stopping():
                continue
            p.join()
            multiprocess.mark_process_dead(p.pid)  # its live gauges (in-flight) leave the sums
            now = time.monotonic()
            restarts.append(now)
            while restarts and now - restarts[0] > RESTART_WINDOW_S:
                restarts.popleft()
            if len(restarts) > MAX_RESTARTS:
                log.error("workers died %d times in %.0f s (last: pid %d, exit code %s); stopping",
                          len(restarts), RESTART_WINDOW_S, p.pid, p.exitcode)
                code = p.exitcode or 1
                stop(None, None)
                break
            procs[i] = spawn()
            log.warning("worker %d exited with code %s; started worker %d in its place", p.pid, p.exitcode,
                        procs[i].pid)
    for p in procs:
        p.join()
    return code


def local(settings: Settings, config: str | None) -> int:
    """Start the bundled tritonserver on CPU, then the gateway in front of it; stop both on exit."""
    from gateway import startup
    from gateway.local import launch

    # While Triton starts, SIGTERM becomes an exception so that start() stops what it started;
    # afterwards serve() handles signals itself and the finally below stops Triton.
    signal.signal(signal.SIGTERM, launch.raise_exit)
    parent = launch.exit_with_parent()
    if not startup.preflight(settings, upstream=False):  # a listener's port taken: say so before Triton loads
        return 1
    tp = launch.start_triton(settings, on_progress=lambda line: print(line, flush=True))
    if tp is None:
        return 1
    settings = replace(settings, upstream=settings.upstream.model_copy(update={"grpc": tp.grpc_target}))
    os.environ[ENV_PREFIX + "UPSTREAM__GRPC"] = tp.grpc_target
    try:
        return serve(settings, config)
    finally:
        tp.stop()
        print("stopped gateway and Triton", file=sys.stderr, flush=True)
        launch.say_if_parent_gone(parent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("serve", "run the gateway against the Triton named in the config (upstream.grpc)"),
        ("local", "start the bundled Triton on CPU serving model_repository/, then the gateway"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--config", "-c", help="YAML settings file (gateway.yaml is the commented reference)")
    check = sub.add_parser("check", help="connect to Triton and show how each dialect's names map onto its models; "
                                         "exit 1 on a mismatch (gateway/check.py)")
    check.add_argument("--config", "-c", help="YAML settings file (gateway.yaml is the commented reference)")
    check.add_argument("--json", action="store_true", help="JSON instead of a table")
    pd = sub.add_parser("run-pd", help="MindIE PD on 127.0.0.1: local Triton, a coordinator, two P and two D "
                                       "instances (make run-pd)")
    pd.add_argument("--config", "-c", help="YAML settings (local_triton); default: built-in defaults")
    pd.add_argument("--ports", default="1025,2025,2026,3025,3026",
                    help="coordinator,P1,P2,D1,D2 MindIE ports (default %(default)s)")
    pd.add_argument("--admin-base", type=int, default=9190,
                    help="first admin port; 0: no admin listeners (default %(default)s)")
    _import_parser(sub)
    mig = sub.add_parser("migration", help="cutting over from a legacy server (docs/migration.md)")
    mig_sub = mig.add_subparsers(dest="action", required=True)
    rep = mig_sub.add_parser("report", help="per model: requests compared, agreement, worst error, verdict")
    rep.add_argument("--config", "-c", help="YAML settings file: the admin listener and the mismatch files")
    rep.add_argument("--url", help="the gateway's /metrics (default: its admin listener's, from the config)")
    rep.add_argument("--min-compared", type=int, help="compared requests needed (default: legacy.ready_after)")
    rep.add_argument("--json", action="store_true", help="JSON instead of a table")
    args = parser.parse_args(argv)
    if args.command == "import":
        return _import(args)
    if args.command == "run-pd" and len(args.ports.split(",")) != 5:
        parser.error("--ports needs five ports")
    try:
        s = config_mod.load(args.config)
    except (OSError, SettingsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.command == "migration":
        return _migration_report(s, args)
    if args.command == "check":
        from gateway import check as check_mod

        return check_mod.main(s, as_json=args.json)
    if args.command == "run-pd":
        from gateway.local import launch

        return launch.run_pd(s, [int(p) for p in args.ports.split(",")], args.admin_base)
    _setup_logging(s)
    if args.command == "serve":
        return serve(s, args.config)
    return local(s, args.config)


def _migration_report(s: Settings, args) -> int:
    from gateway.cutover import report

    admin = s.listener("admin_http")
    host = "127.0.0.1" if admin.host in ("0.0.0.0", "::", "") else admin.host
    url = args.url or f"http://{host}:{admin.port}/metrics"
    legacies = {name: getattr(conf, "legacy", None) for name, conf in s.dialects.items()}
    legacies = {name: conf for name, conf in legacies.items() if conf is not None}
    need = args.min_compared if args.min_compared is not None else {n: c.ready_after for n, c in legacies.items()}
    paths = sorted({c.mismatches.path for c in legacies.values()})
    try:
        models = report.collect(url, paths)
    except OSError as e:
        print(f"error: {url}: {e}", file=sys.stderr)
        return 2
    print(report.as_json(models, need) if args.json else report.render(models, need), end="")
    ready = bool(models) and all(
        m.verdict(need if isinstance(need, int) else need.get(m.dialect, 1000)) == "ready to cut over" for m in models)
    return 0 if ready else 1


def _import_parser(sub) -> None:
    imp = sub.add_parser("import", help="turn another server's models into model_repository/ entries and the "
                                        "gateway's mapping (gateway/migrate)")
    kinds = imp.add_subparsers(dest="source", required=True)
    tf = kinds.add_parser("tfserving", help="TF Serving SavedModels (a --model_config_file or one base path): "
                                            "ONNX models for Triton + dialects.tfserving")
    where = tf.add_mutually_exclusive_group(required=True)
    where.add_argument("--model-config-file", help="TF Serving's --model_config_file (ModelServerConfig text)")
    where.add_argument("--base-path", help="one model's base path (version directories under it)")
    tf.add_argument("--name", help="with --base-path: the model name clients use (default: the directory's)")
    tf.add_argument("--tf-python", default="", help="python of TensorFlow's environment (default: .venv-tf, "
                                                    "or GATEWAY_TF_PYTHON; make migrate-env makes it)")
    tf.add_argument("--max-batch-size", type=int, default=64,
                    help="max_batch_size of signatures with a batch dimension (default %(default)s)")
    grps = kinds.add_parser("grps", help="GRPS's inference.yml: dialects.grps over Triton models of the same names")
    grps.add_argument("--inference-yml", required=True, help="GRPS's conf/inference.yml")
    for p in (tf, grps):
        p.add_argument("--out", default="model_repository", help="Triton model repository (default %(default)s)")
        p.add_argument("--config", "-c", default="gateway.yaml",
                       help="gateway config to merge the mapping into (default %(default)s; created if missing)")
        p.add_argument("--no-check", action="store_true", help="do not run `gateway check` afterwards")


def _import(args) -> int:
    """Import, then `gateway check` on the result (its exit status when the import succeeded)."""
    if args.source == "tfserving":
        from gateway.migrate import tfserving as migrate
    else:
        from gateway.migrate import grps as migrate
    code = migrate.main(args)
    if code or args.no_check:
        return code
    print(f"\n$ gateway check --config {args.config}", flush=True)
    try:
        s = config_mod.load(args.config)
    except (OSError, SettingsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from gateway import check as check_mod

    return check_mod.main(s)
