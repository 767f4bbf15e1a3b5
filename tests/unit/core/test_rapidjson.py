"""The compiled rapidjson writer (gateway/core/_floattext.c) against rapidjson's algorithm in Python
(rapidjson_reference.py), over every kind of double and float32, and the texts Triton 2.51 itself
answers (tests/contract/test_v2_floats.py sends these values through Triton)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import floattext

from . import rapidjson_reference as ref

C_SOURCE = Path(floattext.__file__).with_name("_floattext.c")


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _single(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]  # widened to double, as C widens it


def test_cached_powers_are_10_to_the_k_rounded_to_nearest():
    text = C_SOURCE.read_text()
    fs = [int(h, 16) for h in re.findall(r"0x([0-9a-f]{16})ull", text.split("RJ_POW_F[87] = {")[1].split("};")[0])]
    es = [int(e) for e in text.split("RJ_POW_E[87] = {")[1].split("};")[0].replace(",", " ").split()]
    assert list(zip(fs, es, strict=True)) == ref.CACHED


# Triton 2.51's own answers (a JSON FP64 / FP32 output of these values, tests/contract/test_v2_floats.py)
KNOWN = [
    (0.0, "0.0"), (-0.0, "-0.0"), (1.0, "1.0"), (-2.5, "-2.5"), (1e20, "100000000000000000000.0"), (1e21, "1e21"),
    (1e22, "1e22"), (1.5e300, "1.5e300"), (1e-6, "0.000001"), (1.5e-6, "0.0000015"), (1e-7, "1e-7"),
    (1.2345e-7, "1.2345e-7"), (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e308"),
    (_single(0x3E99999A), "0.30000001192092898"), (float(np.float32(0.1)), "0.10000000149011612"),
    (float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity"),
]


def test_known_texts():
    for value, text in KNOWN:
        assert floattext.rapidjson_double(value) == text, value
        assert ref.dtoa(value) == text, value


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, (1 << 64) - 1))
def test_every_double_as_the_reference_writes_it(bits):
    value = _double(bits)
    assert floattext.rapidjson_double(value) == ref.dtoa(value)


@settings(max_examples=1000, deadline=None)
@given(st.integers(0, (1 << 32) - 1))
def test_every_float32_widened_as_the_reference_writes_it(bits):
    raw = struct.pack("<I", bits)
    assert floattext.rapidjson_array(raw, True) == f"[{ref.dtoa(_single(bits))}]".encode()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, (1 << 64) - 1).map(_double),
                max_size=400))
def test_arrays_are_the_values_joined(values):
    raw = np.array(values, dtype=np.float64).tobytes()
    want = ("[" + ",".join(map(ref.dtoa, values)) + "]").encode()
    assert floattext.rapidjson_array(raw, False) == want
    assert floattext.rapidjson_array(memoryview(raw), False) == want


def test_grisu2_is_not_always_shortest_and_round_trips():
    """Where rapidjson 1.1.0 writes more than the shortest digits, the text still reads back."""
    value = _single(0x3E99999A)
    assert repr(value) == "0.30000001192092896"
    assert float(floattext.rapidjson_double(value)) == value


def test_a_buffer_of_a_wrong_length_is_refused():
    try:
        floattext.rapidjson_array(b"\0\0\0", True)
    except ValueError:
        return
    raise AssertionError("a 3-byte float32 buffer was accepted")
