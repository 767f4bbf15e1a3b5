"""TF Serving REST JSON (jsonio.loads, codec.parse_predict / parse_examples): arbitrary bytes and
JSON raise nothing but GatewayError with a bounded text; valid tensors round-trip."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gateway.core.errors import GatewayError
from gateway.core.tensors import TensorSpec
from gateway.dialects.tfserving import codec, jsonio
from gateway.dialects.tfserving.mapping import Signature

from .profile import FUZZ, clean
from .strategies import BIG_VALUES, json_values


def _sig(*inputs: tuple[str, str]) -> Signature:
    ins = tuple((alias, TensorSpec(alias, v2, (-1,))) for alias, v2 in inputs)
    return Signature("serving_default", "predict", "m", 8, ins, (("y", TensorSpec("y", "FP32", (-1,))),))


SIGS = [_sig(("x", "FP32")), _sig(("x", "INT32")), _sig(("x", "BYTES")), _sig(("x", "BOOL")),
        _sig(("x", "UINT64")), _sig(("a", "FP64"), ("b", "INT8"), ("c_bytes", "BYTES"))]


def _predict(doc, sig: Signature) -> None:
    try:
        if not isinstance(doc, dict):
            return
        codec.signature_name(doc)
        body = json.dumps(doc).encode()  # the stdlib: values past 64 bits come from jsonio's fallback parser
        codec.parse_predict(doc, sig, codec.may_hold_bools(body))
    except GatewayError as e:
        clean(e)


@FUZZ
@given(st.binary(max_size=400))
def test_any_bytes_parse_or_fail_cleanly(body):
    try:
        jsonio.loads(body)
    except GatewayError as e:
        clean(e)


@FUZZ
@given(st.text(alphabet='[]{}",:0123456789.eE+-truefalsnNIiy\\u \t\nabd8', max_size=200))
def test_json_like_text_parses_or_fails_cleanly(text):
    try:
        doc = jsonio.loads(text.encode("utf-8", "surrogatepass"))
    except GatewayError as e:
        clean(e)
        return
    for sig in SIGS:
        _predict(doc, sig)


@FUZZ
@given(json_values, st.sampled_from(SIGS))
def test_any_json_predict_body_fails_cleanly(value, sig):
    for doc in ({"instances": value}, {"inputs": value}, {"inputs": {"x": value, "a": value}},
                {"instances": [value, value]}, {"instances": [{"x": value}]}, {"signature_name": value}):
        _predict(doc, sig)


@FUZZ
@given(json_values)
def test_any_json_examples_body_fails_cleanly(value):
    for doc in ({"examples": value}, {"examples": [value]}, {"examples": [{"f": value}], "context": value},
                {"examples": [{"f": [value, value]}]}):
        try:
            codec.parse_examples(doc, "classify")
        except GatewayError as e:
            clean(e)


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: ",".join(t.datatype for _, t in s.inputs))
@pytest.mark.parametrize("value", BIG_VALUES.values(), ids=BIG_VALUES.keys())
def test_error_texts_never_echo_a_large_value(value, sig):
    for doc in ({"instances": value}, {"inputs": value}, {"instances": [value, {"x": 1}]},
                {"instances": [{"x": 1}, value]}, {"inputs": {"x": value}}, {"instances": [1], "inputs": value},
                {"signature_name": value}):
        _predict(doc, sig)
    for doc in ({"examples": value}, {"examples": [value]}, {"context": value, "examples": []}):
        try:
            codec.parse_examples(doc, "regress")
        except GatewayError as e:
            clean(e)


_NUMERIC = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}


@FUZZ
@given(st.sampled_from(sorted(_NUMERIC)), st.data())
def test_valid_tensors_round_trip(v2, data):
    dtype = np.dtype(_NUMERIC[v2])
    arr = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
                               elements=hnp.from_dtype(dtype, allow_nan=False, allow_infinity=False)))
    sig = _sig(("x", v2))
    body = orjson.dumps({"instances": arr.tolist()})
    got, row = codec.parse_predict(jsonio.loads(body), sig, codec.may_hold_bools(body))
    assert row and got["x"].shape == arr.shape
    np.testing.assert_array_equal(got["x"].astype(dtype), arr)
    # and back out: the written predictions parse to the same values
    out = orjson.loads(codec.write_predict({"y": (arr, v2)}, row=True))["predictions"]
    np.testing.assert_array_equal(np.asarray(out, dtype=dtype), arr)


@FUZZ
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=5))
def test_b64_strings_round_trip(values):
    import base64

    sig = _sig(("x_bytes", "BYTES"))
    body = orjson.dumps({"inputs": [{"b64": base64.b64encode(v).decode()} for v in values]})
    got, _ = codec.parse_predict(jsonio.loads(body), sig)
    assert list(got["x_bytes"]) == values
    out = orjson.loads(codec.write_predict({"x_bytes": (got["x_bytes"], "BYTES")}, row=False))["outputs"]
    assert [base64.b64decode(o["b64"]) for o in out] == values
