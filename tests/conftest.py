"""Shared fixtures.

Contract tests (marker ``contract``) talk to a real Triton, the tritonserver bundled in the
nvidia-pytriton wheel running on CPU, started once per test session on free ports, and to the
gateway started once as a subprocess (``gateway serve``) in front of it with every listener on a
free loopback port. Unit tests use neither. The session's Triton is watched: if it dies, the test
during which it died gets its exit and log tail in its report, and it is started again on the same
ports for the tests after it (tests/tritonwatch.py).
"""

from __future__ import annotations

import os

import pytest
import yaml

from gateway.dialects import LISTENERS
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests import tritonwatch
from tests.support import (  # noqa: F401  (re-exported for tests)
    ROOT,
    GatewayProcess,
    free_port,
    gateway_config,
    start_gateway,
    stop_gateway,
    wait_http,
)


@pytest.fixture(scope="session")
def triton(tmp_path_factory) -> localtriton.TritonProcess:
    """A real Triton on CPU serving model_repository/ (once per session)."""
    work = tmp_path_factory.mktemp("triton")
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"),
        # a session inside this one (tests/contract/test_triton_watch.py) names its own work dir, and
        # a repository of the one model it calls (Triton starts twice there: each start loads it all)
        model_repository=os.environ.get("TEST_TRITON_REPOSITORY") or str(ROOT / "model_repository"),
        workdir=os.environ.get("TEST_TRITON_WORKDIR") or str(ROOT / ".run" / "test-triton"),
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        startup_timeout_s=180,
    )
    tp = localtriton.start(cfg, ROOT, log_path=work / "triton.log")
    tritonwatch.watch(tritonwatch.Watch(tp, ROOT, work))  # restarted if it dies (tests/tritonwatch.py)
    yield tp
    tritonwatch.watch(None)
    tp.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After each phase of each test: if the session's Triton died, the phase's report gets a section
    with its exit and log tail, and Triton is started again for the tests after it."""
    outcome = yield
    note = tritonwatch.check()
    if note:
        outcome.get_result().sections.append((tritonwatch.SECTION, note))


@pytest.fixture(scope="session")
def gateway(triton, tmp_path_factory) -> GatewayProcess:
    """The gateway in front of the session's Triton, every listener on a free loopback port.

    Each ``tests/config/*.yaml`` may hold a ``dialects:`` section (one file per dialect); they are
    merged, so contract tests exercise the same YAML mapping features users configure.
    """
    tmp = tmp_path_factory.mktemp("gateway")
    dialects: dict = {}
    for f in sorted((ROOT / "tests" / "config").glob("*.yaml")):
        dialects.update((yaml.safe_load(f.read_text()) or {}).get("dialects") or {})
    extra = {"dialects": dialects} if dialects else {}
    ports = {name: free_port() for name in LISTENERS}
    gw = start_gateway(gateway_config(triton.grpc_target, ports, extra), tmp)
    tritonwatch.wait_for(gw)  # after a restart, until it answers again
    yield gw
    stop_gateway(gw)


@pytest.fixture
def restore_logging():
    """The root logger's handlers and level, and the access logger's level, put back after the test."""
    import logging

    from gateway.observe import logs

    root, access = logging.getLogger(), logs.ACCESS
    saved = root.handlers[:], root.level, access.level
    yield
    root.handlers[:], access.level = saved[0], saved[2]
    root.setLevel(saved[1])
