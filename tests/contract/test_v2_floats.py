"""Float digits of V2 REST JSON answers against Triton's own HTTP, in the same run: random FP64 and
FP32 bit patterns (NaN, infinities, subnormals, every exponent) go through dtype_echo as binary
tensors to both servers and come back as JSON ``data``; the bytes must be the same, and the same as
rapidjson's algorithm in Python (tests/unit/core/rapidjson_reference.py), which the fast unit
tests hold the compiled writer to. The known texts of the unit tests are Triton's answers too."""

from __future__ import annotations

import json
import struct
import urllib.request

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.core import rapidjson_reference as ref
from tests.unit.core.test_rapidjson import KNOWN

DT = "/v2/models/dtype_echo/infer"
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _echo(base: str, datatype: str, raw: bytes) -> bytes:
    """dtype_echo's answer to ``raw`` sent as a binary input, the output asked as JSON data."""
    name = datatype.lower()
    count = len(raw) // (4 if datatype == "FP32" else 8)
    head = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": [1, count],
                                   "parameters": {"binary_data_size": len(raw)}}],
                       "outputs": [{"name": f"{name}_out"}]}).encode()
    req = urllib.request.Request(base + DT, data=head + raw, method="POST",
                                 headers={"Inference-Header-Content-Length": str(len(head))})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        return r.read()


def _expected(datatype: str, raw: bytes) -> bytes:
    n = len(raw) // (4 if datatype == "FP32" else 8)
    values = struct.unpack(f"<{n}{'f' if datatype == 'FP32' else 'd'}", raw)  # float32 widened to double
    name = datatype.lower()
    return (f'{{"model_name":"dtype_echo","model_version":"1","outputs":[{{"name":"{name}_out","datatype":'
            f'"{datatype}","shape":[1,{n}],"data":[{",".join(map(ref.dtoa, values))}]}}]}}').encode()


def _same_as_triton(triton, gateway, datatype: str, raw: bytes) -> None:
    want = _echo(triton.http_url, datatype, raw)
    assert want == _expected(datatype, raw)
    assert _echo(gateway.url("v2_http"), datatype, raw) == want


@_SETTINGS
@given(st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=64))
def test_fp64_digits_are_tritons(triton, gateway, bits):
    _same_as_triton(triton, gateway, "FP64", struct.pack(f"<{len(bits)}Q", *bits))


@_SETTINGS
@given(st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=64))
def test_fp32_digits_are_tritons(triton, gateway, bits):
    _same_as_triton(triton, gateway, "FP32", struct.pack(f"<{len(bits)}I", *bits))


@_SETTINGS
@given(st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=64))
def test_fp32_of_decimal_values_are_tritons(triton, gateway, values):
    """Floats as clients write them (0.3, 1e-7: short decimals, where Grisu2's digits run longest)."""
    _same_as_triton(triton, gateway, "FP32", np.array(values, dtype=np.float32).tobytes())


def test_the_known_texts_are_tritons(triton, gateway):
    raw = np.array([value for value, _ in KNOWN], dtype=np.float64).tobytes()
    _same_as_triton(triton, gateway, "FP64", raw)
    body = _echo(triton.http_url, "FP64", raw).decode()
    texts = body[body.index('"data":[') + len('"data":['):body.rindex("]}]}")].split(",")
    assert texts == [text for _, text in KNOWN]
