"""KServe V2 REST (:8000) with real clients, unchanged: tritonclient.http (sync and aio) and KServe's
InferenceRESTClient; the same calls against Triton's own HTTP give the same answers. Keys, the model
scope and the closed control plane apply as on V2 gRPC.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from ml_dtypes import bfloat16
from tritonclient.utils import InferenceServerException

from tests.support import ROOT, free_port, gateway_config, http_call, start_gateway, stop_gateway

KSERVE = ROOT / ".run" / "kserve-client"


def _url(base: str) -> str:
    return base.removeprefix("http://")


@pytest.fixture(scope="module")
def direct(triton):
    c = httpclient.InferenceServerClient(_url(triton.http_url))
    yield c
    c.close()


@pytest.fixture(scope="module")
def proxied(gateway):
    c = httpclient.InferenceServerClient(_url(gateway.url("v2_http")))
    yield c
    c.close()


def _x(values, binary: bool, name: str = "x", dtype: str = "FP32", np_dtype=np.float32):
    inp = httpclient.InferInput(name, [len(values)], dtype)
    inp.set_data_from_numpy(np.asarray(values, dtype=np_dtype), binary_data=binary)
    return inp


def test_health_and_metadata_as_triton(direct, proxied):
    assert proxied.is_server_live() and proxied.is_server_ready()
    assert proxied.is_model_ready("saved_model_half_plus_three")
    assert not proxied.is_model_ready("saved_model_half_plus_three", "7")
    assert proxied.get_server_metadata() == direct.get_server_metadata()
    for name in ("saved_model_half_plus_three", "half_plus_two", "multi_tensor", "tiny_llm"):
        assert proxied.get_model_metadata(name) == direct.get_model_metadata(name)
        assert proxied.get_model_config(name) == direct.get_model_config(name)
    assert proxied.get_model_repository_index() == direct.get_model_repository_index()
    stats = proxied.get_inference_statistics("tiny_llm")
    assert [s["name"] for s in stats["model_stats"]] == ["tiny_llm"]


@pytest.mark.parametrize("binary", [False, True])
def test_infer_json_and_binary(proxied, binary):
    out = [httpclient.InferRequestedOutput("y", binary_data=binary)]
    r = proxied.infer("saved_model_half_plus_three", [_x([1.0, 2.0, 5.0], binary)], outputs=out, request_id="abc")
    np.testing.assert_array_equal(r.as_numpy("y"), np.array([3.5, 4.0, 5.5], dtype=np.float32))
    assert r.get_response()["id"] == "abc" and r.get_response()["model_version"] == "123"


def test_fp16_bf16_bytes_and_several_outputs(direct, proxied):
    inputs = [_x([1.0, 2.0], True, "x_half", "FP16", np.float16)]
    bf = httpclient.InferInput("x_bf16", [2], "BF16")
    bf.set_data_from_numpy(np.array([1.0, 4.0], dtype=bfloat16), binary_data=True)
    inputs.append(bf)
    outs = [httpclient.InferRequestedOutput("y_half"), httpclient.InferRequestedOutput("y_bf16")]
    got, want = (c.infer("half_plus_two", inputs, outputs=outs) for c in (proxied, direct))
    np.testing.assert_array_equal(got.as_numpy("y_half"), np.array([2.5, 3.0], dtype=np.float16))
    assert got.as_numpy("y_bf16").tobytes() == want.as_numpy("y_bf16").tobytes()
    tag = httpclient.InferInput("tag", [1, 1], "BYTES")
    tag.set_data_from_numpy(np.array([[b"hello"]], dtype=object), binary_data=False)
    signal = httpclient.InferInput("signal", [1, 4], "FP32")
    signal.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
    count = httpclient.InferInput("count", [1, 1], "INT32")
    count.set_data_from_numpy(np.array([[2]], dtype=np.int32), binary_data=False)
    r = proxied.infer("multi_tensor", [tag, signal, count])
    assert r.as_numpy("tag_bytes")[0, 0] == b"olleh\x00\xff"
    assert r.as_numpy("total").tolist() == [[20.0]] and r.as_numpy("length").tolist() == [[5]]


def test_16_mib_binary_and_1_mib_json_tensors(proxied):
    """Bodies past limits.offload_bytes are parsed and written off the event loop."""
    n = 4 * 1024 * 1024
    x = np.arange(n, dtype=np.float32)
    out = [httpclient.InferRequestedOutput("y", binary_data=True)]
    y = proxied.infer("saved_model_half_plus_three", [_x(x, True)], outputs=out).as_numpy("y")
    assert y.shape == (n,) and y[[0, 1, n - 1]].tolist() == (0.5 * x[[0, 1, n - 1]] + 3).tolist()
    small = np.arange(1 << 16, dtype=np.float32)
    y = proxied.infer("saved_model_half_plus_three", [_x(small, False)]).as_numpy("y")
    assert y.tolist() == (0.5 * small + 3).tolist()


def test_classification_and_compression(direct, proxied):
    out = [httpclient.InferRequestedOutput("y", class_count=2)]
    kw = {"request_compression_algorithm": "gzip", "response_compression_algorithm": "deflate"}
    got = proxied.infer("saved_model_half_plus_three", [_x([1.0, 9.0, 5.0], True)], outputs=out, **kw)
    want = direct.infer("saved_model_half_plus_three", [_x([1.0, 9.0, 5.0], True)], outputs=out, **kw)
    assert got.as_numpy("y").tolist() == want.as_numpy("y").tolist() == [b"7.500000:1", b"5.500000:2"]


def test_classification_of_an_empty_output(proxied, direct):
    """Triton 2.51's own HTTP front end crashes on this (SIGSEGV); through the gateway it is gRPC's
    answer, and Triton lives on."""
    out = [httpclient.InferRequestedOutput("y", class_count=2, binary_data=False)]
    r = proxied.infer("saved_model_half_plus_three", [_x([], False)], outputs=out)
    assert r.get_response()["outputs"] == [{"name": "y", "datatype": "BYTES", "shape": [0], "data": []}]
    assert direct.is_server_ready()


def test_errors_as_triton(direct, proxied):
    for client in (proxied, direct):
        with pytest.raises(InferenceServerException) as err:
            client.infer("no_such_model", [_x([1.0], False)])
        assert err.value.message() == "Request for unknown model: 'no_such_model' is not found"
        with pytest.raises(InferenceServerException) as err:
            client.infer("saved_model_half_plus_three", [_x([1, 2], False, dtype="INT32", np_dtype=np.int32)])
        assert "data-type is 'INT32', but model 'saved_model_half_plus_three' expects 'FP32'" in err.value.message()


def test_control_plane_is_closed(proxied):
    with pytest.raises(InferenceServerException) as err:
        proxied.load_model("tiny_llm")
    assert err.value.status() == "403"
    assert "dialects.v2.control_plane is false" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        proxied.unregister_system_shared_memory()
    assert err.value.status() == "403"


async def test_aio_client(gateway):
    c = aiohttpclient.InferenceServerClient(_url(gateway.url("v2_http")))
    try:
        assert await c.is_server_ready() and await c.is_model_ready("saved_model_half_plus_three")
        x = aiohttpclient.InferInput("x", [3], "FP32")
        x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], dtype=np.float32))
        r = await c.infer("saved_model_half_plus_three", [x])
        np.testing.assert_array_equal(r.as_numpy("y"), np.array([3.5, 4.0, 5.5], dtype=np.float32))
        meta = await c.get_model_metadata("saved_model_half_plus_three")
        assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1]}]
    finally:
        await c.close()


def _kserve_rest_client(url: str) -> dict:
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "legacy" / "kserve_rest_client.py"), url],
                         env=dict(os.environ, PYTHONPATH=str(KSERVE)), capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_kserve_rest_client_works_unchanged(triton, gateway):
    if not (KSERVE / "kserve" / "inference_client.py").exists():
        pytest.fail("kserve is not installed in .run/kserve-client: run `make install`")
    got, direct = (_kserve_rest_client(url) for url in (gateway.url("v2_http"), triton.http_url))
    # server health: the client parses the body as JSON; Triton's is empty, and so is the gateway's
    assert got["live"] == direct["live"] == "JSONDecodeError"
    assert got["ready"] == direct["ready"] == "JSONDecodeError"
    assert got["model_ready"] is True and got["missing_ready"] is False
    assert got["json"] == got["binary"] == [3.5, 4.0, 5.5] and got["id"] == "r2"
    assert got["missing"].startswith("Request for unknown model: 'no_such_model' is not found")


@pytest.fixture(scope="module")
def guarded(triton, tmp_path_factory):
    """A gateway whose v2_http asks for an API key and reaches one model only."""
    ports = {"v2_http": free_port(), "admin_http": free_port()}
    extra = {"dialects": {"v2": {"triton_models": ["saved_model_half_plus_three"]}}}
    cfg = gateway_config(triton.grpc_target, ports, extra)
    cfg["listeners"]["v2_http"]["api_keys"] = ["k1"]
    for name in ("v2_grpc", "tfserving_grpc", "tfserving_rest", "grps_http", "grps_grpc", "mindie_http"):
        cfg["listeners"][name] = {"enabled": False, "port": free_port()}
    gw = start_gateway(cfg, tmp_path_factory.mktemp("guarded"))
    yield gw
    stop_gateway(gw)


def test_keys_scope_request_id_and_metrics(guarded):
    base = guarded.url("v2_http")
    status, _, body = http_call(base, "GET", "/v2/models/saved_model_half_plus_three")
    assert status == 401 and json.loads(body)["error"]
    auth = {"Authorization": "Bearer k1", "X-Request-Id": "req-42"}
    req = urllib.request.Request(base + "/v2/models/saved_model_half_plus_three", headers=auth)
    with urllib.request.urlopen(req) as r:
        assert r.headers["x-request-id"] == "req-42"
        assert json.loads(r.read())["name"] == "saved_model_half_plus_three"
    status, _, body = http_call(base, "GET", "/v2/models/half_plus_two", headers=auth)
    assert (status, body) == (404, b'{"error":"Request for unknown model: \'half_plus_two\' is not found"}')
    status, _, body = http_call(base, "POST", "/v2/repository/index", headers=auth)
    assert [m["name"] for m in json.loads(body)] == ["saved_model_half_plus_three"]
    client = httpclient.InferenceServerClient(_url(base))
    x = httpclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    assert client.infer("saved_model_half_plus_three", [x], headers={"Authorization": "Bearer k1"}).as_numpy(
        "y").tolist() == [3.5]
    with urllib.request.urlopen(f"http://127.0.0.1:{guarded.port('admin_http')}/metrics") as r:
        text = r.read().decode()
    assert 'listener="v2_http",model="saved_model_half_plus_three",outcome="ok",route="infer"' in text


def test_client_that_goes_away_cancels_the_triton_call(gateway):
    """A generate_stream reader that disconnects after the first event: the gateway cancels its
    ModelStreamInfer (Triton's own HTTP cannot, server#8030)."""
    def cancelled() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway.port('admin_http')}/metrics") as r:
            for line in r.read().decode().splitlines():
                if (line.startswith("gateway_upstream_request_duration_seconds_count{")
                        and 'code="CANCELLED"' in line and 'method="ModelStreamInfer"' in line
                        and 'model="tiny_llm"' in line):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = cancelled()
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port("v2_http"), timeout=30)
    conn.request("POST", "/v2/models/tiny_llm/generate_stream",
                 body=json.dumps({"text_input": "a long answer", "max_tokens": 400, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read1(65536).count(b"data: {") >= 1  # chunked: the first event
    resp.close()
    conn.close()
    for _ in range(100):  # observed once the gateway notices the disconnect
        if cancelled() > before:
            break
        time.sleep(0.1)
    assert cancelled() == before + 1
