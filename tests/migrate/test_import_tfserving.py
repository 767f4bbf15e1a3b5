"""`gateway import tfserving` proven against TensorFlow itself (issue 46).

TensorFlow builds the SavedModels (tf_side.py build: model 'shop', two versions with labels
stable/canary and predict signatures over float, int and string tensors with and without a batch
dimension, a classify and a regress signature over tf.Example, one signature of unknown rank that
must be refused; model 'plain', versions 3 and 7 under TF Serving's default policy). The import
writes a Triton repository and a gateway.yaml; a Triton of its own serves the repository on CPU, the
gateway runs that gateway.yaml's mapping, `gateway check` passes, and every signature answers
through TF Serving REST and gRPC (the real tensorflow-serving-api stubs, tf_side.py compare) what
``tf.saved_model.load(...).signatures[...]`` computes, for every way of naming the version.

Needs TensorFlow's environment .venv-tf (`make migrate-env`); `make test-migrate` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from gateway.dialects import LISTENERS
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

TF_PY = ROOT / ".venv-tf" / "bin" / "python"
TF_SIDE = ROOT / "tests" / "migrate" / "tf_side.py"

pytestmark = [pytest.mark.migrate,
              pytest.mark.skipif(not TF_PY.exists(), reason="TensorFlow's environment .venv-tf is missing "
                                                            "(make migrate-env; make test-migrate runs these)")]

COMMENTED = "# my gateway settings\nlog_level: INFO  # kept\ndialects:\n  grps:\n    start_online: true\n"


def _import(work, *extra) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gateway", "import", "tfserving", "--model-config-file", str(work / "models.config"),
           "--out", str(work / "repo"), "--config", str(work / "gateway.yaml"), "--tf-python", str(TF_PY), *extra]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    work = tmp_path_factory.mktemp("migrate")
    subprocess.run([str(TF_PY), str(TF_SIDE), "build", str(work)], check=True, timeout=600)
    (work / "gateway.yaml").write_text(COMMENTED)
    first = _import(work, "--no-check")
    assert first.returncode == 0, first.stdout + first.stderr
    return work, first.stdout


def _snapshot(work) -> dict:
    files = [*sorted((work / "repo").rglob("*")), work / "gateway.yaml"]
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in files if p.is_file()}


def test_import_writes_repository_and_mapping(imported):
    work, out = imported
    repo = work / "repo"
    # one Triton model per signature, every served version, a GPU and a CPU configuration
    for model, versions in (("shop", ("1", "2")), ("shop__ints", ("1", "2")), ("shop__text", ("1", "2")),
                            ("shop__tensorflow_serving_classify", ("1", "2")), ("plain", ("7",))):
        for v in versions:
            assert (repo / model / v / "model.onnx").is_file() and (repo / model / v / "model.py").is_file()
        assert (repo / model / "configs" / "cpu.pbtxt").read_text().count('backend: "python"') == 1
    assert not (repo / "plain" / "3").exists()  # latest 1: version 3 is not served, so not converted
    assert "max_batch_size: 64" in (repo / "shop" / "config.pbtxt").read_text()  # [None, 3] -> batching
    assert "max_batch_size: 0" in (repo / "shop__unbatched" / "config.pbtxt").read_text()
    assert 'platform: "tensorrt_plan"' in (repo / "shop" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in (repo / "shop__text" / "config.pbtxt").read_text()  # strings
    assert "version_policy: { specific: { versions: [ 1, 2 ] } }" in (repo / "shop" / "config.pbtxt").read_text()
    assert "version_policy: { latest: { num_versions: 1 } }" in (repo / "plain" / "config.pbtxt").read_text()
    text = (work / "gateway.yaml").read_text()
    assert text.startswith("# my gateway settings\nlog_level: INFO  # kept\n")  # comments kept
    shop = yaml.safe_load(text)["dialects"]["tfserving"]["models"]["shop"]
    assert shop["version_labels"] == {"stable": 1, "canary": 2}
    assert shop["signatures"]["serving_default"] == {"method": "predict", "inputs": {"x": "x"},
                                                     "outputs": {"total": "total", "y": "y"}}
    assert shop["signatures"]["tensorflow/serving/classify"] == {
        "method": "classify", "triton": "shop__tensorflow_serving_classify", "same_versions": True,
        "features": {"x": "x"}, "scores": "scores", "classes": "classes"}
    # the one refusal, one sentence naming the signature and why
    refused = [line for line in out.splitlines() if "not imported" in line]
    assert refused == ["model shop, signature shapeless: not imported: its tensor 'anything' has no known rank and "
                       "a Triton tensor needs one (re-export the signature with a shape, or map it by hand with "
                       "`elementwise: true`)."]


def test_second_import_changes_nothing(imported):
    work, _ = imported
    before = _snapshot(work)
    again = _import(work, "--no-check")
    assert again.returncode == 0, again.stderr
    assert f"{work / 'repo'}: already up to date" in again.stdout
    assert f"{work / 'gateway.yaml'}: already up to date" in again.stdout
    assert _snapshot(work) == before


def test_answers_equal_tensorflow(imported, tmp_path):
    work, _ = imported
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(work / "repo"),
                      workdir=str(tmp_path / "triton"), http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), startup_timeout_s=180)
    triton = localtriton.start(cfg, ROOT, log_path=tmp_path / "triton.log")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        env["GATEWAY__UPSTREAM__GRPC"] = triton.grpc_target
        for name in LISTENERS:  # only TF Serving's names are checked (this repository has nothing else)
            if not name.startswith("tfserving"):
                env[f"GATEWAY__LISTENERS__{name.upper()}__ENABLED"] = "false"
        check = subprocess.run([sys.executable, "-m", "gateway", "check", "--config", str(work / "gateway.yaml")],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "0 error(s)" in check.stdout
        print(check.stdout)
        dialects = yaml.safe_load((work / "gateway.yaml").read_text())["dialects"]
        ports = {"tfserving_rest": free_port(), "tfserving_grpc": free_port(), "admin_http": free_port()}
        gw = start_gateway(gateway_config(triton.grpc_target, ports, {"dialects": dialects}), tmp_path)
        try:
            cmp = subprocess.run([str(TF_PY), str(TF_SIDE), "compare", str(work), gw.url("tfserving_rest"),
                                  gw.target("tfserving_grpc")], capture_output=True, text=True, timeout=600)
            assert cmp.returncode == 0, cmp.stderr[-3000:]
            result = json.loads(cmp.stdout.strip().splitlines()[-1])
        finally:
            stop_gateway(gw)
    finally:
        triton.stop()
    print(f"\ncompared {result['checked']} answers; {result['bit_equal']} of {result['floats']} floats bit-equal "
          f"to TensorFlow's, max abs error {result['max_abs_err']:.3g}")
    assert result["mismatches"] == []
    # 5 version selectors x (6 predict outputs over REST + 4 gRPC versions + 6 over gRPC + 7 classify/regress
    # checks) + 2 for 'plain'
    assert result["checked"] == 5 * (6 + 4 + 6 + 7) + 2
