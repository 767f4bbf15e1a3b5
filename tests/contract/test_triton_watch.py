"""The session's Triton is watched (tests/tritonwatch.py): a small suite runs in a pytest subprocess
with the real fixtures (tests/conftest.py: its own Triton and gateway), its Triton is SIGKILLed
from outside in the middle of a test, as a crash would end it; that test fails with Triton's exit
and log tail in its report, and the tests after it pass on the restarted Triton, through the same
gateway. This test does not use the session's Triton."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.support import ROOT

MODEL = "saved_model_half_plus_three"
CONFTEST = '''
import json, os

pytest_plugins = ["tests.conftest"]  # the real fixtures and the watch


def pytest_runtest_logreport(report):
    with open(os.environ["WATCH_DIR"] + "/reports.jsonl", "a") as f:
        f.write(json.dumps({"test": report.nodeid.rpartition("::")[2], "when": report.when,
                            "outcome": report.outcome, "sections": dict(report.sections)}) + "\\n")
'''

SUITE = '''
import json, os, time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from tests.support import http_call

DIR = Path(os.environ["WATCH_DIR"])


def predict(gateway, x):
    """TF Serving REST through the gateway: (status, body)."""
    status, _, body = http_call(gateway.url("tfserving_rest"), "POST",
                                "/v1/models/saved_model_half_plus_three:predict", '{"instances": [%s]}' % x)
    return status, json.loads(body)


def test_1_before(gateway, triton):
    assert predict(gateway, 1.0) == (200, {"predictions": [3.5]})


def test_2_triton_dies_meanwhile(gateway, triton):
    (DIR / "pid").write_text(str(triton.proc.pid))
    deadline = time.monotonic() + 120
    while not (DIR / "killed").exists():
        assert time.monotonic() < deadline, "never killed"
        time.sleep(0.05)
    assert predict(gateway, 2.0)[0] == 200  # fails: Triton is gone


def test_3_after_on_the_restarted_triton(gateway, triton):
    assert triton.proc.pid != int((DIR / "pid").read_text())
    assert predict(gateway, 2.0) == (200, {"predictions": [4.0]})


def test_4_v2_grpc_passthrough_after(gateway, triton):
    client = grpcclient.InferenceServerClient(gateway.target("v2_grpc"))
    x = grpcclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([3.0], np.float32))
    assert client.infer("saved_model_half_plus_three", [x]).as_numpy("y")[0] == 4.5
    client.close()
'''


def test_a_triton_killed_mid_test_fails_that_test_only_and_is_restarted(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_tiny.py").write_text(SUITE)
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "PYTEST_"))}
    env["WATCH_DIR"] = str(suite)
    env["TEST_TRITON_WORKDIR"] = str(tmp_path / "triton")  # not the outer session's (its stub regions' list)
    models = tmp_path / "models"  # the one model the suite calls: each of its two Triton starts loads only it
    shutil.copytree(ROOT / "model_repository" / MODEL, models / MODEL)
    env["TEST_TRITON_REPOSITORY"] = str(models)
    with open(tmp_path / "pytest.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "-c", str(suite / "pytest.ini"),
                                 "--basetemp", str(tmp_path / "base"), str(suite)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (suite / "pid").exists():
            assert proc.poll() is None and time.monotonic() < deadline, _log(tmp_path)
            time.sleep(0.1)
        pid = int((suite / "pid").read_text())
        victim = psutil.Process(pid)
        assert victim.name() == "tritonserver" and proc.pid in [p.pid for p in victim.parents()]
        os.kill(pid, signal.SIGKILL)  # a crash: no goodbye
        while victim.is_running() and victim.status() != psutil.STATUS_ZOMBIE:  # its parent reaps it later
            time.sleep(0.05)
        (suite / "killed").write_text("")
        proc.wait(420)
    finally:
        if proc.poll() is None:
            proc.kill()  # its Triton and gateway end with it (PR_SET_PDEATHSIG)
            proc.wait(30)
    reports = [json.loads(line) for line in (suite / "reports.jsonl").read_text().splitlines()]
    outcomes = {(r["test"], r["when"]): r["outcome"] for r in reports}
    calls = {t: o for (t, when), o in outcomes.items() if when == "call"}
    assert calls == {"test_1_before": "passed", "test_2_triton_dies_meanwhile": "failed",
                     "test_3_after_on_the_restarted_triton": "passed",
                     "test_4_v2_grpc_passthrough_after": "passed"}, _log(tmp_path)
    assert all(o == "passed" for (_, when), o in outcomes.items() if when != "call"), outcomes
    noted = [r for r in reports if "Triton died" in r["sections"]]
    assert [(r["test"], r["when"]) for r in noted] == [("test_2_triton_dies_meanwhile", "call")]
    note = noted[0]["sections"]["Triton died"]
    assert f"the session's Triton (pid {pid}) killed by SIGKILL (9)" in note
    assert "Started GRPCInferenceService at" in note  # the dead Triton's log tail
    assert "restarted: pid " in note and "on the same ports" in note
    assert proc.returncode == 1  # pytest: some test failed
    shown = (tmp_path / "pytest.log").read_text(errors="replace")  # under the failure, as any report section
    assert "- Triton died -" in shown and f"the session's Triton (pid {pid}) killed by SIGKILL" in shown


def _log(tmp_path: Path) -> str:
    return (tmp_path / "pytest.log").read_text(errors="replace")[-6000:]
