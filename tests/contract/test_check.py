"""`gateway check` on the repository's own gateway.yaml against the real Triton, run as the CLI:
exit 0 and every model of model_repository/ listed in every dialect that exposes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import ROOT

MODELS = sorted(p.parent.name for p in (ROOT / "model_repository").glob("*/config.pbtxt"))


def check(triton, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY__UPSTREAM__GRPC"] = triton.grpc_target
    return subprocess.run([sys.executable, "-m", "gateway", "check", "--config", "gateway.yaml", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_repository_config_checks_clean_and_lists_every_model(triton):
    run = check(triton, "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert doc["triton"] == {"reachable": True, "ready": True}
    assert doc["errors"] == 0, [f for f in doc["findings"] if f["level"] == "error"]
    by = {}
    for row in doc["rows"]:
        by.setdefault(row["dialect"], set()).add((row["name"], row["model"], row["version"]))
    assert sorted({m for _, m, _ in by["v2"]}) == MODELS
    assert {n for n, _, _ in by["tfserving"]} >= set(MODELS)  # expose_all_models
    assert {n for n, _, _ in by["grps"]} >= {f"{m}-{v}" for _, m, v in by["v2"]}
    assert {n for n, _, _ in by["mindie"]} == {"tiny_llm", "llama2_7b"}
    assert ("saved_model_half_plus_three", "saved_model_half_plus_three", "123") in by["tfserving"]


def test_table_output(triton):
    run = check(triton)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"Triton {triton.grpc_target}: reachable, ready")
    for section in ("v2 (v2_grpc", "tfserving (tfserving_grpc", "grps (grps_http", "mindie (mindie_http"):
        assert section in run.stdout
