"""Neutral tensors ⇄ KServe V2 protobufs, for every dtype and shape (property-based)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2

from gateway.core import datatypes as dt
from gateway.core.errors import GatewayError
from gateway.core.tensors import InferRequest, Tensor
from gateway.upstream import codec
from gateway.upstream import wire as v2wire

NUMERIC = [r for r in dt.TABLE if not r.is_bytes]
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


def _echo(req_msg: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
    """What Triton answers for an identity model: outputs = inputs, raw bytes unchanged."""
    resp = service_pb2.ModelInferResponse(model_name=req_msg.model_name, model_version="1", id=req_msg.id)
    for inp in req_msg.inputs:
        resp.outputs.add(name=inp.name, datatype=inp.datatype, shape=inp.shape)
    resp.raw_output_contents.extend(req_msg.raw_input_contents)
    return resp


def _array(row, shape, draw):
    if row.v2 == "BF16":
        vals = draw(hnp.arrays(np.float32, shape, elements=st.floats(-1e3, 1e3, width=32)))
        return vals.astype(ml_dtypes.bfloat16)
    return draw(hnp.arrays(row.numpy, shape))


@st.composite
def tensors(draw):
    row = draw(st.sampled_from(dt.TABLE))
    shape = draw(shapes)
    if row.is_bytes:
        n = int(np.prod(shape, dtype=np.int64))
        items = draw(st.lists(st.binary(max_size=12), min_size=n, max_size=n))
        arr = np.empty(n, dtype=object)
        arr[:] = items
        return Tensor("t", arr.reshape(shape), "BYTES")
    return Tensor("t", _array(row, shape, draw), row.v2)


@settings(max_examples=300, deadline=None)
@given(tensors())
def test_round_trip_every_dtype_and_shape(t):
    req = InferRequest(model="m", inputs=[t], parameters={"flag": True, "n": 3, "s": "x", "f": 0.5})
    msg = v2wire.encode_request(req)
    assert codec.get_params(msg.parameters) == {"flag": True, "n": 3, "s": "x", "f": 0.5}
    back = v2wire.decode_response(_echo(msg)).output("t")
    assert back.datatype == t.datatype
    assert back.shape == t.shape
    if t.datatype == "BYTES":
        assert back.data.tolist() == t.data.tolist()
    else:
        assert back.data.dtype == t.data.dtype
        assert back.data.tobytes() == t.data.tobytes()  # bit-exact, NaNs included


def test_stream_requests_ask_for_an_empty_final_response():
    msg = v2wire.encode_request(InferRequest("m", [Tensor("x", np.zeros(1, np.float32))]), stream=True)
    assert msg.parameters["triton_enable_empty_final_response"].bool_param is True


def test_final_flag_is_read_and_removed_from_parameters():
    resp = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    resp.parameters["triton_final_response"].bool_param = False
    resp.parameters["other"].string_param = "v"
    out = v2wire.decode_response(resp)
    assert out.final is False and out.parameters == {"other": "v"}
    assert v2wire.decode_response(service_pb2.ModelInferResponse()).final is True


def test_typed_contents_are_decoded_when_raw_is_absent():
    resp = service_pb2.ModelInferResponse(model_name="m")
    out = resp.outputs.add(name="y", datatype="INT32", shape=[2, 2])
    out.contents.int_contents.extend([1, 2, 3, 4])
    s = resp.outputs.add(name="s", datatype="BYTES", shape=[1])
    s.contents.bytes_contents.append(b"hi")
    got = v2wire.decode_response(resp)
    np.testing.assert_array_equal(got.output("y").data, np.array([[1, 2], [3, 4]], np.int32))
    assert got.output("s").data.tolist() == [b"hi"]


def test_requested_outputs_are_named():
    req = InferRequest("m", [Tensor("x", np.zeros(1, np.float32))], outputs=["y"])
    assert [o.name for o in v2wire.encode_request(req).outputs] == ["y"]


def test_unsupported_parameter_types_are_a_client_error():
    with pytest.raises(GatewayError, match="unsupported type"):
        v2wire.encode_request(InferRequest("m", [], parameters={"bad": [1, 2]}))


def test_tensor_from_flat_checks_that_values_fill_the_shape():
    assert Tensor.from_flat("a", "INT32", [3, 2], range(6)).shape == (3, 2)
    with pytest.raises(GatewayError, match="5 values do not fill shape \\[3, 2\\]"):
        Tensor.from_flat("a", "INT32", [3, 2], range(5))
    t = Tensor.from_flat("s", "BYTES", [2], ["a", b"b"])
    assert t.data.tolist() == [b"a", b"b"]


def test_absurd_shapes_are_refused_before_anything_is_allocated():
    from gateway.core.tensors import MAX_ELEMENTS, element_count

    with pytest.raises(GatewayError, match="more than the"):
        element_count([4294967295, 4294967295], "t")  # would overflow int64 products
    with pytest.raises(GatewayError, match="more than the"):
        element_count([MAX_ELEMENTS + 1], "t")
    with pytest.raises(GatewayError, match="negative dimension"):
        element_count([2, -1], "t")
    assert element_count([], "scalar") == 1


@pytest.mark.parametrize("datatype,data", [
    ("FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
    ("INT64", np.array([[1, -2]], dtype=np.int64)),
    ("BYTES", np.array([b"a", b"", "\u00e9".encode()], dtype=object)),
    ("FP16", np.array([1.5], dtype=np.float32)),  # converted to the declared dtype
    ("BOOL", np.array([True, False])),
    ("BF16", np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)),
    ("FP32", np.arange(6, dtype=np.float64).reshape(2, 3).T),  # not contiguous, converted
    ("INT32", np.broadcast_to(np.int32(4), (3, 2))),  # a broadcast view
])
def test_serialize_request_is_the_encoded_message_on_the_wire(datatype, data):
    req = InferRequest("m", [Tensor("x", data, datatype, {"p": 1}), Tensor("y", np.array([7], np.int32), "INT32")],
                       "3", ["out"], {"priority": 2}, "rid")
    wire = v2wire.serialize_request(req)
    assert service_pb2.ModelInferRequest.FromString(wire) == v2wire.encode_request(req)


@pytest.mark.parametrize("datatype,data", [
    ("FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
    ("BYTES", np.array([b"a", b"", "\u00e9".encode()], dtype=object)),
    ("INT64", np.zeros((0, 4), dtype=np.int64)),  # an empty dimension
    ("FP16", np.array(1.5, dtype=np.float32)),  # a scalar: no shape field
])
@pytest.mark.parametrize("version,rid,outputs", [("", "", None), ("3", "rid-\u00e9", ["out", "o2"])])
def test_a_request_without_parameters_is_written_by_hand_as_protobuf_would(datatype, data, version, rid, outputs):
    """No parameters: the header is written by hand (and cached per shape); parsed, the same message."""
    for _ in range(2):  # written, then from the cache
        req = InferRequest("m\u00e9", [Tensor("x", data, datatype), Tensor("y", np.array([7], np.int32), "INT32")],
                           version, outputs, None, rid)
        wire = v2wire.serialize_request(req)
        assert service_pb2.ModelInferRequest.FromString(wire) == v2wire.encode_request(req)
    assert v2wire._header(InferRequest("m", [Tensor("x", np.array([[-1]]), "INT64")], "", None)) == \
        service_pb2.ModelInferRequest(model_name="m", inputs=[{"name": "x", "datatype": "INT64",
                                                               "shape": [1, 1]}]).SerializeToString()


def test_serialize_request_with_a_large_tensor():
    big = np.random.default_rng(0).random(300_000).astype(np.float32)  # a multi-byte length varint
    req = InferRequest("m", [Tensor("x", big, "FP32")])
    parsed = service_pb2.ModelInferRequest.FromString(v2wire.serialize_request(req))
    assert parsed.raw_input_contents[0] == big.tobytes()


def _same_response(a, b) -> None:
    assert (a.model, a.version, a.id, a.parameters, a.final) == (b.model, b.version, b.id, b.parameters, b.final)
    assert [(t.name, t.datatype, t.shape, t.parameters) for t in a.outputs] == \
        [(t.name, t.datatype, t.shape, t.parameters) for t in b.outputs]
    for x, y in zip(a.outputs, b.outputs, strict=True):
        assert x.data.dtype == y.data.dtype
        assert x.data.tolist() == y.data.tolist() if x.datatype == "BYTES" else x.data.tobytes() == y.data.tobytes()


@st.composite
def responses(draw):
    """A ModelInferResponse on the wire, raw contents large enough (sometimes) to take the split path."""
    resp = service_pb2.ModelInferResponse(model_name=draw(st.text(max_size=8)), model_version=draw(st.text(max_size=3)),
                                          id=draw(st.text(max_size=8)))
    if draw(st.booleans()):
        resp.parameters["triton_final_response"].bool_param = draw(st.booleans())
        resp.parameters["s"].string_param = "x"
    for i in range(draw(st.integers(0, 3))):
        big = draw(st.sampled_from([0, 3, v2wire.SPLIT_MIN, 3 * v2wire.SPLIT_MIN + 1]))
        if draw(st.booleans()):  # BYTES: elements, some empty, one perhaps large
            items = draw(st.lists(st.binary(max_size=6), max_size=5)) + [bytes(big % 251) * 3]
            arr = np.empty(len(items), dtype=object)
            arr[:] = items
            out = resp.outputs.add(name=f"o{i}", datatype="BYTES", shape=[len(items)])
            resp.raw_output_contents.append(dt.encode_bytes(arr))
        else:
            out = resp.outputs.add(name=f"o{i}", datatype="FP32", shape=[big // 4 + 1])
            resp.raw_output_contents.append(np.arange(big // 4 + 1, dtype=np.float32).tobytes())
        if draw(st.booleans()):
            out.parameters["p"].int64_param = i
    wire = resp.SerializeToString()
    if draw(st.booleans()):  # protobuf lets fields come in any order: the raw contents first
        head = service_pb2.ModelInferResponse()
        head.CopyFrom(resp)
        del head.raw_output_contents[:]
        tail = service_pb2.ModelInferResponse(raw_output_contents=resp.raw_output_contents).SerializeToString()
        wire = tail + head.SerializeToString()
    return wire


@settings(max_examples=150, deadline=None)
@given(responses())
def test_parse_response_is_protobufs_parse_with_the_raw_contents_as_views(wire):
    msg, raws = v2wire.parse_response(wire)
    full = service_pb2.ModelInferResponse.FromString(wire)
    if raws is None:
        assert len(wire) < v2wire.SPLIT_MIN and msg == full
    else:
        assert [bytes(r) for r in raws] == list(full.raw_output_contents)
        assert all(r.obj is wire for r in raws)  # views of gRPC's bytes, not copies
        del full.raw_output_contents[:]
        assert msg == full
    _same_response(v2wire.decode_response(msg, raws), v2wire.decode_response(service_pb2.ModelInferResponse.FromString(wire)))
    # views: the same outputs, BYTES elements as views of gRPC's bytes (of the message's own, unsplit)
    viewed = v2wire.decode_response(msg, raws, views=True)
    plain = v2wire.decode_response(msg, raws)
    for v, p in zip(viewed.outputs, plain.outputs, strict=True):
        assert (v.name, v.datatype, v.data.shape) == (p.name, p.datatype, p.data.shape)
        if v.datatype == "BYTES":
            assert [bytes(x) for x in v.data.reshape(-1)] == list(p.data.reshape(-1))
            assert all(type(x) is (bytes if raws is None else memoryview) for x in v.data.reshape(-1))
            assert raws is None or all(x.obj is wire for x in v.data.reshape(-1))
        else:
            assert np.array_equal(v.data, p.data)


def test_parse_response_keeps_unknown_fields_and_refuses_a_malformed_answer():
    big = service_pb2.ModelInferResponse(model_name="m", raw_output_contents=[b"x" * v2wire.SPLIT_MIN]).SerializeToString()
    unknown = bytes([15 << 3 | 0, 7])  # field 15, varint 7: not in the message
    msg, raws = v2wire.parse_response(big + unknown)
    assert msg.model_name == "m" and bytes(raws[0]) == b"x" * v2wire.SPLIT_MIN
    assert msg.SerializeToString() == service_pb2.ModelInferResponse(model_name="m").SerializeToString() + unknown
    for bad in (big[:-1], big + b"\x80", big + bytes([15 << 3 | 3])):  # cut short, an endless varint, a group
        with pytest.raises(DecodeError):
            v2wire.parse_response(bad)
        with pytest.raises(DecodeError):
            service_pb2.ModelInferResponse.FromString(bad)


_FIXED = ["FP32", "INT32", "FP64", "INT8", "UINT16", "BOOL"]


def _answer(model, version, rid, outs, seed, params=False, out_params=False, raw_first=False, trailing=b"",
            drop_raw=False, cut_raw=False) -> bytes:
    """A ModelInferResponse of numeric outputs ``outs`` [(name, V2 type, shape)] as Triton writes it
    (or laid out otherwise, as the keyword arguments say)."""
    resp = service_pb2.ModelInferResponse(model_name=model, model_version=version, id=rid)
    if params:
        resp.parameters["p"].bool_param = True
    rng = np.random.default_rng(seed)
    for name, datatype, shape in outs:
        out = resp.outputs.add(name=name, datatype=datatype, shape=shape)
        if out_params:
            out.parameters["q"].int64_param = 1
        size = int(np.prod(shape)) * np.dtype(v2wire.RAW_NUMPY[datatype]).itemsize
        raw = rng.integers(0, 2 if datatype == "BOOL" else 256, size, dtype=np.uint8).tobytes()
        resp.raw_output_contents.append(raw[:-1] if cut_raw and raw else raw)
    if drop_raw and outs:
        del resp.raw_output_contents[-1]
    wire = resp.SerializeToString()
    if raw_first:
        head = service_pb2.ModelInferResponse()
        head.CopyFrom(resp)
        del head.raw_output_contents[:]
        wire = service_pb2.ModelInferResponse(raw_output_contents=resp.raw_output_contents).SerializeToString() \
            + head.SerializeToString()
    return wire + trailing


@st.composite
def answer_pairs(draw):
    """An answer to learn from, and a later one: the same form with another id and other values, or
    that form changed in one way."""
    shape = st.lists(st.integers(0, 3), max_size=3)
    outs = [(f"out{i}", draw(st.sampled_from(_FIXED)), draw(shape)) for i in range(draw(st.integers(0, 2)))]
    if draw(st.integers(0, 6)) == 0:  # large enough for parse_response's split
        outs.append(("big", "FP32", [v2wire.SPLIT_MIN // 4 + 3]))
    base = {"model": "m", "version": draw(st.sampled_from(["", "1", "12"])), "outs": outs,
            "params": draw(st.booleans()), "out_params": draw(st.booleans())}
    first = _answer(rid=draw(st.sampled_from(["", "a1-7", "x" * 130])), seed=1, **base)
    later = dict(base)
    change = draw(st.sampled_from(["none"] * 6 + ["version", "name", "type", "shape", "params", "out_params",
                                                  "raw_first", "trailing", "drop_raw", "cut_raw", "more"]))
    extra = {}
    if change == "version":
        later["version"] = later["version"] + "9"
    elif change in ("name", "type", "shape") and outs:
        i = draw(st.integers(0, len(outs) - 1))
        name, datatype, dims = outs[i]
        new = {"name": (name + "x", datatype, dims), "type": (name, draw(st.sampled_from(_FIXED)), dims),
               "shape": (name, datatype, [*dims, 2])}[change]
        later["outs"] = [*outs[:i], new, *outs[i + 1:]]
    elif change in ("params", "out_params"):
        later[change] = not later[change]
    elif change == "more":
        later["outs"] = [*outs, ("zz", "INT32", [1])]
    elif change == "trailing":
        extra["trailing"] = bytes([15 << 3 | 0, 7])  # an unknown field after the raw contents
    elif change in ("raw_first", "drop_raw", "cut_raw"):
        extra[change] = True
    rid = draw(st.sampled_from(["", "b2-9", "y" * 127, "y" * 128, "\u00e9" * 70]))
    return _Wire(first), _Wire(_answer(rid=rid, seed=2, **later, **extra)), change, outs


class _Wire(bytes):
    def __repr__(self) -> str:  # hypothesis prints the drawn values of a failing example
        return f"<{len(self)} bytes {bytes(self[:40])!r}...>"


@settings(max_examples=400, deadline=None)
@given(answer_pairs())
def test_an_answer_form_reads_what_decoding_reads_or_nothing(pair):
    """AnswerForm.read(later) is None or the arrays decode_response reads from it; an answer that
    differs from the learned one in nothing but its id and its values is read."""
    first, later, change, outs = pair
    wanted = [(name, datatype, np.dtype(v2wire.RAW_NUMPY[datatype])) for name, datatype, _ in outs]
    msg, raws = v2wire.parse_response(first)
    arrays = v2wire.numeric_outputs(msg, raws, wanted)
    form = v2wire.AnswerForm.learn(first, arrays, msg.model_version)
    assert form is not None and form.version == msg.model_version
    assert [a.tobytes() for a in form.read(first)] == [a.tobytes() for a in arrays]
    got = form.read(later)
    try:
        later_msg, later_raws = v2wire.parse_response(later)
        decoded = v2wire.decode_response(later_msg, later_raws)
    except (DecodeError, GatewayError, ValueError):
        decoded = None
    if got is None:
        assert change != "none"
        return
    assert decoded is not None and later_msg.model_version == form.version
    assert [(t.name, t.datatype) for t in decoded.outputs] == [(n, d) for n, d, _ in wanted]
    for a, t in zip(got, decoded.outputs, strict=True):
        assert a.dtype == t.data.dtype and a.shape == t.data.shape and a.tobytes() == t.data.tobytes()


def test_an_answer_form_reads_no_answer_protobuf_would_refuse():
    outs = [("y", "FP32", [2])]
    first = _answer("m", "1", "r", outs, 1)
    form = v2wire.AnswerForm.learn(first, [np.zeros(2, np.float32)], "1")
    bad_id = first.replace(b"\x1a\x01r", b"\x1a\x01\xff")  # an id that is not UTF-8
    with pytest.raises(DecodeError):
        service_pb2.ModelInferResponse.FromString(bad_id)
    assert form.read(bad_id) is None
    assert form.read(first[:-1]) is None and form.read(first + b"\x00") is None
    assert form.read(first.replace(b"\x1a\x01r", b"\x1a\x7fr")) is None  # an id running past the end


def test_an_answer_form_is_not_learned_from_an_answer_laid_out_otherwise():
    outs = [("y", "FP32", [2])]
    arrays = [np.zeros(2, np.float32)]
    for wire in (_answer("m", "1", "r", outs, 1, raw_first=True), _answer("m", "1", "r", outs, 1, trailing=b"\x78\x07")):
        assert v2wire.AnswerForm.learn(wire, arrays, "1") is None
    assert v2wire.AnswerForm.learn(_answer("m", "1", "r", outs, 1), [np.zeros(3, np.float32)], "1") is None
    assert v2wire.AnswerForm.learn(b"\x80", arrays, "1") is None
