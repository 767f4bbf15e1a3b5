"""GRPS codec, mapping rules, error table and settings: pure functions, no Triton."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.core.errors import ErrorKind, GatewayError, check_table
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor, TensorSpec
from gateway.dialects.grps import codec, config, errors, mapping

ECHO = ModelMetadata("grps_echo", ("1",), "python",
                     (TensorSpec("text", "BYTES", (-1,), True), TensorSpec("in1", "INT32", (-1, -1), True)),
                     (TensorSpec("text_out", "BYTES", (-1,)), TensorSpec("out1", "INT32", (-1, -1))))
LLM = ModelMetadata("tiny_llm", ("1",), "python",
                    (TensorSpec("text_input", "BYTES", (-1, 1)), TensorSpec("max_tokens", "INT32", (-1, 1)),
                     TensorSpec("stream", "BOOL", (-1, 1), True)),
                    (TensorSpec("text_output", "BYTES", (-1, -1)),), max_batch_size=8, decoupled=True)
CFG = config.GrpsSettings()


def test_error_table_renders_every_kind():
    check_table(errors.TABLE, "grps errors.TABLE")
    assert errors.render(GatewayError(ErrorKind.NOT_FOUND, "Not found model: m")) == (404, "Not found model: m")
    assert errors.render(GatewayError(ErrorKind.INVALID_ARGUMENT, "x"))[0] == 400
    assert errors.render(GatewayError(ErrorKind.UNAVAILABLE, "x"))[0] == 503


def test_unexpected_exceptions_become_internal_without_details():
    err = errors.from_exception(ZeroDivisionError("secret"))
    assert err.kind is ErrorKind.INTERNAL and "secret" not in err.message


@pytest.mark.parametrize(
    "v2,dt,values",
    [("UINT8", "DT_UINT8", [0, 255]), ("INT8", "DT_INT8", [-128, 127]), ("INT16", "DT_INT16", [-3, 3]),
     ("INT32", "DT_INT32", [-(2**31), 2**31 - 1]), ("INT64", "DT_INT64", [-(2**63), 2**63 - 1]),
     ("FP16", "DT_FLOAT16", [0.5, -1.0]), ("FP32", "DT_FLOAT32", [0.25, 1e30]), ("FP64", "DT_FLOAT64", [1e-300, 2.5]),
     ("BYTES", "DT_STRING", ["a", "ü"])],
)
def test_generic_tensor_round_trip_for_every_dtype(v2, dt, values):
    t = Tensor.from_flat("t", v2, [2, 1], values)
    g = codec.tensor_to_generic(t, codec.GrpsMessage().gtensors.tensors.add())
    assert codec.grps_pb2.DataType.Name(g.dtype) == dt and list(g.shape) == [2, 1]
    back = codec.tensor_from_generic(g)
    assert back.datatype == v2 and back.shape == (2, 1)
    assert back.data.tolist() == t.data.tolist()


def test_json_dispatch_flat_double_alias_and_camel_case():
    doc = {"gtensors": {"tensors": [{"name": "a", "dtype": 8, "shape": [2], "flat_double": [1, 2]},
                                    {"name": "b", "dtype": "DT_INT64", "shape": [1], "flatInt64": ["5"]}]}}
    msg, nd = codec.message_from_json(doc)
    a, b = (codec.tensor_from_generic(g) for g in msg.gtensors.tensors)
    assert nd is None and a.data.tolist() == [1.0, 2.0] and b.data.tolist() == [5]
    out = codec.message_to_json(msg, pretty=False)
    assert b'"flat_float64":[1,2]' in out and b'"flat_int64":["5"]' in out and b"flat_double" not in out


@pytest.mark.parametrize(
    "body,text",
    [(b"[1]", "must be a JSON object"), (b"{", "Parse json failed")],
)
def test_load_json_errors(body, text):
    with pytest.raises(GatewayError, match=text):
        codec.load_json(body)


def test_dtype_inferred_from_the_one_filled_field_and_missing_otherwise():
    g = codec.grps_pb2.GenericTensor(name="x", shape=[2], flat_float32=[1, 2])
    assert codec.tensor_from_generic(g).datatype == "FP32"
    with pytest.raises(GatewayError, match="dtype is missing"):
        codec.tensor_from_generic(codec.grps_pb2.GenericTensor(name="x", shape=[0]))


def test_model_names_resolve_to_triton_models():
    def triton(name):
        t = mapping.resolve(name, cfg)
        return t.model, t.version

    cfg = config.GrpsSettings.model_validate({"models": {"your_model-1.0.0": {"triton_model": "m", "triton_version": 3}}})
    assert triton("") == ("grps_echo", "1")
    assert triton("tiny_llm-1") == ("tiny_llm", "1")
    assert triton("my-model") == ("my-model", "")
    assert triton("your_model-1.0.0") == ("m", "3")


def test_str_data_to_a_batching_llm_adds_max_tokens_and_stream():
    target = mapping.resolve("tiny_llm-1", CFG)
    req = mapping.to_request(codec.GrpsMessage(str_data="hi"), None, LLM, target, CFG, streaming=True)
    got = {t.name: (t.datatype, t.shape, t.data.reshape(-1)[0]) for t in req.inputs}
    assert got == {"text_input": ("BYTES", (1, 1), b"hi"), "max_tokens": ("INT32", (1, 1), 64),
                   "stream": ("BOOL", (1, 1), True)}


def test_mismatches_say_what_the_model_expects():
    target = mapping.resolve("grps_echo-1", CFG)
    with pytest.raises(GatewayError, match=r"has no FP32 input for ndarray; it expects: text BYTES \[-1\]"):
        mapping.to_request(codec.GrpsMessage(), np.zeros((1,), np.float32), ECHO, target, CFG, False)
    msg = codec.GrpsMessage()
    msg.gtensors.tensors.add(name="a", dtype=4, shape=[1], flat_int32=[1])
    msg.gtensors.tensors.add(dtype=4, shape=[1], flat_int32=[1])
    with pytest.raises(GatewayError, match="all have name or all have no name"):
        mapping.to_request(msg, None, ECHO, target, CFG, False)


def test_responses_map_back_by_request_kind():
    resp = InferResponse("grps_echo", "1", [Tensor.from_flat("text_out", "BYTES", [1], [b"\xff"])])
    msg, _ = mapping.from_response(resp, "bin_data", ECHO, mapping.ModelRule())
    assert msg.bin_data == b"\xff" and msg.status.code == 200
    msg, _ = mapping.from_response(resp, "gmap", ECHO, mapping.ModelRule())
    assert dict(msg.gmap.s_b) == {"text_out": b"\xff"}
    with pytest.raises(GatewayError, match="not UTF-8"):  # no GenericTensor holds it: that fails first
        mapping.from_response(resp, "ndarray", ECHO, mapping.ModelRule(), return_ndarray=True)
    text = InferResponse("grps_echo", "1", [Tensor.from_flat("text_out", "BYTES", [1], [b"hi"])])
    with pytest.raises(GatewayError, match="^NDArray only support float32$"):
        mapping.from_response(text, "ndarray", ECHO, mapping.ModelRule(), return_ndarray=True)


def _status(code: int, msg: str) -> str:
    """GRPS's SetStatus(code, msg, FAILURE) as Pb2json writes it (add_whitespace: one space a level)."""
    msg = msg.replace("<", "\\u003c").replace(">", "\\u003e")  # protobuf's JSON escapes (json_escaping.cc)
    return f'{{\n "status": {{\n  "code": {code},\n  "msg": "{msg}",\n  "status": "FAILURE"\n }}'


# GRPS's C++ handler (server/cpp_server/src/handler/grps_handler.cc, PredictByHttp + ParseNDArray):
# a number is a scalar, an array goes through ParseNDArrayShapeAndVal (depth first, first refusal
# wins), anything else is "NDArray is not number or array."
NDARRAY_REFUSED = [
    (None, "NDArray is not number or array."),
    ("1", "NDArray is not number or array."),
    (True, "NDArray is not number or array."),
    ({"a": 1}, "NDArray is not number or array."),
    ([], "Parse NDArray failed: NDArray some array size <= 0."),
    ([[]], "Parse NDArray failed: NDArray some array size <= 0."),
    ([[1, 2], [3]], "Parse NDArray failed: NDArray some array size not match."),
    ([[1, 2], [3, 4], [5]], "Parse NDArray failed: NDArray some array size not match."),
    ([[1, "a"]], "Parse NDArray failed: NDArray some array is not a number or array."),
    ([[1.5, True]], "Parse NDArray failed: NDArray some array is not a number or array."),  # numpy: 1.0
    ([1, None], "Parse NDArray failed: NDArray some array is not a number or array."),
    ([[1, {"x": 1}]], "Parse NDArray failed: NDArray some array is not a number or array."),
    # the first refusal of a depth-first walk
    ([[1, 2], [], [3]], "Parse NDArray failed: NDArray some array size <= 0."),
    ([[1, "a"], [2]], "Parse NDArray failed: NDArray some array is not a number or array."),
    ([[1], [2, 3], ["a"]], "Parse NDArray failed: NDArray some array size not match."),
    ([[[1]], [[]]], "Parse NDArray failed: NDArray some array size <= 0."),  # emptiness is checked first
    ([[[1, 2]], [[]]], "Parse NDArray failed: NDArray some array size <= 0."),
    ([[[1]], [[], []]], "Parse NDArray failed: NDArray some array size not match."),
]


@pytest.mark.parametrize("value,msg", NDARRAY_REFUSED)
def test_ndarray_refusals_are_the_cpp_servers_whole_answer(value, msg):
    with pytest.raises(GatewayError) as e:
        codec.message_from_json({"ndarray": value})
    resp = errors.Rendering(CFG).http(e.value)
    assert resp.status == 200 and resp.content_type == "application/json"
    assert resp.body.decode() == _status(400, "Bad Request, err: " + msg) + "\n}\n"


@pytest.mark.parametrize(
    "value,shape",
    [(2.5, ()), (7, ()), ([1], (1,)), ([[1, 2.5]], (1, 2)), ([[1], 2], (2, 1)),  # GRPS: shape [2,1], [1, 2]
     ([[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [10, 11, 12]]], (2, 2, 3)), ([2**70, 1e39], (2,))],
)
def test_ndarrays_grps_reads_are_read_as_it_reads_them(value, shape):
    _, arr = codec.message_from_json({"ndarray": value})
    assert arr.dtype == np.float32 and arr.shape == shape
    with np.errstate(over="ignore"):  # 1e39: inf in FP32, as C++'s GetFloat gives
        flat = np.asarray(value if shape != (2, 1) else [1, 2], dtype=np.float64).astype(np.float32).reshape(shape)
    assert np.array_equal(arr, flat)


def test_a_bool_among_numbers_is_found_with_the_body_known_and_not():
    for body in (b'{"ndarray": [[1.5, true]]}', None):
        with pytest.raises(GatewayError, match="NDArray some array is not a number or array"):
            codec.message_from_json({"ndarray": [[1.5, True]]}, body)
    assert codec.message_from_json({"ndarray": [[1.5, 1]]}, b'{"ndarray": [[1.5, 1]]}')[1].tolist() == [[1.5, 1.0]]


def test_an_ndarray_mixing_numbers_and_arrays_that_fill_no_shape_is_refused_in_the_gateways_words():
    # GRPS reads [1, [2, 3]] as shape [2, 2] with 3 values and leaves the refusal to its converter
    with pytest.raises(GatewayError, match=r"^NDArray mixes numbers and arrays at one depth: 3 values do not "
                                           r"fill shape \[2, 2\]$"):
        codec.message_from_json({"ndarray": [1, [2, 3]]})


def test_an_empty_json_body_is_not_json():
    with pytest.raises(GatewayError, match=r"^Parse json failed\.$"):
        codec.decode_predict(b"")


TWO = [Tensor.from_flat("out1", "INT32", [1], [1]), Tensor.from_flat("out2", "FP32", [1], [2.0])]


@pytest.mark.parametrize(
    "outputs,kind,rule,code,body",
    [
        # GenNDArrayFromGrpsMsg's refusals, answered 500 with str_data/bin_data/gtensors cleared
        (TWO, "gtensors", {}, 500, _status(500, "NDArray only support one tensor") + "\n}\n"),
        (TWO[:1], "ndarray", {}, 500, _status(500, "NDArray only support float32") + "\n}\n"),
        ([Tensor.from_flat("text_out", "BYTES", [1], [b"hi"])], "str_data", {}, 500,
         _status(500, "No tensors in output. Cannot convert to ndarray.") + "\n}\n"),
        (TWO, "ndarray", {"ndarray_output": "nope"}, 500,
         _status(500, "No tensors in output. Cannot convert to ndarray.") + "\n}\n"),
        ([Tensor.from_flat("out2", "FP32", [0], [])], "ndarray", {}, 500,
         _status(500, "NDArray flat float size <= 0") + "\n}\n"),
        # a gmap answer: GRPS clears str_data, bin_data and gtensors, not gmap
        ([Tensor.from_flat("text_out", "BYTES", [1], [b"hi"])], "gmap", {}, 500,
         _status(500, "No tensors in output. Cannot convert to ndarray.")
         + ',\n "gmap": {\n  "s_s": {\n   "text_out": "hi"\n  }\n }\n}\n'),
    ],
)
def test_return_ndarray_refusals_are_the_cpp_servers_whole_answer(outputs, kind, rule, code, body):
    meta = ModelMetadata("m", ("1",), "python", (), tuple(TensorSpec(t.name, t.datatype, (-1,)) for t in outputs))
    with pytest.raises(GatewayError) as e:
        mapping.from_response(InferResponse("m", "1", outputs), kind, meta, mapping.ModelRule(**rule),
                              return_ndarray=True)
    resp = errors.Rendering(CFG).http(e.value)
    assert (resp.status, resp.content_type, resp.body.decode()) == (200, "application/json", body)
    resp = errors.Rendering(config.GrpsSettings(http_error_status=True)).http(e.value)
    assert (resp.status, resp.body.decode()) == (code, body)


def test_return_ndarray_takes_the_one_fp32_output_or_the_configured_one():
    resp = InferResponse("m", "1", TWO)
    meta = ModelMetadata("m", ("1",), "python", (), (TensorSpec("out1", "INT32", (-1,)), TensorSpec("out2", "FP32", (-1,))))
    _, arr = mapping.from_response(resp, "gtensors", meta, mapping.ModelRule(ndarray_output="out2"), return_ndarray=True)
    assert arr.tolist() == [2.0]
    _, arr = mapping.from_response(InferResponse("m", "1", TWO[1:]), "ndarray", meta, mapping.ModelRule(),
                                   return_ndarray=True)
    assert arr.tolist() == [2.0]


def test_errors_go_with_http_200_by_default_and_refusals_before_grps_keep_their_status():
    """The C++ server never sets the HTTP status of its predict, health or metadata answers (brpc's
    default, 200); brpc refuses before GRPS with real ones (no route: 404, body too large: 413)."""
    err = GatewayError(ErrorKind.INVALID_ARGUMENT, "Parse json failed.")
    assert errors.Rendering(CFG).http(err).status == 200
    assert errors.Rendering(config.GrpsSettings(http_error_status=True)).http(err).status == 400
    assert errors.Rendering(CFG).http(GatewayError(ErrorKind.NOT_FOUND, "no route"), status=404).status == 404
    assert errors.Rendering(CFG).http(GatewayError(ErrorKind.INVALID_ARGUMENT, "too large"), status=413).status == 413
    assert errors.Rendering(CFG).http(errors.Rendering(CFG).overloaded(3)).status == 503


def test_the_defaults_are_the_cpp_servers_and_the_shipped_config_keeps_them():
    import yaml

    from tests.support import ROOT

    assert (CFG.start_online, CFG.http_error_status) == (False, False)
    shipped = yaml.safe_load((ROOT / "gateway.yaml").read_text())["dialects"]["grps"]
    assert (shipped["start_online"], shipped["http_error_status"]) == (False, False)


def test_model_metadata_names_are_inference_yml_names():
    """GRPS's ModelMetadata compares ``str_data`` with inference.yml's ``models[].name``: the bare name
    (``your_model``, what its template client sends), never ``name-version``."""
    cfg = config.GrpsSettings.model_validate({"models": {
        "your_model-1.0.0": {"triton_model": "grps_echo", "triton_version": 1}, "plain": {"triton_model": "m"},
        "my-model": {"str_input": "text"}}})
    name, version, target = mapping.model_entry("your_model", cfg)
    assert (name, version, target.model, target.version) == ("your_model", "1.0.0", "grps_echo", "1")
    name, version, target = mapping.model_entry("plain", cfg)
    assert (name, version, target.model, target.version) == ("plain", "", "m", "")
    name, version, target = mapping.model_entry("my-model", cfg)  # "model" is no version: the key is the name
    assert (name, version, target.model, target.version) == ("my-model", "", "my-model", "")
    # any other name is a Triton model's, looked up as it is: "your_model-1.0.0" and "tiny_llm-1" name none
    assert mapping.model_entry("your_model-1.0.0", cfg)[2].model == "your_model-1.0.0"
    target = mapping.model_entry("tiny_llm-1", cfg)[2]
    assert (target.model, target.version) == ("tiny_llm-1", "")
    assert mapping.model_entry("", cfg) is None and mapping.model_entry("x" * 100_000, cfg) is None


def test_an_octet_stream_answer_decoded_as_views_is_written_as_it_came():
    """GRPS's octet-stream predict decodes Triton's answer with views (the BYTES element not copied):
    the one element is the answer as it is; two are joined; an answer that falls to gtensors (the
    configured output is not BYTES) writes a viewed BYTES output as text like a copied one."""
    wire = memoryview(b"\x00" + b"abc" * 30_000)
    element = np.empty(1, dtype=object)
    element[0] = wire[1:]
    one = Tensor("text_out", element, "BYTES")
    _, raw = mapping.from_response(InferResponse("grps_echo", "1", [one]), "bin_data", ECHO, mapping.ModelRule(), raw=True)
    assert type(raw) is memoryview and raw.obj is wire.obj and bytes(raw) == b"abc" * 30_000
    two = np.empty(2, dtype=object)
    two[0], two[1] = wire[1:4], wire[4:7]
    _, raw = mapping.from_response(InferResponse("grps_echo", "1", [Tensor("text_out", two, "BYTES")]), "bin_data",
                                   ECHO, mapping.ModelRule(), raw=True)
    assert raw == b"abcabc"
    fp = Tensor("score", np.zeros(1, np.float32), "FP32")
    msg, raw = mapping.from_response(InferResponse("grps_echo", "1", [one, fp]), "bin_data", ECHO,
                                     mapping.ModelRule(str_output="score"), raw=True)
    assert raw is None and msg.gtensors.tensors[0].flat_string == ["abc" * 30_000]


def test_settings_are_validated():
    with pytest.raises(ValidationError, match="nope"):
        config.GrpsSettings.model_validate({"nope": 1})
    with pytest.raises(ValidationError, match="ctrl_mode"):
        config.GrpsSettings.model_validate({"streaming": {"ctrl_mode": "smoke"}})
    with pytest.raises(ValidationError, match="start_online"):  # a string is not a boolean
        config.GrpsSettings.model_validate({"start_online": "false"})
    assert config.GrpsSettings.model_validate({"start_online": False}).start_online is False


def test_an_ndarray_protobuf_message_is_a_400_not_a_crash():
    # GrpsMessage's `ndarray` oneof is an empty NDArrayData ("HTTP only"): over gRPC there is nothing
    # to feed, so it is a payload the gateway cannot use (400), as GRPS refuses a message its
    # converter cannot use, not an AttributeError (500 and a stack trace)
    msg = codec.GrpsMessage()
    msg.ndarray.SetInParent()
    for meta in (ECHO, LLM):
        with pytest.raises(GatewayError) as e:
            mapping.to_request(msg, None, meta, mapping.resolve("grps_echo-1", CFG), CFG, False)
        assert e.value.kind is ErrorKind.INVALID_ARGUMENT and e.value.message == mapping.NDARRAY_OVER_GRPC
        assert errors.render(e.value) == (400, "Bad Request, err: " + mapping.NDARRAY_OVER_GRPC)


@pytest.mark.parametrize(("request_map", "value", "answer_map"), [
    ("s_b", b"plain", "s_b"),  # valid UTF-8, still in s_b: the client reads s_b
    ("s_b", b"\xff", "s_b"),
    ("s_s", b"plain", "s_s"),
    ("s_s", b"\xff", "s_b"),  # s_s is a proto3 string: bytes that are not UTF-8 cannot go there
    (None, b"plain", "s_s"),  # no string in the request (only s_i32): s_s when UTF-8, else s_b
    (None, b"\xff", "s_b"),
])
def test_gmap_bytes_answer_in_the_map_the_request_used(request_map, value, answer_map):
    req = codec.GrpsMessage()
    req.gmap.s_i32["n"] = 1
    if request_map == "s_b":
        req.gmap.s_b["text"] = b"x"
    elif request_map == "s_s":
        req.gmap.s_s["text"] = "x"
    assert codec.request_bytes_map(req) == request_map
    resp = InferResponse("grps_echo", "1", [Tensor.from_flat("text_out", "BYTES", [1], [value])])
    msg, _ = mapping.from_response(resp, "gmap", ECHO, mapping.ModelRule(), bytes_map=codec.request_bytes_map(req))
    other = "s_s" if answer_map == "s_b" else "s_b"
    got = getattr(msg.gmap, answer_map)["text_out"]
    assert (got if isinstance(got, bytes) else got.encode()) == value and not len(getattr(msg.gmap, other))


def test_gmap_with_both_string_maps_falls_back_to_the_utf8_rule():
    req = codec.GrpsMessage()
    req.gmap.s_s["a"] = "x"
    req.gmap.s_b["b"] = b"y"
    assert codec.request_bytes_map(req) is None
    assert codec.request_bytes_map(codec.GrpsMessage(str_data="x")) is None


def test_the_shipped_config_serves_the_seed_model_name():
    # GRPS's own example: curl ... 'http://ip:port/grps/v1/infer/predict?model=your_model-1.0.0'
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[3]
    section = yaml.safe_load((root / "gateway.yaml").read_text())["dialects"]["grps"]
    section.pop("triton_models", None)  # the settings layer's key, common to every dialect
    target = mapping.resolve("your_model-1.0.0", config.GrpsSettings.model_validate(section))
    assert (target.model, target.version) == ("grps_echo", "1")
    model = root / "model_repository" / target.model
    assert (model / target.version).is_dir()
    cfg = (model / "config.pbtxt").read_text()
    assert f'name: "{target.rule.str_input}"' in cfg and f'name: "{target.rule.str_output}"' in cfg


_FAST_DOCS = [
    {"gtensors": {"tensors": [{"name": "in1", "dtype": "DT_INT32", "shape": [3, 2]}]}},
    {"model": "m-1", "gtensors": {"names": ["x"], "tensors": [{"name": "a", "dtype": "DT_FLOAT32", "shape": []},
                                                               {"name": "b", "dtype": "DT_STRING"}]}},
    {"gtensors": {}},
    {"gtensors": {"tensors": []}, "extra": 1},
    {"model": "m", "gtensors": {"tensors": [{"shape": [4294967295, 0]}]}},
]
_SLOW_DOCS = [  # json_format decides: each is refused or read in a way the direct build does not take
    {"gtensors": {"tensors": [{"name": "a", "dtype": "DT_NOPE"}]}},
    {"gtensors": {"tensors": [{"name": "a", "dtype": 7}]}},
    {"gtensors": {"tensors": [{"name": "a", "shape": [True]}]}},
    {"gtensors": {"tensors": [{"name": "a", "shape": [-1]}]}},
    {"gtensors": {"tensors": [{"name": "a", "shape": [1 << 32]}]}},
    {"gtensors": {"tensors": [{"name": 5}]}},
    {"gtensors": {"tensors": [{"name": "a", "unknown": 1}]}},
    {"model": 3, "gtensors": {}},
    {"str_data": "x", "gtensors": {}},
    {"gtensors": {"tensors": {"name": "a"}}},
]


@pytest.mark.parametrize("doc", _FAST_DOCS + _SLOW_DOCS)
def test_plain_gtensors_are_built_as_json_format_builds_them(doc):
    """The direct build of a plain gtensors request is json_format's message, and it leaves every
    other document (refused or not) to json_format."""
    import copy

    from google.protobuf import json_format

    try:
        want = json_format.ParseDict(copy.deepcopy(doc), codec.GrpsMessage(), ignore_unknown_fields=True)
    except json_format.ParseError:
        want = None
    got = codec._plain_gtensors(copy.deepcopy(doc))
    if doc in _FAST_DOCS:
        assert got is not None and got == want and got.WhichOneof("data_oneof") == want.WhichOneof("data_oneof")
    else:
        assert got is None


_VALUES = st.lists(st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(width=64),
                             st.sampled_from([2**1023, 10**400, 3.4028234663852886e38, 3.4028235677973366e38]),
                             st.booleans(), st.none(), st.text(max_size=2)), max_size=8)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(values=_VALUES, dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.uint32]))
def test_short_numeric_lists_are_judged_as_the_numpy_check_judges_them(values, dtype):
    """Short flat lists are checked value by value: the same verdict as the numpy check of long ones."""
    assert codec.short_values_fit(values, np.dtype(dtype)) == codec._plain_long(values, np.dtype(dtype))
