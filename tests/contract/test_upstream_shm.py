"""Large input tensors through Triton's system shared memory (gateway/upstream/shm.py), against the
real Triton: the worker's region is registered, large tensors go through it (and small ones not),
the answers are the same bytes, and a Triton that forgot the region (as after a restart) costs
no request."""

from __future__ import annotations

import os
import time
import urllib.request

import grpc
import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import service_pb2, service_pb2_grpc

from gateway.upstream import shm

MiB = 1 << 20


@pytest.fixture(scope="module")
def triton_stub(triton):
    channel = grpc.insecure_channel(triton.grpc_target)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _regions(stub) -> dict:
    status = stub.SystemSharedMemoryStatus(service_pb2.SystemSharedMemoryStatusRequest(), timeout=10)
    return {name: r for name, r in status.regions.items() if name.startswith(shm.PREFIX)}


def _gateway_regions(stub, gateway) -> dict:
    pid = str(gateway.proc.pid)
    return {name: r for name, r in _regions(stub).items() if name.split("-")[-2] == pid}


def _wait_region(stub, gateway, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _gateway_regions(stub, gateway)
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no region of the gateway registered with Triton: {_regions(stub)}")


def _shm_bytes(gateway) -> float:
    with urllib.request.urlopen(gateway.url("admin_http") + "/metrics", timeout=10) as r:
        text = r.read().decode()
    for fam in text_string_to_metric_families(text):
        if fam.name == "gateway_upstream_shared_memory_bytes":
            return sum(s.value for s in fam.samples if s.name.endswith("_total"))
    raise AssertionError("gateway_upstream_shared_memory_bytes_total not exported")


def _echo(gateway, payload: bytes) -> bytes:
    r = requests.post(gateway.url("grps_http") + "/grps/v1/infer/predict", data=payload, timeout=60,
                      headers={"content-type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:300]
    return r.content


def test_region_registered_and_large_tensors_go_through_it(gateway, triton_stub):
    regions = _wait_region(triton_stub, gateway)
    (name, region), = regions.items()
    assert region.key == "/" + name and region.byte_size == 256 * MiB
    assert os.path.exists(os.path.join(shm.SHM_DIR, name))
    # Triton's words for a region it holds already, which the gateway's re-registration relies on
    with pytest.raises(grpc.RpcError) as again:
        triton_stub.SystemSharedMemoryRegister(service_pb2.SystemSharedMemoryRegisterRequest(
            name=name, key=region.key, offset=0, byte_size=region.byte_size), timeout=10)
    assert shm._ALREADY in again.value.details().lower()
    before = _shm_bytes(gateway)
    small = os.urandom(MiB // 2)
    assert _echo(gateway, small) == small
    assert _shm_bytes(gateway) == before  # under min_bytes: the wire
    big = np.random.default_rng(7).integers(0, 256, 3 * MiB + 5, dtype=np.uint8).tobytes()
    assert _echo(gateway, big) == big
    assert _shm_bytes(gateway) == before + len(big) + 4  # the BYTES element: its 4-byte length, the bytes


def test_a_forgotten_region_costs_no_request(gateway, triton_stub):
    """Triton restarted (here: the region unregistered behind the gateway's back): the next large
    request is answered all the same (sent again over the wire), and the region is registered again."""
    (name, _), = _wait_region(triton_stub, gateway).items()
    triton_stub.SystemSharedMemoryUnregister(service_pb2.SystemSharedMemoryUnregisterRequest(name=name), timeout=10)
    assert name not in _regions(triton_stub)
    with pytest.raises(grpc.RpcError) as unknown:  # Triton's words for a region it does not know
        triton_stub.ModelInfer(service_pb2.ModelInferRequest(model_name="grps_echo", inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(name="u8", datatype="UINT8", shape=[4], parameters={
                "shared_memory_region": service_pb2.InferParameter(string_param=name),
                "shared_memory_byte_size": service_pb2.InferParameter(int64_param=4)})]), timeout=10)
    assert shm._UNKNOWN_REGION in unknown.value.details().lower() and name in unknown.value.details()
    for seed in range(3):
        big = np.random.default_rng(seed).integers(0, 256, 2 * MiB, dtype=np.uint8).tobytes()
        assert _echo(gateway, big) == big
    assert name in _wait_region(triton_stub, gateway)
    before = _shm_bytes(gateway)
    big = os.urandom(2 * MiB)
    assert _echo(gateway, big) == big
    assert _shm_bytes(gateway) == before + len(big) + 4  # through the region again


def test_a_large_tf_serving_predict_goes_through_the_region(gateway, triton_stub):
    """TF Serving's one-input predicts are written to the wire from a plan; an input at least
    ``min_bytes`` long is left to Upstream.infer, which places it in the region, as for GRPS."""
    _wait_region(triton_stub, gateway)
    url = gateway.url("tfserving_rest") + "/v1/models/saved_model_half_plus_three:predict"
    small = requests.post(url, json={"instances": [1.0, 2.0]}, timeout=60)
    assert small.status_code == 200 and small.json() == {"predictions": [3.5, 4.0]}
    before = _shm_bytes(gateway)
    n = 300_000  # 1.2 MB of FP32: past min_bytes (1 MiB)
    values = [float(i % 7) for i in range(n)]
    r = requests.post(url, json={"instances": values}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["predictions"] == [0.5 * v + 3.0 for v in values]
    assert _shm_bytes(gateway) == before + 4 * n


def _v2_binary(gateway_or_triton_url: str, model: str, inputs: list[tuple[str, str, list, bytes]]) -> requests.Response:
    """A V2 REST infer in the binary tensor extension, every output asked for in binary."""
    import json

    header = json.dumps({"inputs": [{"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(b)}}
                                    for n, d, s, b in inputs],
                         "parameters": {"binary_data_output": True}}).encode()
    return requests.post(f"{gateway_or_triton_url}/v2/models/{model}/infer", data=header + b"".join(b for *_, b in inputs),
                         headers={"Content-Type": "application/octet-stream",
                                  "Inference-Header-Content-Length": str(len(header))}, timeout=60)


def test_large_v2_rest_binary_inputs_go_through_the_region_with_tritons_own_answer(gateway, triton, triton_stub):
    """KServe V2 REST: a binary input at least ``min_bytes`` long is placed in the region (from the
    body the socket read into it: no copy) instead of riding the wire, a small one not; the answer
    is the bytes Triton's own HTTP front end gives for the same request."""
    import struct

    _wait_region(triton_stub, gateway)
    gw, direct = gateway.url("v2_http"), triton.http_url
    before = _shm_bytes(gateway)
    small = os.urandom(1000)
    element = struct.pack("<I", len(small)) + small
    a, b = _v2_binary(gw, "grps_echo", [("text", "BYTES", [1], element)]), \
        _v2_binary(direct, "grps_echo", [("text", "BYTES", [1], element)])
    assert a.status_code == b.status_code == 200 and a.content == b.content
    assert _shm_bytes(gateway) == before  # under min_bytes: the wire
    big = np.random.default_rng(11).integers(0, 256, 3 * MiB + 3, dtype=np.uint8).tobytes()
    element = struct.pack("<I", len(big)) + big
    a, b = _v2_binary(gw, "grps_echo", [("text", "BYTES", [1], element)]), \
        _v2_binary(direct, "grps_echo", [("text", "BYTES", [1], element)])
    assert a.status_code == b.status_code == 200, a.text[:300]
    assert a.content == b.content and a.headers["Inference-Header-Content-Length"] == \
        b.headers["Inference-Header-Content-Length"]
    assert _shm_bytes(gateway) == before + len(element)
    n = 400_000  # FP32: 1.6 MB, past min_bytes (1 MiB)
    x = np.random.default_rng(12).random(n, dtype=np.float32)
    a, b = _v2_binary(gw, "saved_model_half_plus_three", [("x", "FP32", [n], x.tobytes())]), \
        _v2_binary(direct, "saved_model_half_plus_three", [("x", "FP32", [n], x.tobytes())])
    assert a.status_code == b.status_code == 200 and a.content == b.content
    assert _shm_bytes(gateway) == before + len(element) + 4 * n


def test_a_large_raw_input_goes_through_the_region_with_tritons_own_answer(gateway, triton, triton_stub):
    """Triton's raw-input mode (no JSON header): a body of ``min_bytes`` or more is the input placed
    in the region; the answer is Triton's own (every output binary)."""
    _wait_region(triton_stub, gateway)
    before = _shm_bytes(gateway)
    body = np.random.default_rng(14).random(3 * MiB // 4, dtype=np.float32).tobytes()
    a, b = (requests.post(base + "/v2/models/saved_model_half_plus_three/infer", data=body, timeout=60,
                          headers={"Inference-Header-Content-Length": "0"})
            for base in (gateway.url("v2_http"), triton.http_url))
    assert a.status_code == b.status_code == 200, a.text[:300]
    assert a.content == b.content and a.headers["Inference-Header-Content-Length"] == \
        b.headers["Inference-Header-Content-Length"]
    assert _shm_bytes(gateway) == before + len(body)


def test_a_forgotten_region_costs_no_v2_rest_request(gateway, triton, triton_stub):
    """The region unregistered behind the gateway's back (as by a Triton restart): a large V2 REST
    request is sent again over the wire and answered as Triton answers it."""
    import struct

    (name, _), = _wait_region(triton_stub, gateway).items()
    triton_stub.SystemSharedMemoryUnregister(service_pb2.SystemSharedMemoryUnregisterRequest(name=name), timeout=10)
    big = np.random.default_rng(13).integers(0, 256, 2 * MiB, dtype=np.uint8).tobytes()
    element = struct.pack("<I", len(big)) + big
    a = _v2_binary(gateway.url("v2_http"), "grps_echo", [("text", "BYTES", [1], element)])
    b = _v2_binary(triton.http_url, "grps_echo", [("text", "BYTES", [1], element)])
    assert a.status_code == b.status_code == 200 and a.content == b.content
    assert name in _wait_region(triton_stub, gateway)  # registered again in the background
