"""GrpsMessage JSON text, byte for byte as the C++ GRPS server prints it.

Expected texts are written out by hand from protobuf 3.9.2's JsonObjectWriter (one-space indent,
``": "``, one element per line, final newline), SimpleFtoa/SimpleDtoa and JsonEscaping.
"""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.dialects.grps import codec, jsonwrite
from gateway.dialects.grps.codec import GrpsMessage, grps_pb2

OK_TEXT = '{\n "status": {\n  "code": 200,\n  "msg": "OK",\n  "status": "SUCCESS"\n }\n}\n'


def text(msg: GrpsMessage, pretty: bool = True) -> str:
    return codec.message_to_json(msg, pretty).decode("utf-8")


def test_status_only_and_empty():
    assert text(codec.ok()) == OK_TEXT
    assert text(GrpsMessage()) == "{}\n"
    assert text(codec.failure(400, "Bad Request, err: Parse json failed.")) == (
        '{\n "status": {\n  "code": 400,\n  "msg": "Bad Request, err: Parse json failed.",\n'
        '  "status": "FAILURE"\n }\n}\n')


def test_compact_form_is_the_same_json_on_one_line():
    assert text(codec.ok(), pretty=False) == '{"status":{"code":200,"msg":"OK","status":"SUCCESS"}}'


def test_str_data_model_and_escaping():
    msg = codec.ok(GrpsMessage(model="m-1", str_data='héllo "<b>" & \'x\'\n\t\x01\x7f\x85\u2028\u00ad\U000e0041 😀'))
    assert text(msg) == OK_TEXT[:-3] + (
        ',\n "model": "m-1",\n'
        ' "str_data": "héllo \\"\\u003cb\\u003e\\" & \'x\'\\n\\t\\u0001\\u007f\\u0085\\u2028\\u00ad\\udb40\\udc41 😀"\n'
        '}\n')


def test_empty_oneof_member_is_printed_but_empty_model_is_not():
    assert text(GrpsMessage(str_data="")) == '{\n "str_data": ""\n}\n'
    assert text(GrpsMessage(model="")) == "{}\n"
    empty = GrpsMessage()
    empty.gtensors.SetInParent()
    assert text(empty) == '{\n "gtensors": {}\n}\n'


def test_gtensors_of_every_dtype():
    msg = GrpsMessage()
    add = msg.gtensors.tensors.add
    add(name="f32", dtype=grps_pb2.DT_FLOAT32, shape=[2, 2], flat_float32=[1.0, 0.1, 1e6, float("nan")])
    add(name="f64", dtype=grps_pb2.DT_FLOAT64, shape=[3], flat_float64=[2.0, 0.1 + 0.2, float("-inf")])
    add(name="f16", dtype=grps_pb2.DT_FLOAT16, shape=[1], flat_float16=[0.5])
    add(name="i64", dtype=grps_pb2.DT_INT64, shape=[2], flat_int64=[-(2**63), 7])
    add(dtype=grps_pb2.DT_UINT8, shape=[2], flat_uint8=[0, 255])
    add(name="small", dtype=grps_pb2.DT_INT8, flat_int8=[-1], flat_int16=[2], flat_int32=[3])
    add(name="s", dtype=grps_pb2.DT_STRING, shape=[2], flat_string=["a", ""])
    add(name="empty", dtype=grps_pb2.DT_FLOAT32, shape=[0])
    expected = """{
 "gtensors": {
  "tensors": [
   {
    "name": "f32",
    "dtype": "DT_FLOAT32",
    "shape": [
     2,
     2
    ],
    "flat_float32": [
     1,
     0.1,
     1e+06,
     "NaN"
    ]
   },
   {
    "name": "f64",
    "dtype": "DT_FLOAT64",
    "shape": [
     3
    ],
    "flat_float64": [
     2,
     0.30000000000000004,
     "-Infinity"
    ]
   },
   {
    "name": "f16",
    "dtype": "DT_FLOAT16",
    "shape": [
     1
    ],
    "flat_float16": [
     0.5
    ]
   },
   {
    "name": "i64",
    "dtype": "DT_INT64",
    "shape": [
     2
    ],
    "flat_int64": [
     "-9223372036854775808",
     "7"
    ]
   },
   {
    "dtype": "DT_UINT8",
    "shape": [
     2
    ],
    "flat_uint8": [
     0,
     255
    ]
   },
   {
    "name": "small",
    "dtype": "DT_INT8",
    "flat_int8": [
     -1
    ],
    "flat_int16": [
     2
    ],
    "flat_int32": [
     3
    ]
   },
   {
    "name": "s",
    "dtype": "DT_STRING",
    "shape": [
     2
    ],
    "flat_string": [
     "a",
     ""
    ]
   },
   {
    "name": "empty",
    "dtype": "DT_FLOAT32",
    "shape": [
     0
    ]
   }
  ]
 }
}
"""
    assert text(msg) == expected


def test_gmap_of_every_kind_sorted_keys():
    msg = GrpsMessage()
    g = msg.gmap
    g.s_s["b"], g.s_s["a"] = "x", "<y>"
    g.s_b["bin"] = b"\x00\xff\x10"
    g.s_i32["i"] = -3
    g.s_i64["l"] = 2**40
    g.s_f["f"] = 3.0
    g.s_d["d"] = 0.1
    assert text(msg) == """{
 "gmap": {
  "s_s": {
   "a": "\\u003cy\\u003e",
   "b": "x"
  },
  "s_b": {
   "bin": "AP8Q"
  },
  "s_i32": {
   "i": -3
  },
  "s_i64": {
   "l": "1099511627776"
  },
  "s_f": {
   "f": 3
  },
  "s_d": {
   "d": 0.1
  }
 }
}
"""


def test_unknown_enum_value_is_a_number():
    msg = GrpsMessage()
    msg.gtensors.tensors.add(dtype=42)
    assert '"dtype": 42' in text(msg)


def test_return_ndarray_answer_is_rapidjson_pretty_text():
    arr = np.array([[1.0, 0.1], [1e-5, 2.5e20]], np.float32)
    assert codec.ndarray_to_json(codec.ok(), arr).decode() == """{
 "status": {
  "code": 200,
  "msg": "OK",
  "status": "SUCCESS"
 },
 "ndarray": [
  [
   1.0,
   0.10000000149011612
  ],
  [
   0.000009999999747378752,
   250000005010219340000.0
  ]
 ]
}"""
    assert codec.ndarray_to_json(codec.ok(), np.float32(2.5).reshape(())).decode().endswith('"ndarray": 2.5\n}')
    compact = codec.ndarray_to_json(codec.ok(), np.array([1e-7, 1e21, -0.0], np.float32), pretty=False)
    assert compact == (b'{"status":{"code":200,"msg":"OK","status":"SUCCESS"},'
                       b'"ndarray":[1.0000000116860974e-7,1.0000000200408773e21,-0.0]}')


def test_return_ndarray_with_nan_or_infinity_is_cut_where_rapidjson_stops():
    # rapidjson 1.1.0 Writer::Double refuses NaN/Inf after PrettyPrefix wrote the separator;
    # Document::Accept stops and GRPS sends the buffer (grps_handler.cc): a truncated document
    arr = np.array([[1.0, 2.0], [np.nan, 3.0]], np.float32)
    assert codec.ndarray_to_json(codec.ok(), arr) == (
        b'{\n "status": {\n  "code": 200,\n  "msg": "OK",\n  "status": "SUCCESS"\n },\n "ndarray": [\n  [\n'
        b'   1.0,\n   2.0\n  ],\n  [\n   ')
    assert codec.ndarray_to_json(codec.ok(), np.array([1.0, np.inf], np.float32), pretty=False) == (
        b'{"status":{"code":200,"msg":"OK","status":"SUCCESS"},"ndarray":[1.0,')
    assert codec.ndarray_to_json(codec.ok(), np.float32(-np.inf).reshape(())).endswith(b'"ndarray": ')


@pytest.mark.parametrize(
    "value,expected",
    [(1.0, "1.0"), (123.5, "123.5"), (1e-4, "0.0001"), (1e-5, "0.00001"), (1.5e-6, "0.0000015"),
     (1e-7, "1e-7"), (1.25e-300, "1.25e-300"), (1e15, "1000000000000000.0"), (1e16, "10000000000000000.0"),
     (1.5e20, "150000000000000000000.0"), (1e21, "1e21"), (1.5e300, "1.5e300"), (-2e-6, "-0.000002")],
)
def test_rapidjson_double_text(value, expected):
    assert jsonwrite.rapidjson_doubles(np.array([value]), ",") == expected


# -- the text parses back to the same message ------------------------------------------------------
_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
# |x| <= 3.4e38: Python's json_format rejects "3.40282347e+38" (FLT_MAX as SimpleFtoa prints it, which
# is a hair above FLT_MAX as a double), although C++ and every JSON reader parse it back to FLT_MAX.
# Floats avoid -0.0: printed "-0" (as C++ does), which Python reads as the integer 0, and upb
# compares float fields bitwise.
_F32_BOUND = float(np.float32(3.4e38))
_f32 = st.floats(width=32, min_value=-_F32_BOUND, max_value=_F32_BOUND).map(lambda v: v + 0.0)
_tensor = st.builds(
    lambda name, shape, f32, f64, i64, s: grps_pb2.GenericTensor(
        name=name, dtype=grps_pb2.DT_FLOAT32, shape=shape, flat_float32=f32, flat_float64=f64, flat_int64=i64,
        flat_string=s),
    _text, st.lists(st.integers(0, 2**32 - 1), max_size=3), st.lists(_f32, max_size=6),
    st.lists(st.floats(allow_nan=False).map(lambda v: v + 0.0), max_size=6), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
    st.lists(_text, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_tensor, max_size=3), _text, st.dictionaries(_text, st.binary(max_size=6), max_size=3),
       st.dictionaries(_text, _f32, max_size=3), st.booleans())
def test_text_parses_back_to_the_same_message(tensors, model, s_b, s_f, as_map):
    msg = codec.ok(GrpsMessage(model=model))
    if as_map:
        msg.gmap.s_b.update(s_b)
        msg.gmap.s_f.update(s_f)
    else:
        msg.gtensors.tensors.extend(tensors)
    for pretty in (True, False):
        assert json_format.Parse(codec.message_to_json(msg, pretty), GrpsMessage()) == msg


def test_flt_max_text_reads_back_as_flt_max():
    msg = GrpsMessage()
    msg.gmap.s_f["m"] = float(np.finfo(np.float32).max)
    assert '"m": 3.40282347e+38' in text(msg)
    assert np.float32(float("3.40282347e+38")) == np.finfo(np.float32).max


def test_non_finite_floats_parse_back():
    msg = GrpsMessage()
    msg.gtensors.tensors.add(flat_float32=[float("inf"), float("-inf")], flat_float64=[float("nan")])
    back = json_format.Parse(codec.message_to_json(msg), GrpsMessage()).gtensors.tensors[0]
    assert list(back.flat_float32) == [float("inf"), float("-inf")] and np.isnan(back.flat_float64[0])
