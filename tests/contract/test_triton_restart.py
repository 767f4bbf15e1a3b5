"""Triton goes away and comes back: the gateway answers 503 in each dialect's envelope meanwhile,
keeps serving, and recovers on its own within seconds (no restart of the gateway)."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from gateway.dialects import LISTENERS
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _health(gw) -> int:
    try:
        with urllib.request.urlopen(gw.url("admin_http") + "/health", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


OWN_MODELS = ("saved_model_half_plus_three", "tiny_llm")  # what the tests on own_triton call


@pytest.fixture
def own_triton(tmp_path):
    """A Triton of the test's own (it is killed or restarted), serving only ``OWN_MODELS``: each of its
    starts loads two models, not twelve."""
    for name in OWN_MODELS:
        shutil.copytree(ROOT / "model_repository" / name, tmp_path / "models" / name)
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(tmp_path / "models"),
                  workdir=str(ROOT / ".run" / "restart-triton"), http_port=free_port(), grpc_port=free_port(),
                  metrics_port=free_port(), startup_timeout_s=120)
    procs = [localtriton.start(cfg, ROOT, log_path=tmp_path / "triton-1.log")]
    yield cfg, procs
    for p in procs:
        p.stop()


def test_gateway_survives_a_triton_restart(own_triton, tmp_path):
    cfg, procs = own_triton
    ports = {name: free_port() for name in LISTENERS}
    gw = start_gateway(gateway_config(f"{cfg.host}:{cfg.grpc_port}", ports), tmp_path)
    tf = gw.url("tfserving_rest") + "/v1/models/saved_model_half_plus_three:predict"
    grps = gw.url("grps_http") + "/grps/v1/infer/predict"
    try:
        assert _post(tf, {"instances": [1.0]}) == (200, {"predictions": [3.5]})

        procs[0].stop()  # Triton is gone
        status, body = _post(tf, {"instances": [1.0]})
        assert status == 503 and "error" in body
        status, body = _post(grps, {"str_data": "x"})  # GRPS's C++ server: HTTP 200, the code in the body
        assert (status, body["status"]["code"], body["status"]["status"]) == (200, 503, "FAILURE")
        client = grpcclient.InferenceServerClient(gw.target("v2_grpc"))
        x = grpcclient.InferInput("x", [1], "FP32")
        x.set_data_from_numpy(np.array([1.0], np.float32))
        with pytest.raises(InferenceServerException) as err:
            client.infer("saved_model_half_plus_three", [x])
        assert err.value.status() == "StatusCode.UNAVAILABLE"
        time.sleep(2.5)  # past the upstream metadata/readiness cache
        assert _health(gw) == 503

        procs.append(localtriton.start(cfg, ROOT, log_path=tmp_path / "triton-2.log"))  # same ports
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and _post(tf, {"instances": [1.0]})[0] != 200:
            time.sleep(0.2)
        assert _post(tf, {"instances": [2.0]}) == (200, {"predictions": [4.0]})
        # every path reaches Triton on the h2 transport, which connects on the next call: the V2
        # passthrough answers at once too (no reconnect backoff of its own to wait out)
        assert client.infer("saved_model_half_plus_three", [x]).as_numpy("y")[0] == 3.5
        assert _health(gw) == 200
        client.close()
    finally:
        stop_gateway(gw)
