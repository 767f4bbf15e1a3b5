"""gateway.core.floattext against the C library itself (snprintf %.*g, strtof/strtod with errno)
and against the numpy writer it replaced (floattext_reference.py, the property-test oracle).

The reference below calls glibc exactly as the C++ code does, one value at a time:
  * protobuf 3.x ``FloatToBuffer`` / ``DoubleToBuffer`` (SimpleFtoa / SimpleDtoa);
  * TF Serving ``WriteDecimal`` (%g, else %.9g / %.17g, '.0' for whole numbers).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import floattext
from tests.unit.core import floattext_reference as reference

ROOT = Path(__file__).resolve().parents[3]

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


# -- the compiled writer against the numpy writer it replaced (tests/unit/core/floattext_reference.py) --

STYLES = [floattext.TFSERVING, floattext.PROTOBUF]
# every separator the dialects join with: compact and single-line JSON, protobuf's and TF's pretty
# forms (one element per line at some indent), one longer than the extension's short-copy size
SEPARATORS = [",", ", ", ",\n", ",\n ", ",\n  ", ",\n    ", ",\n" + " " * 40, ""]
_SPECIAL32 = [0.0, -0.0, 1.0, 0.1, 3.0, 1e6, 123456.5, 1234565.0, 1e-45, 1.17549435e-38, 3.4028235e38,
              math.nan, math.inf, -math.inf]
_SPECIAL64 = [0.0, -0.0, 0.1, 1e15, 1e16, 123456789.0, 2.0**53, 5e-324, 2.2250738585072014e-308, 1e308,
              1.7976931348623157e308, 1e-15, 1e-16, 9.999999999999999e22, math.nan, math.inf, -math.inf]
# whole numbers (the '.0' rule), around powers of ten and two, ties at the 6th and 9th digit
_WHOLE = st.integers(-(10**10), 10**10).map(float)
_NEAR = st.tuples(st.integers(-320, 308), st.sampled_from([1.0, 0.5, 0.9999999, 1.0000001, 5.0, 2.5])).map(
    lambda t: t[1] * 10.0 ** t[0] if t[0] < 308 else 1e308)
_POW2 = st.integers(-1074, 1023).map(lambda e: math.ldexp(1.0, e))
_BITS32 = st.integers(0, 2**32 - 1).map(lambda b: float(np.array([b], np.uint32).view(np.float32)[0]))
_BITS64 = st.integers(0, 2**64 - 1).map(lambda b: float(np.array([b], np.uint64).view(np.float64)[0]))
FLOATS32 = (st.floats(width=32) | st.sampled_from(_SPECIAL32) | _WHOLE | _NEAR | _POW2 | _BITS32
            | st.floats(width=32, min_value=-2.0**-120, max_value=2.0**-120))  # subnormals
FLOATS64 = st.floats() | st.sampled_from(_SPECIAL64) | _WHOLE | _NEAR | _POW2 | _BITS64


def _arr(values, dtype):
    with np.errstate(over="ignore"):
        return np.array(values, dtype=np.float64).astype(dtype)


def _writers_agree(values, dtype, style, sep) -> None:
    x = _arr(values, dtype)
    assert floattext.join(x, style, sep) == reference.join(x, style, sep)
    assert floattext.tokens(x, style) == reference.tokens(x, style)


@settings(max_examples=250, deadline=None)
@given(st.lists(FLOATS32, max_size=80), st.sampled_from(STYLES), st.sampled_from(SEPARATORS))
def test_compiled_writer_matches_the_numpy_writer_float32(values, style, sep):
    _writers_agree(values, np.float32, style, sep)


@settings(max_examples=250, deadline=None)
@given(st.lists(FLOATS64, max_size=80), st.sampled_from(STYLES), st.sampled_from(SEPARATORS))
def test_compiled_writer_matches_the_numpy_writer_float64(values, style, sep):
    _writers_agree(values, np.float64, style, sep)


@pytest.mark.parametrize("style", STYLES, ids=["tfserving", "protobuf"])
def test_compiled_writer_matches_the_numpy_writer_on_every_kind_of_float32(style):
    """Random bit patterns (every exponent, subnormals, NaN payloads), a value and both its
    neighbours at every power of two, and large arrays of the usual kinds of data."""
    rng = np.random.default_rng(20)
    p2 = np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32)
    with np.errstate(over="ignore"):
        arrays = [
            rng.integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
            np.concatenate([p2, np.nextafter(p2, np.float32(0)), np.nextafter(p2, np.float32(np.inf))]),
            rng.random(5_000, dtype=np.float32),
            rng.standard_normal(5_000).astype(np.float32) * 10.0 ** rng.integers(-40, 39, 5_000),
            rng.integers(0, 10**9, 5_000).astype(np.float32),  # whole, incl. 6th/7th-digit ties
        ]
    for x in arrays:
        x = x.astype(np.float32)
        assert floattext.tokens(x, style) == reference.tokens(x, style)


@pytest.mark.parametrize("style", STYLES, ids=["tfserving", "protobuf"])
def test_compiled_writer_matches_the_numpy_writer_on_every_kind_of_float64(style):
    rng = np.random.default_rng(20)
    p2 = np.ldexp(1.0, np.arange(-1074, 1024))
    p10 = np.array([float(f"1e{e}") for e in range(-323, 309)])
    arrays = [
        rng.integers(0, 2**64, 5_000, dtype=np.uint64).view(np.float64),
        np.concatenate([p2, np.nextafter(p2, 0), np.nextafter(p2, np.inf)]),
        np.concatenate([p10, np.nextafter(p10, 0), np.nextafter(p10, np.inf)]),
        rng.random(5_000) * 10.0 ** rng.integers(-20, 20, 5_000),
        np.round(rng.random(5_000) * 10.0 ** rng.integers(0, 22, 5_000)),
    ]
    for x in arrays:
        assert floattext.tokens(x, style) == reference.tokens(x, style)


def test_any_layout_and_byte_order_is_written_as_its_values():
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    expected = reference.join(x.T.reshape(-1), floattext.TFSERVING)
    assert floattext.join(x.T.reshape(-1), floattext.TFSERVING) == expected  # a copy
    assert floattext.join(x.T.ravel(order="K")[::1], floattext.TFSERVING) == reference.join(
        x.T.ravel(order="K"), floattext.TFSERVING)
    assert floattext.join(x[:, ::2].reshape(-1), floattext.TFSERVING) == reference.join(
        x[:, ::2].reshape(-1), floattext.TFSERVING)
    big = x.reshape(-1).astype(">f4")  # big-endian float32 is float32 text
    assert floattext.join(big, floattext.TFSERVING) == reference.join(x.reshape(-1), floattext.TFSERVING)
    half = np.array([0.1, 1, 65504], np.float16)  # other float widths: their float64 value's text
    assert floattext.tokens(half, floattext.TFSERVING) == reference.tokens(half.astype(np.float64), floattext.TFSERVING)


# -- nested arrays ------------------------------------------------------------------------------------

def _nest_reference(arr, style, opens, seps, closes) -> str:
    toks = reference.tokens(arr.reshape(-1), style)

    def level(toks, shape, lv):
        if shape[0] == 0:
            return "[]"
        if len(shape) == 1:
            return opens[lv] + seps[lv].join(toks) + closes[lv]
        step = len(toks) // shape[0]
        return opens[lv] + seps[lv].join(level(toks[i * step:(i + 1) * step], shape[1:], lv + 1)
                                         for i in range(shape[0])) + closes[lv]

    return toks[0] if arr.ndim == 0 else level(toks, arr.shape, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=5), st.sampled_from(STYLES),
       st.sampled_from([np.float32, np.float64]), st.booleans(), st.integers(0, 2**32 - 1))
def test_nested_lays_the_values_out_level_by_level(shape, style, dtype, pretty, seed):
    arr = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    rank = len(shape)
    if pretty:  # protobuf-style: every item on its own line, one more space per level
        opens = ["[\n" + " " * (lv + 1) for lv in range(rank)]
        seps = [",\n" + " " * (lv + 1) for lv in range(rank)]
        closes = ["\n" + " " * lv + "]" for lv in range(rank)]
    else:
        opens, seps, closes = ["["] * rank, [","] * rank, ["]"] * rank
    got = floattext.nested(arr, style, opens, seps, closes)
    assert got == _nest_reference(arr, style, opens, seps, closes)
    if not pretty:
        assert floattext.nested(arr, style) == got


def test_nested_compact_is_json_of_the_values():
    arr = np.array([[1, 0.5, np.nan], [np.inf, -0.0, 1e-7]], np.float32)
    assert floattext.nested(arr, floattext.TFSERVING) == "[[1.0,0.5,NaN],[Infinity,-0.0,1e-07]]"
    assert floattext.nested(arr, floattext.PROTOBUF, "[", ", ", "]") == '[[1, 0.5, "NaN"], ["Infinity", -0, 1e-07]]'
    assert floattext.nested(np.float64(0.1), floattext.TFSERVING) == "0.1"
    assert floattext.nested(np.zeros((2, 0)), floattext.TFSERVING) == "[[],[]]"


# -- the extension itself ----------------------------------------------------------------------------

def test_the_extension_refuses_buffers_that_are_not_its_floats():
    from gateway.core import _floattext

    args = (True, 6, 9, "", "NaN", "Infinity", "-Infinity", False)
    with pytest.raises(TypeError, match="float32"):
        _floattext.join(np.zeros(3, np.float64), *args, ",")
    with pytest.raises(TypeError, match="float32"):
        _floattext.tokens(np.zeros(3, ">f4"), *args)
    with pytest.raises(TypeError, match="ASCII"):
        _floattext.join(np.zeros(3, np.float32), *args, "\u00a0")
    with pytest.raises(ValueError, match="prod"):
        _floattext.nested(np.zeros(3, np.float32), *args, (2,), ("[",), (",",), ("]",))


def test_a_checkout_without_the_build_says_how_to_build_it():
    code = ("import sys; sys.modules['gateway.core._floattext'] = None\n"
            "try:\n    import gateway.core.floattext\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "is not built" in out and "make install" in out and "build_ext --inplace" in out


# -- the true/false scan ------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"t", b"f", b"true", b"false", b"tru", b"fals", b"e", b"0.5,", b"\"x\":", b"ttt" * 200]),
                max_size=400))
def test_the_bool_scan_is_a_substring_test(parts):
    body = b"".join(parts)
    assert floattext.has_bool_token(body) == (b"true" in body or b"false" in body)
    assert floattext.has_bool_token(bytearray(body)) == floattext.has_bool_token(memoryview(body))


def test_the_bool_scan_over_a_large_body():
    body = b'{"instances": [' + b",".join([b"0.123456"] * 200_000) + b"]}"
    assert not floattext.has_bool_token(body)
    assert floattext.has_bool_token(body[:-2] + b",true]}")
    text = b"t" * 100_000  # the first letter everywhere: the memmem path
    assert not floattext.has_bool_token(text) and floattext.has_bool_token(text + b"rue")
