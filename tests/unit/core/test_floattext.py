"""gateway.core.floattext against the C library itself (snprintf %.*g, strtof/strtod with errno).

The reference below calls glibc exactly as the C++ code does, one value at a time:
  * protobuf 3.x ``FloatToBuffer`` / ``DoubleToBuffer`` (SimpleFtoa / SimpleDtoa);
  * TF Serving ``WriteDecimal`` (%g, else %.9g / %.17g, '.0' for whole numbers).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import floattext

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.strtof.restype, libc.strtof.argtypes = ctypes.c_float, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
libc.strtod.restype, libc.strtod.argtypes = ctypes.c_double, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]


def printf_g(digits: int, value: float) -> str:
    buf = ctypes.create_string_buffer(64)
    libc.snprintf(buf, 64, b"%.*g", ctypes.c_int(digits), ctypes.c_double(value))
    return buf.value.decode()


def simple_ftoa(v: float) -> str:
    """protobuf FloatToBuffer: %.6g; keep it only if safe_strtof (strtof, errno == 0) gives v back."""
    text = printf_g(6, v)
    ctypes.set_errno(0)
    back = libc.strtof(text.encode(), None)
    if ctypes.get_errno() != 0 or np.float32(back) != np.float32(v):
        text = printf_g(9, v)
    return text


def simple_dtoa(v: float) -> str:
    """protobuf DoubleToBuffer: %.15g; keep it only if strtod gives v back; else %.17g."""
    text = printf_g(15, v)
    return text if libc.strtod(text.encode(), None) == v else printf_g(17, v)


def protobuf_reference(v: float, f32: bool) -> str:
    if math.isnan(v):
        return '"NaN"'
    if math.isinf(v):
        return '"Infinity"' if v > 0 else '"-Infinity"'
    return simple_ftoa(v) if f32 else simple_dtoa(v)


def tfserving_reference(v: float, f32: bool) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    text = printf_g(6, v)
    same = np.float32(libc.strtof(text.encode(), None)) == np.float32(v) if f32 else float(text) == v
    if not same:
        text = printf_g(9 if f32 else 17, v)
    return text + ("" if "." in text or "e" in text else ".0")


REFERENCES = {floattext.PROTOBUF: protobuf_reference, floattext.TFSERVING: tfserving_reference}


@pytest.mark.parametrize(
    "value,f32,text",
    [
        (1.0, True, "1"),  # protobuf: no '.0'
        (1e6, True, "1e+06"),
        (123456.0, True, "123456"),
        (1234567.0, True, "1234567"),  # 9-digit fallback prints it whole
        (0.1, True, "0.1"),
        (1.2345678, True, "1.23456776"),
        (0.1, False, "0.1"),  # 15 digits round-trip
        (0.1 + 0.2, False, "0.30000000000000004"),
        (1e15, False, "1e+15"),
        (123456789012345.0, False, "123456789012345"),
        (-0.0, True, "-0"),
        (1e-45, True, "1.40129846e-45"),  # subnormal: strtof sets ERANGE, so 9 digits
        (float("nan"), True, '"NaN"'),
        (float("inf"), False, '"Infinity"'),
        (float("-inf"), True, '"-Infinity"'),
    ],
)
def test_protobuf_style_examples(value, f32, text):
    arr = np.array([value], dtype=np.float32 if f32 else np.float64)
    assert floattext.tokens(arr, floattext.PROTOBUF) == [text]
    assert protobuf_reference(float(arr[0]), f32) == text  # the reference agrees with the examples


def test_join_uses_the_separator_and_empty_is_empty():
    arr = np.array([1, 0.5, np.nan], np.float32)
    assert floattext.join(arr, floattext.PROTOBUF, ",\n  ") == '1,\n  0.5,\n  "NaN"'
    assert floattext.join(arr, floattext.TFSERVING) == "1.0,0.5,NaN"
    assert floattext.join(np.zeros(0, np.float32), floattext.PROTOBUF) == ""


@pytest.mark.parametrize("style", list(REFERENCES), ids=["protobuf", "tfserving"])
@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=40))
def test_float32_matches_libc(style, values):
    arr = np.array(values, dtype=np.float32)
    assert floattext.tokens(arr, style) == [REFERENCES[style](float(v), True) for v in arr.tolist()]


@pytest.mark.parametrize("style", list(REFERENCES), ids=["protobuf", "tfserving"])
@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40))
def test_float64_matches_libc(style, values):
    arr = np.array(values, dtype=np.float64)
    assert floattext.tokens(arr, style) == [REFERENCES[style](v, False) for v in arr.tolist()]


def test_subnormal_float32_range_matches_libc():
    arr = np.array([1e-45, 3e-42, 1.1754942e-38, np.finfo(np.float32).tiny, -5e-40], np.float32)
    for style, ref in REFERENCES.items():
        assert floattext.tokens(arr, style) == [ref(float(v), True) for v in arr.tolist()]


_SPECIAL32 = [0.0, -0.0, 1.0, 0.1, 3.0, 1e6, 123456.5, 1e-45, 1.17549435e-38, 3.4028235e38, math.nan, math.inf, -math.inf]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(width=32) | st.sampled_from(_SPECIAL32), min_size=1, max_size=floattext.SMALL),
       st.sampled_from([floattext.TFSERVING, floattext.PROTOBUF]))
def test_the_small_array_path_writes_what_the_vectorised_path_writes_f32(values, style):
    x = np.array(values, dtype=np.float32)
    assert floattext._small(x.tolist(), True, style) == floattext._vector(x, style, "\0", True).split("\0")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats() | st.sampled_from([0.1, 1e16, 123456789.0, 5e-324, 1e308]), min_size=1,
                max_size=floattext.SMALL),
       st.sampled_from([floattext.TFSERVING, floattext.PROTOBUF]))
def test_the_small_array_path_writes_what_the_vectorised_path_writes_f64(values, style):
    x = np.array(values, dtype=np.float64)
    assert floattext._small(x.tolist(), False, style) == floattext._vector(x, style, "\0", False).split("\0")


def test_both_paths_are_taken_by_size():
    small, big = np.arange(floattext.SMALL, dtype=np.float32) / 3, np.arange(100, dtype=np.float32) / 3
    assert floattext.tokens(small, floattext.TFSERVING) == [floattext.tokens(big, floattext.TFSERVING)[i]
                                                          for i in range(floattext.SMALL)]
