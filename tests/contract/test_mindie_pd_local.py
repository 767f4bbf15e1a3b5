"""`make run-pd`'s launcher: Triton, a coordinator, two P and two D instances; SIGINT stops all."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import requests
import yaml

from tests.contract.test_docs_examples import loose_mismatch, parse
from tests.support import ROOT, free_port


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _run_the_docs_example(ports: list[int], tmp_path) -> None:
    """docs/mindie.md's PD request by hand, as written, against this cluster (its ports put in)."""
    block = next(b for b in parse(ROOT / "docs" / "mindie.md") if "/dresult" in b.code and b.lang == "sh")
    default = dict(zip((1025, 2025, 2026, 3025, 3026), ports, strict=True))
    code = re.sub(r"\b(1025|2025|2026|3025|3026)\b", lambda m: str(default[int(m[1])]), block.code)
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert block.expected and loose_mismatch(block.expected, out.stdout) is None, \
        (loose_mismatch(block.expected, out.stdout), out.stdout[-1500:], out.stderr)
    assert "reqId:0xffffffffffffffff" not in out.stdout  # the coordinator did not take the link back


def test_run_pd_starts_a_cluster_that_answers_and_stops_on_ctrl_c(tmp_path):
    ports = [free_port() for _ in range(5)]
    triton = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    cfg = tmp_path / "local.yaml"
    cfg.write_text(yaml.safe_dump({"local_triton": {"venv": str(ROOT / ".venv-triton"), "workdir": ".run/test-pd-triton",
                                                    "model_repository": str(ROOT / "model_repository"),
                                                    "startup_timeout_s": 180, **triton}}))
    log = open(tmp_path / "launcher.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "run-pd", "--config", str(cfg),
                             "--ports", ",".join(map(str, ports)), "--admin-base", "0"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        coord = f"http://127.0.0.1:{ports[0]}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "launcher.log").read_text()
            try:
                if requests.get(coord + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError((tmp_path / "launcher.log").read_text())
        for port in ports:
            assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        r = requests.post(coord + "/v1/chat/completions", timeout=30, json={
            "model": "llama2_7b", "stream": True, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.content.endswith(b"data: [DONE]\n\n")
        _run_the_docs_example(ports, tmp_path)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        text = (tmp_path / "launcher.log").read_text()
        assert "stopped the PD instances and Triton" in text
        assert all(_refused(p) for p in ports + [triton["grpc_port"]])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
