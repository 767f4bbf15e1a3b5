"""Start a local Triton and a gateway in front of it for benchmarks (loopback only, bounded)."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from gateway import localtriton
from gateway.dialects import LISTENERS
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway


@contextlib.contextmanager
def triton_and_gateway(workers: int = 1):
    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository"),
                  workdir=str(ROOT / ".run" / "bench-triton"), http_port=free_port(), grpc_port=free_port(),
                  metrics_port=free_port())
    tp = localtriton.start(cfg, ROOT, log_path=tmp / "triton.log")
    try:
        ports = {name: free_port() for name in LISTENERS}
        conf = gateway_config(tp.grpc_target, ports)
        conf["workers"] = workers
        gw = start_gateway(conf, tmp)
        try:
            yield tp, gw
        finally:
            stop_gateway(gw)
    finally:
        tp.stop()
