"""TF Serving's float text (WriteDecimal), byte for byte."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects.tfserving import decimal


def reference(v: float, f32: bool) -> str:
    """WriteDecimal spelled out one value at a time (tensorflow_serving/util/json_tensor.cc)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    text = "%g" % v  # noqa: UP031 - printf semantics are the point
    same = np.float32(float(text)) == np.float32(v) if f32 else float(text) == v
    if not same:
        text = ("%.9g" if f32 else "%.17g") % v  # noqa: UP031
    if "." not in text and "e" not in text:
        text += ".0"
    return text


@pytest.mark.parametrize(
    "value,f32,text",
    [
        (9000000.0, True, "9e+06"),  # the source's own examples
        (0.00003, True, "3e-05"),
        (3.0, True, "3.0"),
        (42.0, False, "42.0"),
        (0.1, True, "0.1"),  # six digits round-trip: not 0.100000001
        (1.2345678, True, "1.23456776"),  # nine digits for float32 ...
        (1.2345678, False, "1.2345678"),
        (0.1 + 0.2, False, "0.30000000000000004"),  # ... seventeen for float64
        (1234567.0, True, "1234567.0"),
        (-0.0, True, "-0.0"),
        (float("nan"), True, "NaN"),
        (float("inf"), False, "Infinity"),
        (float("-inf"), True, "-Infinity"),
    ],
)
def test_documented_and_edge_values(value, f32, text):
    arr = np.array([value], dtype=np.float32 if f32 else np.float64)
    assert decimal.tokens(arr) == [text]


def test_join_is_the_tokens_joined():
    arr = np.arange(6, dtype=np.float32) / 3
    assert decimal.join(arr, ", ") == "0.0, 0.333333343, 0.666666687, 1.0, 1.33333337, 1.66666663"
    assert decimal.join(np.zeros(0, np.float32), ", ") == ""


@settings(max_examples=400, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=40))
def test_float32_matches_writedecimal(values):
    arr = np.array(values, dtype=np.float32)
    assert decimal.tokens(arr) == [reference(float(v), True) for v in arr.tolist()]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40))
def test_float64_matches_writedecimal(values):
    arr = np.array(values, dtype=np.float64)
    assert decimal.tokens(arr) == [reference(v, False) for v in arr.tolist()]
