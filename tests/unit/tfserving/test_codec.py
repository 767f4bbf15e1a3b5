"""Pure codec functions of the TF Serving dialect: JSON <-> numpy, NaN/Infinity, b64, floats."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._proto.tensorflow_serving.apis import predict_pb2
from gateway.core.errors import ErrorKind, GatewayError, check_table
from gateway.core.tensors import TensorSpec
from gateway.dialects.tfserving import codec, errors, jsonio, protocodec, shapes
from gateway.dialects.tfserving.mapping import Signature


def sig(*inputs, outputs=("y",)):
    ins = tuple((n, TensorSpec(n, t, (-1,))) for n, t in inputs)
    outs = tuple((n, TensorSpec(n, "FP32", (-1,))) for n in outputs)
    return Signature("serving_default", "predict", "m", 0, ins, outs)


def test_error_table_renders_every_kind():
    check_table(errors.TABLE, "tfserving")
    assert errors.http_error(errors.servable_not_found("half", None)) == (
        404, b'{\n    "error": "Servable not found for request: Latest(half)"\n}')
    assert errors.servable_not_found("m", 3).message == "Servable not found for request: Specific(m, 3)"


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"a": [NaN, Infinity, -Infinity]}', "nan inf -inf"),
    (b'{"a": [Inf, -Inf]}', "inf -inf"),
    (b'{"a": [1.0]}', "1.0"),
])
def test_loads_accepts_tf_serving_tokens(body, expected):
    got = jsonio.loads(body)["a"]
    assert " ".join(str(v) for v in got) == expected


@pytest.mark.parametrize(("body", "message"), [
    (b"", "JSON Parse error: The document is empty"),
    (b"  ", "JSON Parse error: The document is empty"),
    (b"{", "JSON Parse error: Missing a name for object member. at offset: 1"),
    (b"[1,]", "JSON Parse error: Invalid value. at offset: 3"),
    # half a surrogate pair: rapidjson refuses it (the stdlib parser would let it through to a 500)
    (b'{"instances": ["\\ud800"]}', "JSON Parse error: The surrogate pair in string is invalid. at offset: 16"),
    (b'{"instances": NaN, "k": "\\udc00"}', "JSON Parse error: The surrogate pair in string is invalid. at offset: 25"),
])
def test_loads_errors_use_rapidjson_words(body, message):
    with pytest.raises(GatewayError) as e:
        jsonio.loads(body)
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT and e.value.message == message


def test_row_format_single_input():
    inputs, row = codec.parse_predict({"instances": [1.0, 2, 5.0]}, sig(("x", "FP32")))
    assert row and inputs["x"].dtype == np.float32 and inputs["x"].tolist() == [1.0, 2.0, 5.0]


def test_row_format_multi_input_and_b64():
    s = sig(("tag", "BYTES"), ("n", "INT32"))
    doc = {"instances": [{"tag": {"b64": "aGk="}, "n": 1}, {"tag": "yo", "n": 2}]}
    inputs, _ = codec.parse_predict(doc, s)
    assert inputs["tag"].tolist() == [b"hi", b"yo"] and inputs["n"].dtype == np.int32
    with pytest.raises(GatewayError, match="keys must be equal to: n,tag"):
        codec.parse_predict({"instances": [{"tag": "a"}]}, s)
    with pytest.raises(GatewayError, match="instances is a plain list"):
        codec.parse_predict({"instances": [1, 2]}, s)


def test_columnar_named_and_missing():
    s = sig(("a", "FP32"), ("b", "INT64"))
    inputs, row = codec.parse_predict({"inputs": {"a": [[1.0]], "b": 3}}, s)
    assert not row and inputs["a"].shape == (1, 1) and inputs["b"].shape == ()
    with pytest.raises(GatewayError, match="Missing named input: b in 'inputs' object."):
        codec.parse_predict({"inputs": {"a": 1.0}}, s)


@pytest.mark.parametrize(("value", "v2", "message"), [
    (["x"], "FP32", 'JSON Value: "x" Type: String is not of expected type: float'),
    ([1.5], "INT32", "JSON Value: 1.5 Type: Number is not of expected type: int32"),
    ([1], "BOOL", "JSON Value: 1 Type: Number is not of expected type: bool"),
    ([None], "FP32", "JSON Value: null Type: Null is not of expected type: float"),
])
def test_wrong_json_types(value, v2, message):
    with pytest.raises(GatewayError) as e:
        codec.to_array(value, v2, "x")
    assert e.value.message == message


def test_half_is_unimplemented_over_rest():
    with pytest.raises(GatewayError) as e:
        codec.to_array([1.0], "FP16", "x")
    assert e.value.kind is ErrorKind.UNIMPLEMENTED
    # AddValueToTensor judges the leaf value, so the message names the value, not the list
    assert e.value.message == "Conversion of JSON Value: 1.0 to type: half"


def test_examples_typing():
    exs, ctx = codec.parse_examples({"examples": [{"x": 1.0, "n": 1, "s": "a", "b": {"b64": "aGk="}}],
                                     "context": {"c": [1.0, 2.0]}}, "regress")
    f = exs[0]
    assert (f["x"].kind, f["n"].kind, f["s"].kind, f["b"].values) == ("float", "int64", "bytes", [b"hi"])
    assert ctx["c"].values == [1.0, 2.0]
    with pytest.raises(GatewayError, match="Unexpected element type in feature: x expecting type: float"):
        codec.parse_examples({"examples": [{"x": [1.0, "a"]}]}, "regress")


def test_shape_rule():
    spec = TensorSpec("x", "FP32", (-1,))
    assert shapes.bridge(np.zeros((2, 1)), spec, 0)[0].shape == (2,)
    assert shapes.bridge(np.zeros(3), TensorSpec("x", "FP32", (-1, 1)), 0)[0].shape == (3, 1)
    arr, added = shapes.bridge(np.zeros(4), TensorSpec("x", "FP32", (-1, 4)), 8)
    assert arr.shape == (1, 4) and added
    assert shapes.bridge(np.zeros((2, 3)), TensorSpec("x", "FP32", (-1,)), 0)[0].shape == (2, 3)  # Triton decides


def test_tensor_proto_round_trip_and_broadcast():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    tp = protocodec.tensor_to_proto(arr, "FP32")
    assert list(tp.float_val) == arr.ravel().tolist() and not tp.tensor_content
    back, v2 = protocodec.tensor_from_proto(tp, "x")
    assert v2 == "FP32" and np.array_equal(back, arr)
    tc = protocodec.tensor_to_proto(arr, "FP32", content=True)
    assert np.array_equal(protocodec.tensor_from_proto(tc, "x")[0], arr)
    one = protocodec.tensor_to_proto(np.array([7], np.int64), "INT64")
    one.tensor_shape.dim[0].size = 3
    assert protocodec.tensor_from_proto(one, "x")[0].tolist() == [7, 7, 7]
    half = protocodec.tensor_to_proto(np.array([1.5], np.float16), "FP16")
    assert protocodec.tensor_from_proto(half, "x")[0].tolist() == [1.5]


def _outcome(fn, *args):
    """What ``fn(*args)`` gives: its value, or the error's kind and message."""
    try:
        return "ok", fn(*args)
    except GatewayError as e:
        return "error", (e.kind, e.message)


_PROTO_TYPES = [1, 2, 3, 4, 5, 6, 7, 9, 10, 17, 19, 22, 23, 14, 99]  # TF DataType numbers, 99 unknown
_TYPED_FIELD = {1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val", 6: "int_val",
                7: "string_val", 9: "int64_val", 10: "bool_val", 17: "int_val", 19: "half_val", 22: "uint32_val",
                23: "uint64_val", 14: "half_val"}
_AS_IS = {1: np.float32, 2: np.float64, 3: np.int32, 9: np.int64, 10: np.bool_, 22: np.uint32, 23: np.uint64}
_tensor_protos = st.tuples(st.sampled_from(_PROTO_TYPES), st.lists(st.integers(-2, 4), max_size=3),
                           st.integers(0, 12), st.booleans(), st.integers(0, 40))


def _tensor_proto(dtype, dims, count, content, content_bytes):
    tp = predict_pb2.PredictRequest().inputs["x"]
    tp.dtype = dtype
    for d in dims:
        tp.tensor_shape.dim.add(size=d)
    if content:
        tp.tensor_content = bytes(range(content_bytes))
    elif (field := _TYPED_FIELD.get(dtype)) is not None:
        getattr(tp, field).extend([bytes([65 + i]) for i in range(count)] if field == "string_val" else
                                  [bool(i % 2) for i in range(count)] if field == "bool_val" else list(range(count)))
    return tp


@settings(max_examples=300, deadline=None)
@given(protos=st.lists(_tensor_protos, min_size=1, max_size=5), name=st.sampled_from(["x", "in put", "n" * 300]))
def test_kept_tensor_layouts_read_as_fresh_ones(protos, name):
    """tensor_from_proto keeps what a dtype and shape give (checked) by their bytes: protos read one
    after another, layouts kept, give the same arrays or the same errors as each read with nothing
    kept; a proto holding every value of a type read as it comes is those values in its shape."""
    tps = [_tensor_proto(*p) for p in protos]
    fresh = []
    for tp in tps:
        protocodec._layouts.clear()
        fresh.append(_outcome(protocodec.tensor_from_proto, tp, name))
    protocodec._layouts.clear()
    for (dtype, dims, count, content, _), tp, want in zip(protos, tps, fresh, strict=True):
        got = _outcome(protocodec.tensor_from_proto, tp, name)
        assert got[0] == want[0]
        if want[0] == "error":
            assert got == want
            continue
        (a, v2), (b, w2) = want[1], got[1]
        assert v2 == w2 and a.dtype == b.dtype and a.shape == b.shape
        assert a.tolist() == b.tolist() if a.dtype == object else a.tobytes() == b.tobytes()
        if dtype in _AS_IS and not content and count == int(np.prod(dims)):
            expected = np.array(list(getattr(tp, _TYPED_FIELD[dtype])), dtype=_AS_IS[dtype]).reshape(dims)
            assert b.shape == expected.shape and b.tobytes() == expected.tobytes()


_model_specs = st.tuples(st.sampled_from(["half", "", "m" * 300]), st.sampled_from(["", "serving_default", "s" * 300]),
                         st.sampled_from([None, "version", "label"]), st.integers(0, 3),
                         st.sampled_from(["", "stable", "l" * 300]))


@settings(max_examples=200, deadline=None)
@given(specs=st.lists(_model_specs, min_size=1, max_size=5))
def test_kept_model_specs_read_as_fresh_ones(specs):
    """spec_from_proto keeps a spec that passed by its bytes: specs read one after another, kept,
    read as each read alone (what its uncached reading gives), and a refused one is refused every time."""
    from gateway._proto.tensorflow_serving.apis import model_pb2

    protos = []
    for name, signature, choice, version, label in specs:
        ms = model_pb2.ModelSpec(name=name, signature_name=signature)
        if choice == "version":
            ms.version.value = version
        elif choice == "label":
            ms.version_label = label
        protos.append(ms)
    protocodec._specs.clear()
    for ms in protos + protos:
        want = _outcome(protocodec._spec_from_proto, ms)
        assert _outcome(protocodec.spec_from_proto, ms) == want
        assert _outcome(protocodec.spec_from_proto, model_pb2.ModelSpec.FromString(ms.SerializeToString())) == want


@pytest.mark.parametrize("v2", ["FP32", "INT64", "BOOL", "FP16", "BYTES"])
@pytest.mark.parametrize("shape", [(), (0,), (2, 2)])
@pytest.mark.parametrize("content", [False, True])
def test_tensor_proto_written_into_an_answer_entry_is_the_one_copied_in(v2, shape, content):
    """Predict writes each output into the answer's map entry (``into``): the same bytes as a
    TensorProto built alone and copied in; a scalar keeps a present, empty tensor_shape."""
    from gateway._proto.tensorflow_serving.apis import predict_pb2

    size = int(np.prod(shape))
    arr = np.array([b"a"] * size, dtype=object).reshape(shape) if v2 == "BYTES" else \
        np.arange(size).astype({"FP32": np.float32, "INT64": np.int64, "BOOL": np.bool_, "FP16": np.float16}[v2]).reshape(shape)
    alone = protocodec.tensor_to_proto(arr, v2, content)
    copied, written = predict_pb2.PredictResponse(), predict_pb2.PredictResponse()
    copied.outputs["y"].CopyFrom(alone)
    protocodec.tensor_to_proto(arr, v2, content, into=written.outputs["y"])
    assert written.SerializeToString() == copied.SerializeToString()
    assert alone.HasField("tensor_shape") and len(alone.tensor_shape.dim) == len(shape)


def test_loads_keeps_whole_surrogate_pairs_and_escaped_backslashes():
    assert jsonio.loads(b'{"a": ["\\ud83d\\ude00", "x\\\\ud800"], "b": NaN}')["a"] == ["\U0001f600", "x\\ud800"]


def test_error_envelope_never_fails_to_render():
    # a lone surrogate (text no bytes decode to) is written as its surrogatepass bytes, as a string
    # of those bytes would be by rapidjson (no validation)
    status, body = errors.http_error(GatewayError(ErrorKind.INVALID_ARGUMENT, "bad \ud800"))
    assert (status, body) == (400, b'{\n    "error": "bad \xed\xa0\x80"\n}')


def test_a_path_outside_v1_is_libevents_404_page():
    # evhttp_server.cc: not dispatched -> evhttp_send_error(req, HTTP_NOTFOUND, nullptr); libevent
    # http.c ERR_FORMAT with the reason phrase, sent as text/html; charset=ISO-8859-1
    err = errors.PageError(ErrorKind.NOT_FOUND, "Not found: GET /index")
    assert errors.http_error(err) == (
        404, b"<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n</HEAD><BODY>\n<H1>Not Found</H1>\n</BODY></HTML>\n")
    r = errors.Rendering().http(err)
    assert (r.status, r.content_type) == (404, "text/html; charset=ISO-8859-1")


@pytest.mark.parametrize("values", [
    [1.0, 2.5], [3.4028234663852886e38, -3.4028234663852886e38], [3.4028235e38], [3.4028236e38, 1.0], [1e39],
    [-1e300, 2.0], [float("nan"), 1e39], [[1.5, 2.5], [3.5, 1e40]], [1, 2, 3], list(range(40)),
    [1e39] * 33, [],
])
def test_float32_values_past_its_range_become_inf_without_a_warning(values, recwarn):
    """A float32 input reads numbers past float32's range as inf, as TF's cast makes them, without a
    numpy warning, whichever way (a short list checked in Python, a longer one under errstate)."""
    got = codec.to_array(values, "FP32", bools=False, within=True)
    with np.errstate(over="ignore"):
        expected = np.asarray(values, dtype=np.float64).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


_NUMBER = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e39, 1e39),
                    st.integers(-(2**70), 2**70), st.integers(-(2**25), 2**25), st.sampled_from([2**53 + 1, -(2**60) - 1]))


@settings(max_examples=800, deadline=None)
@given(st.one_of(st.lists(_NUMBER, min_size=1, max_size=40),
                 st.lists(st.lists(_NUMBER, min_size=2, max_size=2), min_size=1, max_size=3),
                 st.lists(st.one_of(_NUMBER, st.text(max_size=2), st.none()), min_size=1, max_size=4)))
def test_a_float32_input_reads_numbers_as_tf_servings_walk_does(values):
    """numpy's reading and array('f') (flat lists up to _SHORT) give the exact walk's array, itself
    TF Serving's reading (each number a double, then cast to float: ints past 2**53 round twice),
    or leave the list to the walk's error; never a numpy warning."""
    outcomes = []
    for bools in (False, True):  # True: the exact walk
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                got = codec.to_array(values, "FP32", "x", bools=bools, within=True)
                outcomes.append(("ok", got.dtype, got.shape, got.tobytes()))
            except GatewayError as e:
                outcomes.append(("error", str(e)))
    assert outcomes[0] == outcomes[1]


def test_ints_past_2_53_are_read_as_doubles_first():
    big = 2**53 + 2**29 + 1  # as a double: 2**53 + 2**29 + 2 ... then to float: not int64 -> float32's rounding
    for values in ([big], [big] * 40, [[big, 1]]):
        got = codec.to_array(values, "FP32", bools=False, within=True)
        assert got.reshape(-1)[0] == np.float32(float(big))


_FLOAT32 = st.floats(width=32, allow_nan=False)
_SHAPES = st.lists(st.integers(1, 4), max_size=3).map(tuple)


@settings(max_examples=400, deadline=None)
@given(st.text(min_size=1, max_size=20), st.sampled_from(["FP32", "FP64"]), _SHAPES, st.data(),
       st.text(max_size=30), st.one_of(st.none(), st.integers(0, 2**40), st.just("")), st.text(max_size=20))
def test_a_predict_answer_written_as_bytes_is_protobufs_message(alias, v2, shape, data, model, version, signature):
    """``protocodec.predict_answer`` gives, byte for byte, the PredictResponse Predict builds for the
    same output and model spec (tensor_to_proto into outputs[alias], model_spec into model_spec)."""
    size = int(np.prod(shape))
    values = data.draw(st.lists(_FLOAT32 if v2 == "FP32" else st.floats(allow_nan=False), min_size=size,
                                max_size=size))
    arr = np.array(values, dtype=np.float32 if v2 == "FP32" else np.float64).reshape(shape)
    spec = (model, version, signature)
    built = predict_pb2.PredictResponse()
    protocodec.model_spec(*spec, into=built.model_spec)
    protocodec.tensor_to_proto(arr, v2, into=built.outputs[alias])
    for _ in range(2):  # written, then from the kept parts
        assert protocodec.predict_answer(alias, arr, v2, spec) == built.SerializeToString()


def test_a_predict_answer_is_written_only_for_float_outputs_with_values():
    spec = ("m", 1, "serving_default")
    assert protocodec.predict_answer("y", np.zeros((2, 0), np.float32), "FP32", spec) is None
    assert protocodec.predict_answer("y", np.arange(3, dtype=np.int32), "INT32", spec) is None
    assert protocodec.predict_answer("y", np.arange(3, dtype=np.float16), "FP16", spec) is None
    answer = predict_pb2.PredictResponse.FromString(
        protocodec.predict_answer("y", np.array([3.5, 4.0], np.float32), "FP32", spec))
    assert list(answer.outputs["y"].float_val) == [3.5, 4.0] and answer.model_spec.version.value == 1
