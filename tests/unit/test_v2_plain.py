"""The V2 REST fast paths give the general path's bytes: plain.request against jsontensor.parse +
jsontensor.serialize over generated bodies (plain ones, and near misses the general path refuses or
must decide), the small-float writer against numpy's, and the answer's cached pieces against a
writer that writes every piece each time."""

from __future__ import annotations

import math
import struct

import numpy as np
import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from gateway.core.errors import GatewayError
from gateway.dialects.v2 import jsontensor, plain, rjson
from gateway.dialects.v2.jsonbody import loads
from tests.unit.core import rapidjson_reference

NUMERIC = ["FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "BOOL"]
OTHER = ["FP16", "BF16", "BYTES", "", "fp32", "INT128"]
names = st.text(min_size=0, max_size=6)
doubles = st.floats(allow_nan=False, allow_infinity=False, width=64)
ints = st.one_of(st.integers(-300, 300), st.integers(-(1 << 65), 1 << 65),
                 st.sampled_from([(1 << 63) - 1, -(1 << 63), (1 << 64) - 1, 1 << 64, 1 << 32, (1 << 31) - 1]))
values = st.one_of(doubles, ints, st.booleans(), st.sampled_from([1e39, -1e39, 1e-46, 5e-324, -0.0, 1e308]))


def _flat_data(datatype: str, draw) -> list:
    n = draw(st.integers(0, 9))
    if datatype == "BOOL":
        return draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if datatype.startswith(("INT", "UINT")):
        return draw(st.lists(ints, min_size=n, max_size=n))
    return draw(st.lists(st.one_of(doubles, ints), min_size=n, max_size=n))


@st.composite
def inputs(draw, binary: list):
    datatype = draw(st.sampled_from(NUMERIC + OTHER[:3]) if draw(st.booleans()) else st.sampled_from(NUMERIC))
    inp = {"name": draw(names), "datatype": datatype}
    if draw(st.integers(0, 3)) == 0:  # the binary extension
        size = draw(st.integers(0, 12))
        binary.append(draw(st.binary(min_size=size, max_size=size)))
        inp["shape"] = draw(st.lists(st.integers(0, 4), max_size=3))
        inp["parameters"] = {"binary_data_size": size}
    else:
        data = _flat_data(datatype, draw)
        inp["shape"] = [len(data)] if draw(st.integers(0, 4)) else [1, len(data)]
        inp["data"] = data
    return inp


def _spoil(draw, doc: dict, binary: list) -> None:
    """One near miss: what the fast path must leave to the general path (an error, or a rarer form)."""
    spot = draw(st.integers(0, 14))
    ins = doc["inputs"]
    if spot == 0 and ins:
        ins[0]["shape"] = draw(st.sampled_from([[-1], [1.0], [True], [1 << 63], "4", [[4]], [(1 << 64) - 1]]))
    elif spot == 1 and ins and "data" in ins[0]:
        ins[0]["data"] = draw(st.sampled_from([[[1, 2], [3, 4]], [1, "2"], [None], "x", [True, 1.5], [[]]]))
        ins[0]["shape"] = [2, 2]
    elif spot == 2 and ins:
        ins[0]["data"] = [draw(values) for _ in range(3)]
        ins[0]["shape"] = [3]
        ins[0].pop("parameters", None)
    elif spot == 3:
        doc["id"] = draw(st.sampled_from([1, None, "", "r\x00\"\\é", True]))
    elif spot == 4:
        doc["parameters"] = draw(st.sampled_from([{"binary_data_output": 1}, {"k": 1}, [], None, {},
                                                  {"binary_data_output": True, "priority": 1}]))
    elif spot == 5:
        doc["outputs"] = draw(st.sampled_from([{}, [{"name": 1}], [{"name": "o", "parameters": {"classification": 2}}],
                                               [{"name": "o", "parameters": {"binary_data": 1}}], ["o"],
                                               [{"name": "o", "extra": 1}], [{"parameters": {}}]]))
    elif spot == 6 and ins:
        ins[0]["parameters"] = {"binary_data_size": draw(st.sampled_from([-1, 1.0, 1 << 64, 99]))}
        ins[0].pop("data", None)
    elif spot == 7:
        binary.append(b"\x00")  # bytes after the last binary input
    elif spot == 8 and ins:
        ins[0]["name"] = draw(st.sampled_from([1, None, "\udc80"]))
    elif spot == 9:
        doc["inputs"] = draw(st.sampled_from([{}, None, "x", [[]], [1]]))
    elif spot == 10 and ins:
        ins[0]["extra"] = 1
    elif spot == 11:
        del doc["inputs"]
    elif spot == 12 and ins:
        ins[0]["datatype"] = draw(st.sampled_from([1, None] + OTHER))
    elif spot == 13:
        doc["model"] = "m"


@st.composite
def bodies(draw):
    binary: list = []
    doc: dict = {"inputs": draw(st.lists(inputs(binary), max_size=3))}
    if draw(st.booleans()):
        doc["id"] = draw(names)
    if draw(st.integers(0, 2)) == 0:
        doc["parameters"] = {"binary_data_output": draw(st.booleans())} if draw(st.booleans()) else {}
    if draw(st.booleans()):
        doc["outputs"] = [{"name": draw(names)} | ({"parameters": {"binary_data": draw(st.booleans())}}
                                                   if draw(st.booleans()) else {})
                          for _ in range(draw(st.integers(0, 3)))]
    if draw(st.integers(0, 2)) == 0:
        _spoil(draw, doc, binary)
    return doc, b"".join(binary)


def _general(doc, binary: bytes):
    try:
        with np.errstate(all="ignore"):  # a double past FP32's range: inf, as in the gateway (warnings are errors here)
            parsed = jsontensor.parse(doc, "model", "7", memoryview(binary))
        return jsontensor.serialize(parsed), parsed
    except (GatewayError, ValueError, TypeError, OverflowError) as e:
        return type(e), None


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(bodies())
def test_plain_requests_are_written_as_the_general_path_writes_them(case):
    doc, binary = case
    doc = loads(orjson.dumps(doc)) if _json_safe(doc) else doc  # as the body parser hands it over
    fast = plain.request(doc, "model", "7", memoryview(binary))
    want, parsed = _general(doc, binary)
    if fast is None:
        return
    assert parsed is not None, f"the fast path took a body the general path refuses ({want})"
    data, answer = fast
    assert data == want
    assert (answer.outputs, answer.binary_default) == (parsed.outputs, parsed.binary_default)


def _json_safe(doc) -> bool:
    try:
        orjson.dumps(doc)
        return True
    except (orjson.JSONEncodeError, TypeError):
        return False


def test_the_fast_path_takes_the_common_bodies():
    """tritonclient's and curl's small requests, JSON and binary, named outputs or not, with an id."""
    x = struct.pack("<4f", 1, 2, 5, 7)
    for doc, binary in [
        ({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [1.0, 2.0, 5.0, 7.0]}]}, b""),
        ({"id": "r1", "inputs": [{"name": "x", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 5, 7]}],
          "outputs": [{"name": "y"}]}, b""),
        ({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}],
          "parameters": {"binary_data_output": True}}, x),
        ({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}],
          "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}, x),
        ({"inputs": [{"name": "b", "shape": [2], "datatype": "BOOL", "data": [True, False]}]}, b""),
    ]:
        fast = plain.request(doc, "m", "", memoryview(binary))
        assert fast is not None
        assert fast[0] == jsontensor.serialize(jsontensor.parse(doc, "m", "", memoryview(binary)))
        assert service_pb2.ModelInferRequest.FromString(fast[0]).model_name == "m"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 64) - 1), min_size=0, max_size=64), st.sampled_from(["FP32", "FP64"]))
def test_float_answers_as_rapidjson_writes_them(bits, datatype):
    """data_text of FP32/FP64 raw bytes against rapidjson's dtoa in Python, every bit pattern."""
    size, mask = (4, 0xFFFFFFFF) if datatype == "FP32" else (8, (1 << 64) - 1)
    raw = b"".join((b & mask).to_bytes(size, "little") for b in bits)
    values = struct.unpack(f"<{len(bits)}{'f' if size == 4 else 'd'}", raw)  # float32 widened, NaNs kept
    want = ("[" + ",".join(map(rapidjson_reference.dtoa, values)) + "]").encode()
    assert jsontensor.data_text("y", datatype, raw, len(bits)) == want
    assert jsontensor.data_text("y", datatype, memoryview(raw), len(bits)) == want


def _reference_render(resp, parsed) -> bytes:
    """Every piece written for each answer (the writer before the per-model and per-shape caches)."""
    head = [b"{"]
    if resp.id:
        head += (b'"id":', rjson.string(resp.id), b",")
    head += (b'"model_name":', rjson.string(resp.model_name), b',"model_version":', rjson.string(resp.model_version))
    if resp.parameters:
        head += (b',"parameters":{', b",".join(rjson.string(k) + b":" + jsontensor.param_text(p)
                                               for k, p in resp.parameters.items()), b"}")
    head.append(b',"outputs":[')
    buffers = []
    for i, out in enumerate(resp.outputs):
        want = parsed.outputs.get(out.name)
        binary = want.binary if want is not None else parsed.binary_default
        raw = resp.raw_output_contents[i] if i < len(resp.raw_output_contents) else b""
        head += (b"," if i else b"", b'{"name":', rjson.string(out.name), b',"datatype":', rjson.string(out.datatype),
                 b',"shape":[', ",".join(map(str, out.shape)).encode(), b"]")
        if binary:
            head += (b',"parameters":{"binary_data_size":', str(len(raw)).encode(), b"}}")
            buffers += [raw] if raw else []
        else:
            head += (b',"data":', jsontensor.data_text(out.name, out.datatype, raw, math.prod(out.shape)), b"}")
    head.append(b"]}")
    return b"".join(head + buffers)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["m", 'a"b\\c\n', "é\x01"]), st.sampled_from(["", "1"]), st.sampled_from(["", "q\x1f"]),
       st.lists(st.tuples(st.sampled_from(["y", "z\x00", '"']), st.sampled_from(["FP32", "INT32", "FP64", "BOOL"]),
                          st.lists(st.integers(0, 3), max_size=2), st.sampled_from([None, True, False])), max_size=3),
       st.booleans(), st.booleans())
def test_answers_from_cached_pieces_are_written_anew(model, version, rid, outs, binary_default, with_param):
    resp = service_pb2.ModelInferResponse(model_name=model, model_version=version, id=rid)
    if with_param:
        resp.parameters["sequence_id"].int64_param = 3
    parsed = jsontensor.Parsed(None, binary_default=binary_default)
    for name, datatype, shape, binary in outs:
        resp.outputs.add(name=name, datatype=datatype, shape=shape)
        n = math.prod(shape)
        resp.raw_output_contents.append(np.arange(n).astype({"FP32": np.float32, "INT32": np.int32, "FP64": np.float64,
                                                              "BOOL": np.bool_}[datatype]).tobytes())
        if binary is not None:
            parsed.outputs[name] = jsontensor.Output(binary)
    assume(len({o[0] for o in outs}) == len(outs))
    for _ in range(2):  # the second time from the caches
        pieces, header = jsontensor.render(resp, parsed)
        body = b"".join(pieces)
        assert body == _reference_render(resp, parsed)
        assert header is None or body[:header].endswith(b"]}")
