"""The one dtype table, both ways, and the BYTES wire encoding."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core import datatypes as dt

# Expected values straight from the three specs (KServe V2, TF types.proto, grps.proto).
TF_ENUM = {"DT_FLOAT": 1, "DT_DOUBLE": 2, "DT_INT32": 3, "DT_UINT8": 4, "DT_INT16": 5, "DT_INT8": 6,
           "DT_STRING": 7, "DT_INT64": 9, "DT_BOOL": 10, "DT_BFLOAT16": 14, "DT_UINT16": 17,
           "DT_HALF": 19, "DT_UINT32": 22, "DT_UINT64": 23}
GRPS_ENUM = {"DT_UINT8": 1, "DT_INT8": 2, "DT_INT16": 3, "DT_INT32": 4, "DT_INT64": 5,
             "DT_FLOAT16": 6, "DT_FLOAT32": 7, "DT_FLOAT64": 8, "DT_STRING": 9}
V2_TO_TF = {"BOOL": "DT_BOOL", "UINT8": "DT_UINT8", "UINT16": "DT_UINT16", "UINT32": "DT_UINT32",
            "UINT64": "DT_UINT64", "INT8": "DT_INT8", "INT16": "DT_INT16", "INT32": "DT_INT32",
            "INT64": "DT_INT64", "FP16": "DT_HALF", "FP32": "DT_FLOAT", "FP64": "DT_DOUBLE",
            "BF16": "DT_BFLOAT16", "BYTES": "DT_STRING"}
V2_TO_GRPS = {"UINT8": "DT_UINT8", "INT8": "DT_INT8", "INT16": "DT_INT16", "INT32": "DT_INT32",
              "INT64": "DT_INT64", "FP16": "DT_FLOAT16", "FP32": "DT_FLOAT32", "FP64": "DT_FLOAT64",
              "BYTES": "DT_STRING"}


def test_table_covers_every_kserve_v2_datatype():
    assert {d.v2 for d in dt.TABLE} == set(V2_TO_TF)


@pytest.mark.parametrize("v2,tf_name", sorted(V2_TO_TF.items()))
def test_v2_to_tf_and_back(v2, tf_name):
    row = dt.by_v2(v2)
    assert row.tf_name == tf_name and row.tf == TF_ENUM[tf_name]
    assert dt.by_tf(row.tf) is row and dt.by_tf(tf_name) is row


@pytest.mark.parametrize("v2", sorted(V2_TO_TF))
def test_v2_to_grps_and_back(v2):
    row = dt.by_v2(v2)
    if v2 in V2_TO_GRPS:
        name = V2_TO_GRPS[v2]
        assert row.grps_name == name and row.grps == GRPS_ENUM[name]
        assert dt.by_grps(row.grps) is row and dt.by_grps(name) is row
    else:  # BOOL, UINT16/32/64, BF16 cannot be expressed in GRPS
        assert row.grps is None and row.grps_name is None


@pytest.mark.parametrize("row", dt.TABLE, ids=lambda r: r.v2)
def test_numpy_and_config_names_round_trip(row):
    assert dt.by_numpy(row.numpy) is row
    assert dt.by_config(row.config) is row
    assert row.config == "TYPE_STRING" if row.is_bytes else row.config == f"TYPE_{row.v2}"
    if not row.is_bytes:
        assert row.size == row.numpy.itemsize


def test_numpy_string_kinds_are_bytes():
    assert dt.by_numpy(np.dtype("S4")).v2 == "BYTES"
    assert dt.by_numpy(np.dtype("U4")).v2 == "BYTES"
    with pytest.raises(KeyError):
        dt.by_numpy(np.complex64)


def test_bytes_wire_form_is_length_prefixed_little_endian():
    arr = np.array([b"ab", b"", "é"], dtype=object)
    wire = dt.encode_bytes(arr)
    assert wire == b"\x02\x00\x00\x00ab" + b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\xc3\xa9"
    back = dt.decode_bytes(wire, (3,))
    assert back.tolist() == [b"ab", b"", "é".encode()]


@pytest.mark.parametrize("wire,why", [(b"\x05\x00\x00\x00ab", "past the end"), (b"\x01\x00", "truncated")])
def test_malformed_bytes_are_rejected(wire, why):
    with pytest.raises(ValueError, match=why):
        dt.decode_bytes(wire)


def test_bytes_that_do_not_fill_the_shape_are_rejected():
    with pytest.raises(ValueError, match="do not fill"):
        dt.decode_bytes(dt.encode_bytes(np.array([b"a", b"b"], dtype=object)), (3,))
    with pytest.raises(ValueError, match="do not fill"):  # one element (a streamed token's)
        dt.decode_bytes(dt.encode_bytes(np.array([b"a"], dtype=object)), (1, 2))


@pytest.mark.parametrize("shape", [None, (1,), (1, 1), (1, 1, 1)])
def test_one_element_takes_its_shape(shape):
    for buf in (b"\x03\x00\x00\x00abc", memoryview(b"\x00\x00\x00\x00")):
        out = dt.decode_bytes(buf, shape)
        assert out.dtype == object and out.shape == (shape or (1,)) and type(out.flat[0]) is bytes
        assert out.flat[0] == bytes(buf)[4:]


@given(st.lists(st.binary(max_size=40), max_size=30))
def test_bytes_round_trip(items):
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    assert dt.decode_bytes(dt.encode_bytes(arr), (len(items),)).tolist() == items


def _wire(items: list[bytes]) -> bytes:
    """The KServe wire form, from its definition: <uint32 LE length><bytes> per element."""
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


_FORMS = {
    "bytes": bytes,
    "bytearray": bytearray,
    "memoryview": memoryview,
    "memoryview of a numpy buffer": lambda b: memoryview(np.frombuffer(b, dtype=np.uint8).copy()),
}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30), st.lists(st.sampled_from(sorted(_FORMS)), min_size=30,
                                                                  max_size=30), st.sampled_from([None, (-1,), (1, -1)]))
def test_bytes_parts_takes_buffers_as_they_are_and_writes_the_same_bytes(items, forms, shape):
    arr = np.empty(len(items), dtype=object)
    arr[:] = [_FORMS[f](b) for b, f in zip(items, forms, strict=False)]
    if shape is not None and items:
        arr = arr.reshape(shape)
    parts = dt.bytes_parts(arr)
    assert b"".join(parts) == _wire(items) == dt.encode_bytes(dt.to_bytes_array([bytes(b) for b in items]))
    assert all(p is v for p, v in zip(parts[1::2], arr.reshape(-1), strict=True))  # not copied
    assert dt.decode_bytes(b"".join(parts)).tolist() == items


def test_bytes_parts_of_many_and_empty_elements_and_of_str_and_numpy_string_arrays():
    rng = np.random.default_rng(0)
    items = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 5, 20_000)]
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    assert b"".join(dt.bytes_parts(arr)) == _wire(items)
    assert b"".join(dt.bytes_parts(np.empty(0, dtype=object))) == b""
    assert b"".join(dt.bytes_parts(np.array(["a\u00e9", ""]))) == _wire(["a\u00e9".encode(), b""])
    assert b"".join(dt.bytes_parts(np.array([b"xy", b""]))) == _wire([b"xy", b""])
    mixed = np.array(["s", b"b", bytearray(b"ba")], dtype=object)
    assert b"".join(dt.bytes_parts(mixed)) == _wire([b"s", b"b", b"ba"])
    strided = np.empty(1, dtype=object)
    strided[0] = memoryview(b"abcdef")[::2]  # not contiguous: copied into bytes
    assert b"".join(dt.bytes_parts(strided)) == _wire([b"ace"])
