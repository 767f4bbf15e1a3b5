"""GRPS JSON and protobuf (codec.load_json / message_from_json / tensor_from_generic / gmap_values,
and mapping.to_request over a model): anything a client sends, as HTTP JSON or as a gRPC
GrpsMessage of any kind (str_data, bin_data, gtensors, ndarray, gmap, none), becomes a request or a
GatewayError with a bounded text; gtensors and whole messages round-trip."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gateway.core.errors import GatewayError
from gateway.core.tensors import ModelMetadata, Tensor, TensorSpec
from gateway.dialects.grps import codec, config, mapping

from .profile import FUZZ, clean, decoded
from .strategies import BIG_VALUES, json_values

CFG = config.GrpsSettings()
ECHO = ModelMetadata("grps_echo", ("1",), "python",
                     (TensorSpec("text", "BYTES", (-1,), True), TensorSpec("in1", "INT32", (-1, -1), True)),
                     (TensorSpec("text_out", "BYTES", (-1,)), TensorSpec("out1", "INT32", (-1, -1))))
FLOATS = ModelMetadata("m", ("1",), "onnx", (TensorSpec("x", "FP32", (-1, 4)),), (TensorSpec("y", "FP32", (-1, 4)),),
                       max_batch_size=8)
SMALL = 100_000  # larger gtensors are the limits' business (issue 13, item 2)


def _small(msg: codec.GrpsMessage) -> bool:
    return all(len(t.shape) <= 64 and all(d >= 0 for d in t.shape) and math.prod(t.shape) <= SMALL
               for t in msg.gtensors.tensors)


def _through(msg: codec.GrpsMessage, ndarray=None) -> None:
    """Everything the dialect does with a parsed message before Triton is called."""
    for t in msg.gtensors.tensors:
        try:
            codec.tensor_from_generic(t)
        except GatewayError as e:
            clean(e)
    try:
        codec.gmap_values(msg.gmap)
    except GatewayError as e:
        clean(e)
    for meta in (ECHO, FLOATS):
        try:
            mapping.to_request(msg, ndarray, meta, mapping.resolve(msg.model or "grps_echo-1", CFG), CFG, False)
        except GatewayError as e:
            clean(e)


def _json(body: bytes) -> None:
    try:
        msg, ndarray = codec.message_from_json(codec.load_json(body))
    except GatewayError as e:
        clean(e)
        return
    if _small(msg):
        _through(msg, ndarray)


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_as_json_fail_cleanly(body):
    _json(body)


@FUZZ
@given(json_values)
def test_any_json_fails_cleanly(value):
    for doc in ({"str_data": value}, {"ndarray": value}, {"gtensors": value}, {"gtensors": {"tensors": value}},
                {"gtensors": {"tensors": [value]}}, {"gmap": value}, {"gmap": {"s_i32": value}}, {"model": value},
                {"bin_data": value}, value):
        _json(json.dumps(doc).encode())  # the stdlib: integers past 64 bits too


_GT_KEYS = ["name", "dtype", "shape", "flat_uint8", "flat_int8", "flat_int16", "flat_int32", "flat_int64",
            "flat_float16", "flat_float32", "flat_float64", "flat_double", "flat_string"]


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(_GT_KEYS), json_values | st.lists(st.integers(-300, 300)),
                                max_size=4), max_size=3))
def test_any_gtensor_json_fails_cleanly(tensors):
    _json(json.dumps({"gtensors": {"tensors": tensors}}).encode())


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_as_protobuf_fail_cleanly(raw):
    if (msg := decoded(codec.GrpsMessage, raw)) is None:
        return
    assume(_small(msg))
    _through(msg)


# -- gRPC: GrpsMessage of every kind, built field by field (what a grps_apis client can send) -------
_FLAT = {"flat_uint8": st.integers(0, 2**32 - 1), "flat_int8": st.integers(-(2**31), 2**31 - 1),
         "flat_int16": st.integers(-(2**31), 2**31 - 1), "flat_int32": st.integers(-(2**31), 2**31 - 1),
         "flat_int64": st.integers(-(2**63), 2**63 - 1), "flat_float16": st.floats(width=32),
         "flat_float32": st.floats(width=32), "flat_float64": st.floats(), "flat_string": st.text(max_size=8)}
_NAMES = st.sampled_from(["", "text", "in1", "in2", "x", "ndarray", "max_tokens", "stream"]) | st.text(max_size=8)


@st.composite
def generic_tensors(draw):
    g = codec.grps_pb2.GenericTensor(name=draw(_NAMES), dtype=draw(st.integers(0, 12)),
                                     shape=draw(st.lists(st.integers(0, 6), max_size=4)))
    for field in draw(st.lists(st.sampled_from(sorted(_FLAT)), max_size=2, unique=True)):
        getattr(g, field).extend(draw(st.lists(_FLAT[field], max_size=12)))
    return g


@st.composite
def grps_messages(draw):
    msg = codec.GrpsMessage(model=draw(st.sampled_from(["", "grps_echo-1", "m-1", "your_model-1.0.0"]) | _NAMES))
    if draw(st.booleans()):
        msg.status.code = draw(st.integers(-(2**31), 2**31 - 1))
        msg.status.msg = draw(st.text(max_size=8))
    kind = draw(st.sampled_from(["none", "str_data", "bin_data", "gtensors", "ndarray", "gmap"]))
    if kind == "str_data":
        msg.str_data = draw(st.text(max_size=20))
    elif kind == "bin_data":
        msg.bin_data = draw(st.binary(max_size=20))
    elif kind == "gtensors":
        msg.gtensors.SetInParent()
        msg.gtensors.tensors.extend(draw(st.lists(generic_tensors(), max_size=3)))
    elif kind == "ndarray":
        msg.ndarray.SetInParent()
    elif kind == "gmap":
        msg.gmap.SetInParent()
        maps = {"s_s": st.text(max_size=8), "s_b": st.binary(max_size=8), "s_i32": st.integers(-(2**31), 2**31 - 1),
                "s_i64": st.integers(-(2**63), 2**63 - 1), "s_f": st.floats(width=32), "s_d": st.floats()}
        for field in draw(st.lists(st.sampled_from(sorted(maps)), max_size=3, unique=True)):
            getattr(msg.gmap, field).update(draw(st.dictionaries(_NAMES, maps[field], max_size=3)))
    return msg


@FUZZ
@given(grps_messages())
def test_any_grpc_message_fails_cleanly(msg):
    # as grpc delivers it: serialised by the client, parsed by the server's deserializer
    msg = codec.GrpsMessage.FromString(msg.SerializeToString())
    assume(_small(msg))
    _through(msg)
    codec.request_bytes_map(msg)


@pytest.mark.parametrize("value", BIG_VALUES.values(), ids=BIG_VALUES.keys())
def test_error_texts_never_echo_a_large_value(value):
    for doc in ({"ndarray": value}, {"gtensors": value}, {"gtensors": {"tensors": [{"shape": value}]}},
                {"gtensors": {"tensors": [{"name": "x", "flat_int32": value}]}}, {"gmap": {"s_s": value}},
                {"str_data": value}, {"model": value, "str_data": "x"}):
        _json(orjson.dumps(doc))


_DTYPES = {"UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
           "FP32": np.float32, "FP64": np.float64}


@FUZZ
@given(st.sampled_from(sorted(_DTYPES)), st.data())
def test_gtensors_round_trip_through_json_and_protobuf(v2, data):
    dtype = np.dtype(_DTYPES[v2])
    # FP32 within +-2^127: the 9 digits GRPS writes for FLT_MAX (3.40282347e+38) read as a double
    # above FLT_MAX, which protobuf's Python json_format refuses ("Float value too large"); reported
    elements = hnp.from_dtype(dtype, allow_nan=False, allow_infinity=False,
                              **({"min_value": -(2.0**127), "max_value": 2.0**127} if v2 == "FP32" else {}))
    arr = data.draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), elements=elements))
    msg = codec.ok()
    codec.tensor_to_generic(Tensor("t", arr, v2), msg.gtensors.tensors.add())
    for back in (codec.GrpsMessage.FromString(msg.SerializeToString()),
                 codec.message_from_json(codec.load_json(codec.message_to_json(msg)))[0]):
        t = codec.tensor_from_generic(back.gtensors.tensors[0])
        assert t.datatype == v2 and t.shape == arr.shape
        np.testing.assert_array_equal(t.data, arr)


@FUZZ
@given(st.text(min_size=1, max_size=50),
       st.dictionaries(st.text(min_size=1, max_size=8), st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=4))
def test_str_data_and_gmap_round_trip_through_json(text, ints):
    msg = codec.ok()
    msg.str_data = text
    back, _ = codec.message_from_json(codec.load_json(codec.message_to_json(msg)))
    assert back.str_data == text
    msg = codec.ok()
    for k, v in ints.items():
        msg.gmap.s_i32[k] = v
    back, _ = codec.message_from_json(codec.load_json(codec.message_to_json(msg, pretty=False)))
    assert codec.gmap_values(back.gmap) == {k: ("INT32", v) for k, v in ints.items()}
