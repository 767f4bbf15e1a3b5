"""TF Serving's own JSON codec tests, ported: tensorflow_serving/util/json_tensor_test.cc.

Each row names the TEST it restates (``Suite.Test[/n]`` for the n-th request inside one TEST);
the request and the expected answer are restated from the C++ test, not copied. These cases need
no Triton: they run the gateway's codec (``jsonio.loads`` -> ``codec.signature_name`` ->
``codec.parse_predict`` / ``codec.parse_examples``, and the writers) with the signature's input
dtypes as the test's TensorInfo map. Where TF compares TensorProtos, the rows compare dtype, shape
and values; where it compares JSON, the rows compare the gateway's bytes (or the parsed document
when TF's CompareJson compares values). Error rows check the status code and the substring TF's
test checks, plus the full text where TF Serving's source fixes it.

Cases that cannot be restated (counted in docs/tfserving.md): complex64 outputs (Triton has no
complex dtype; the row below uses DT_HALF, the other tensor type JSON cannot write) and
``MakeJsonFromTensors.StatusOK`` (an internal helper with no client-visible answer).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import TensorSpec
from gateway.dialects.tfserving import codec, errors, jsonio
from gateway.dialects.tfserving.mapping import Signature

NAN, INF = float("nan"), float("inf")
INT, STR, FLT, DBL = "INT32", "BYTES", "FP32", "FP64"


def _sig(infomap: dict[str, str]) -> Signature:
    ins = tuple((n, TensorSpec(n, t, (-1,))) for n, t in infomap.items())
    return Signature("serving_default", "predict", "m", 0, ins, (("y", TensorSpec("y", "FP32", (-1,))),))


def _predict(body: str | bytes, infomap: dict[str, str]):
    raw = body.encode() if isinstance(body, str) else body
    doc = jsonio.loads(raw)
    if not isinstance(doc, dict):
        raise GatewayError(ErrorKind.INVALID_ARGUMENT, "Is not object")
    sig = codec.signature_name(doc)
    bools = codec.may_hold_bools(raw)
    got = _outcome(doc, infomap, bools, False)
    # the small-body path (the size limit checked after numpy's conversion) reads every case alike
    _same_outcome(got, _outcome(doc, infomap, bools, True))
    if isinstance(got, GatewayError):
        raise got
    return (sig, *got)


def _outcome(doc, infomap, bools: bool, within: bool):
    try:
        return codec.parse_predict(doc, _sig(infomap), bools, within)
    except GatewayError as e:
        return e


def _same_outcome(a, b) -> None:
    if isinstance(a, GatewayError) or isinstance(b, GatewayError):
        assert (type(a), getattr(a, "kind", None), str(a)) == (type(b), getattr(b, "kind", None), str(b))
        return
    assert a[1] == b[1] and list(a[0]) == list(b[0])
    for name, arr in a[0].items():
        other = b[0][name]
        assert arr.dtype == other.dtype and arr.shape == other.shape
        assert arr.tobytes() == other.tobytes() if arr.dtype != object else arr.tolist() == other.tolist()


def _same(got: np.ndarray, dtype, shape, values) -> None:
    assert got.dtype == np.dtype(dtype), got.dtype
    assert got.shape == shape, got.shape
    flat = got.reshape(-1).tolist()
    assert len(flat) == len(values)
    for g, w in zip(flat, values, strict=True):
        if isinstance(w, float) and math.isnan(w):
            assert math.isnan(g)
        elif isinstance(w, float):
            assert g == np.float32(w) if dtype == np.float32 else g == w
            assert math.copysign(1, g) == math.copysign(1, w)  # -0 stays -0
        else:
            assert g == w


def _deep(prefix: str) -> str:
    return prefix + "[" * 500000 + "]" * 500000 + "}"


# -- FillPredictRequestFromJson: accepted requests ------------------------------------------------
# (case, infomap, body, row format?, signature name, {name: (dtype, shape, values)})
ACCEPTED = [
    ("JsontensorTest.SingleUnnamedTensor", {"default": INT}, '{"instances": [[1,2],[3,4],[5,6]]}', True, "",
     {"default": (np.int32, (3, 2), [1, 2, 3, 4, 5, 6])}),
    ("JsontensorTest.DeeplyNestedWellFormed", {"default": INT}, _deep('{"instances":[1], "nested":'), True, "",
     {"default": (np.int32, (1,), [1])}),
    ("JsontensorTest.MixedInputForFloatTensor", {"default": FLT}, '{"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}',
     True, "", {"default": (np.float32, (7,), [1.0, 2.0, 3.0, 4.0, 5.003, 0.007, 0.0])}),
    ("JsontensorTest.MixedInputForDoubleTensor", {"default": DBL}, '{"instances": [1.0, 2, 3, 4, 0.662, 0, 0.0]}',
     True, "", {"default": (np.float64, (7,), [1.0, 2.0, 3.0, 4.0, 0.662, 0.0, 0.0])}),
    ("JsontensorTest.FloatTensorWithPrecisionLoss/1", {"default": FLT}, '{"instances": [1435774380]}', True, "",
     {"default": (np.float32, (1,), [1435774380.0])}),
    ("JsontensorTest.FloatTensorWithPrecisionLoss/2", {"default": FLT}, '{"instances": [1435774380.0]}', True, "",
     {"default": (np.float32, (1,), [1435774380.0])}),
    ("JsontensorTest.FloatTensorThatExceedsMaxReturnsInf/1", {"default": FLT}, '{ "instances": [1.79769e+308] }',
     True, "", {"default": (np.float32, (1,), [INF])}),
    ("JsontensorTest.FloatTensorThatExceedsMaxReturnsInf/2", {"default": FLT}, '{ "instances": [-1.79769e+308] }',
     True, "", {"default": (np.float32, (1,), [-INF])}),
    ("JsontensorTest.FloatTensorThatExceedsMinReturnsZero/1", {"default": FLT}, '{ "instances": [2.22507e-308] }',
     True, "", {"default": (np.float32, (1,), [0.0])}),
    ("JsontensorTest.FloatTensorThatExceedsMinReturnsZero/2", {"default": FLT}, '{ "instances": [-2.22507e-308] }',
     True, "", {"default": (np.float32, (1,), [-0.0])}),
    ("JsontensorTest.SingleUnnamedTensorWithSignature", {"default": INT},
     '{"signature_name": "predict_images", "instances": [[1,2]]}', True, "predict_images",
     {"default": (np.int32, (1, 2), [1, 2])}),
    ("JsontensorTest.TensorFromNonNullTerminatedBuffer", {"default": INT}, b'{"instances": [[1,2],[3,4],[5,6]]}',
     True, "", {"default": (np.int32, (3, 2), [1, 2, 3, 4, 5, 6])}),
    ("JsontensorTest.SingleUnnamedTensorBase64Scalars", {"default": STR},
     '{"instances": [ { "b64" : "aGVsbG8=" }, { "b64": "d29ybGQ=" } ]}', True, "",
     {"default": (object, (2,), [b"hello", b"world"])}),
    ("JsontensorTest.SingleUnnamedTensorBase64Lists", {"default": STR},
     '{"instances": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}', True, "",
     {"default": (object, (2, 1), [b"hello", b"world"])}),
    ("JsontensorTest.SingleNamedTensorBase64", {"default": STR},
     '{"instances": [{"default": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}]}', True, "",
     {"default": (object, (1, 2, 1), [b"hello", b"world"])}),
    ("JsontensorTest.MultipleNamedTensor", {"int_tensor": INT, "str_tensor": STR, "float_tensor": FLT,
                                            "dbl_tensor": DBL},
     '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"], "float_tensor": [1.0, NaN],'
     ' "dbl_tensor": [NaN]}, {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"],'
     ' "float_tensor": [2.0, Infinity], "dbl_tensor": [2.0]}]}', True, "",
     {"int_tensor": (np.int32, (2, 3, 2), [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2]),
      "str_tensor": (object, (2, 2), [b"foo", b"bar", b"baz", b"bat"]),
      "float_tensor": (np.float32, (2, 2), [1.0, NAN, 2.0, INF]),
      "dbl_tensor": (np.float64, (2, 1), [NAN, 2.0])}),
    ("JsontensorTest.SingleUnnamedTensorColumnarFormat/1", {"int_tensor": INT},
     '{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]]}}', False, "",
     {"int_tensor": (np.int32, (1, 3, 2), [1, 2, 3, 4, 5, 6])}),
    ("JsontensorTest.SingleUnnamedTensorColumnarFormat/2", {"int_tensor": INT},
     '{"inputs": [[[1,2],[3,4],[5,6]]]}', False, "", {"int_tensor": (np.int32, (1, 3, 2), [1, 2, 3, 4, 5, 6])}),
    ("JsontensorTest.MultipleNamedTensorColumnarFormat", {"int_tensor": INT, "str_tensor": STR, "bin_tensor": STR},
     '{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]], "str_tensor": ["foo", "bar"],'
     ' "bin_tensor": { "b64" : "aGVsbG8=" }}}', False, "",
     {"int_tensor": (np.int32, (1, 3, 2), [1, 2, 3, 4, 5, 6]), "str_tensor": (object, (2,), [b"foo", b"bar"]),
      "bin_tensor": (object, (), [b"hello"])}),
]


@pytest.mark.parametrize(("infomap", "body", "row", "signame", "expected"),
                         [pytest.param(*r[1:], id=r[0]) for r in ACCEPTED])
def test_fill_predict_request_from_json(infomap, body, row, signame, expected):
    sig, inputs, got_row = _predict(body, infomap)
    assert (sig, got_row) == (signame, row)
    assert set(inputs) == set(expected)
    for name, (dtype, shape, values) in expected.items():
        _same(inputs[name], dtype, shape, values)


# -- FillPredictRequestFromJson: refused requests -------------------------------------------------
_MULTI = {"int_tensor": INT, "str_tensor": STR}
# (case, infomap, body, kind, substring TF checks, full text from TF Serving's source or None)
REFUSED = [
    ("JsontensorTest.DeeplyNestedMalformed", {"default": INT}, _deep('{"signature_name":'),
     ErrorKind.INVALID_ARGUMENT, "key must be a string value", None),
    ("JsontensorTest.SingleUnnamedTensorErrors/1", {"default": INT}, "",
     ErrorKind.INVALID_ARGUMENT, "document is empty", "JSON Parse error: The document is empty"),
    ("JsontensorTest.SingleUnnamedTensorErrors/2", {"default": INT},
     '{"signature_name": 5, "instances": [[1,2],[3,4],[5,6,7]]}', ErrorKind.INVALID_ARGUMENT,
     "must be a string value", None),
    ("JsontensorTest.SingleUnnamedTensorErrors/3", {"default": INT},
     '{"instances": [[1,2],[3,4],[5,6,7]], "inputs": [[1,2],[3,4],[5,6,7]]}', ErrorKind.INVALID_ARGUMENT,
     "Not formatted correctly", None),
    ("JsontensorTest.SingleUnnamedTensorErrors/4", {"default": INT}, '{"instances": [[1,2],[3,4],[5,6,7]]}',
     ErrorKind.INVALID_ARGUMENT, "Expecting tensor size",
     "Failed to process element: 2 of 'instances' list. Error: INVALID_ARGUMENT: Expecting tensor size: 2 but got: 3"),
    ("JsontensorTest.SingleUnnamedTensorErrors/5", {"default": INT}, '{"instances": [[1,2],[3,4],[[5,6]]]}',
     ErrorKind.INVALID_ARGUMENT, "Expecting shape",
     "Failed to process element: 2 of 'instances' list. Error: INVALID_ARGUMENT: Expecting shape [2] but got: [1,2]"),
    ("JsontensorTest.SingleUnnamedTensorErrors/6", {"default": INT}, '{"instances": [1, [1]]}',
     ErrorKind.INVALID_ARGUMENT, "Expecting shape",
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: Expecting shape [] but got: [1]"),
    ("JsontensorTest.SingleUnnamedTensorErrors/7", {"default": INT}, '{"instances": [[1,2],["a", "b"]]}',
     ErrorKind.INVALID_ARGUMENT, "not of expected type",
     "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: "
     'JSON Value: "a" Type: String is not of expected type: int32'),
    ("JsontensorTest.MultipleNamedTensorErrors/1", _MULTI,
     '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},'
     ' {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}', ErrorKind.INVALID_ARGUMENT,
     "Expecting shape", "Failed to process element: 1 key: int_tensor of 'instances' list. Error: "
     "INVALID_ARGUMENT: Expecting shape [3,2] but got: [1,3,2]"),
    ("JsontensorTest.MultipleNamedTensorErrors/2", _MULTI,
     '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6],[7,8]], "str_tensor": ["foo", "bar"]},'
     ' {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"]}]}', ErrorKind.INVALID_ARGUMENT,
     "Expecting tensor size", "Failed to process element: 1 key: int_tensor of 'instances' list. Error: "
     "INVALID_ARGUMENT: Expecting tensor size: 8 but got: 6"),
    ("JsontensorTest.MultipleNamedTensorErrors/3", _MULTI,
     '{"instances": [{"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]}, [1, 20, 30],'
     ' {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}', ErrorKind.INVALID_ARGUMENT,
     "Expecting object but got list", "Expecting object but got list at item 1 of input list"),
    ("JsontensorTest.MultipleNamedTensorErrors/4", {"str_tensor": STR},
     '{"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]}', ErrorKind.INVALID_ARGUMENT,
     "Expecting value/list but got object", "Expecting value/list but got object at item 1 of input list"),
]


@pytest.mark.parametrize(("infomap", "body", "kind", "substring", "text"),
                         [pytest.param(*r[1:], id=r[0]) for r in REFUSED])
def test_fill_predict_request_from_json_errors(infomap, body, kind, substring, text):
    with pytest.raises(GatewayError) as e:
        _predict(body, infomap)
    assert e.value.kind is kind
    assert substring in e.value.message
    if text is not None:
        assert e.value.message == text


# -- MakeJsonFromTensors ------------------------------------------------------------------------
_INT232 = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2], np.int32).reshape(2, 3, 2)
_HELLO = np.array([b"hello", b"world", b"tf", b"serving"], dtype=object).reshape(2, 2)
_MANY = {"int_tensor": (_INT232, "INT32"),
         "str_tensor": (np.array([b"foo", b"bar", b"baz", b"bat"], dtype=object).reshape(2, 2), "BYTES"),
         "float_tensor": (np.array([[1.0], [2.0]], np.float32), "FP32"),
         "double_scalar_tensor": (np.array([8.0, 9.0]), "FP64"),
         "str_tensor_bytes": (_HELLO, "BYTES")}

# (case, outputs, row?, expected JSON as TF's test writes it, compare as text?)
WRITTEN = [
    ("JsontensorTest.FromJsonSingleTensor/row", {"int_tensor": (_INT232, "INT32")}, True,
     '{"predictions": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}', False),
    ("JsontensorTest.FromJsonSingleTensor/columnar", {"int_tensor": (_INT232, "INT32")}, False,
     '{"outputs": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}', False),
    ("JsontensorTest.FromJsonSingleScalarTensor/row", {"int_tensor": (np.arange(1, 6, dtype=np.int32), "INT32")},
     True, '{ "predictions": [1, 2, 3, 4, 5] }', False),
    ("JsontensorTest.FromJsonSingleScalarTensor/columnar",
     {"int_tensor": (np.arange(1, 6, dtype=np.int32), "INT32")}, False, '{ "outputs": [1, 2, 3, 4, 5] }', False),
    ("JsontensorTest.FromJsonSingleBytesTensor", {"str_tensor_bytes": (_HELLO, "BYTES")}, True,
     '{"predictions": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}',
     False),
    ("JsontensorTest.FromJsonSingleFloatTensorSixDigitPrecision",
     {"float_tensor": (np.array([9000000, 999999, 0.5, 0.0003, 0.00003, 555557.5], np.float32).reshape(2, 3),
                       "FP32")}, True,
     '{\n    "predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]\n    ]\n}', True),
    ("JsontensorTest.FromJsonSingleFloatTensorNonFinite",
     {"float_tensor": (np.array([[NAN, INF], [3, -INF]], np.float32), "FP32")}, True,
     '{\n    "predictions": [[NaN, Infinity], [3.0, -Infinity]\n    ]\n}', True),
    ("JsontensorTest.FromJsonMultipleNamedTensors/row", _MANY, True,
     '{"predictions": [{"double_scalar_tensor": 8.0, "float_tensor": [1.0], "int_tensor": [[1, 2], [3, 4], [5, 6]],'
     ' "str_tensor": ["foo", "bar"], "str_tensor_bytes": [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}]},'
     ' {"double_scalar_tensor": 9.0, "float_tensor": [2.0], "int_tensor": [[7, 8], [9, 0], [1, 2]],'
     ' "str_tensor": ["baz", "bat"], "str_tensor_bytes": [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]}]}', False),
    ("JsontensorTest.FromJsonMultipleNamedTensors/columnar", _MANY, False,
     '{"outputs": {"double_scalar_tensor": [8.0, 9.0], "float_tensor": [[1.0], [2.0]],'
     ' "int_tensor": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]], "str_tensor": [["foo", "bar"], ["baz", "bat"]],'
     ' "str_tensor_bytes": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}}',
     False),
    ("JsontensorTest.FromJsonSingleZeroBatchTensor", {"int_tensor": (np.zeros((0, 2), np.int32), "INT32")}, True,
     '{ "predictions": [] }', False),
    ("JsontensorTest.FromJsonMultipleZeroBatchTensors",
     {"str_tensor": (np.empty((0, 1, 2), dtype=object), "BYTES"),
      "float_tensor": (np.zeros((0, 3, 4), np.float32), "FP32")}, True, '{ "predictions": [] }', False),
]


@pytest.mark.parametrize(("outputs", "row", "expected", "as_text"), [pytest.param(*r[1:], id=r[0]) for r in WRITTEN])
def test_make_json_from_tensors(outputs, row, expected, as_text):
    got = codec.write_predict(outputs, row)
    if as_text:  # CompareJsonAllValuesAsStrings: the number tokens themselves (in the whole of TF's text)
        assert got == expected.encode()
    else:
        assert json.loads(got) == json.loads(expected)


WRITE_REFUSED = [
    ("JsontensorTest.FromJsonSingleTensorErrors/1", {}, "empty tensor map"),
    # TF's row writes a DT_COMPLEX64 tensor; Triton has no complex dtype, DT_HALF is the tensor type
    # JSON cannot write that a Triton model can return
    ("JsontensorTest.FromJsonSingleTensorErrors/2", {"tensor": (np.array([1.0, 2.0], np.float16), "FP16")},
     "tensor type: half"),
    ("JsontensorTest.FromJsonSingleTensorErrors/3", {"tensor": (np.array(1, np.int32), "INT32")},
     "no shape information"),
    ("JsontensorTest.FromJsonMultipleNamedTensorsErrors",
     {"int_tensor": (np.arange(6, dtype=np.int32).reshape(2, 3), "INT32"),
      "str_tensor": (np.array([[b"foo", b"bar", b"baz"]], dtype=object), "BYTES")}, "inconsistent batch size"),
    ("JsontensorTest.FromJsonMultipleZeroBatchTensorsErrors",
     {"int_tensor": (np.zeros((0, 2), np.int32), "INT32"),
      "str_tensor": (np.array([[b"foo", b"bar"]], dtype=object), "BYTES")}, "inconsistent batch size"),
]


@pytest.mark.parametrize(("outputs", "substring"), [pytest.param(*r[1:], id=r[0]) for r in WRITE_REFUSED])
def test_make_json_from_tensors_errors(outputs, substring):
    with pytest.raises(GatewayError) as e:
        codec.write_predict(outputs, row=True)
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT and substring in e.value.message


# -- FillClassificationRequestFromJson / FillRegressionRequestFromJson (TYPED_TEST: both) ---------
METHODS = ["classify", "regress"]


def _features(f):
    return {k: (v.kind, v.values) for k, v in f.items()}


@pytest.mark.parametrize("method", METHODS)
def test_classify_regress_request_no_context(method):  # ClassifyRegressRequestTest.RequestNoContext
    doc = jsonio.loads(b'{"examples": [{"names": [ "foo", "bar" ], "ratings": [ 8.0, 9.0 ], "age": 20},'
                       b' {"names": [ "baz" ], "ratings": 6.0}]}')
    exs, ctx = codec.parse_examples(doc, method)
    assert ctx == {}
    assert [_features(e) for e in exs] == [
        {"names": ("bytes", [b"foo", b"bar"]), "ratings": ("float", [8.0, 9.0]), "age": ("int64", [20])},
        {"names": ("bytes", [b"baz"]), "ratings": ("float", [6.0])}]


@pytest.mark.parametrize("method", METHODS)
def test_classify_regress_request_with_context_and_signature(method):
    # ClassifyRegressRequestTest.RequestWithContextAndSignature
    doc = jsonio.loads(b'{"signature_name": "custom_signture", "context": {"query": "pizza", "location": [ "sfo" ]},'
                       b' "examples": [{"names": [ "foo", "bar" ], "ratings": [ 8.0, 9.0, NaN, Infinity ], "age": 20},'
                       b' {"names": [ "baz", { "b64": "aGVsbG8=" } ], "ratings": 6.0, "intboolmix": [ 1, true, false ]},'
                       b' {"names": "bar", "ratings": -Infinity}]}')
    assert codec.signature_name(doc) == "custom_signture"
    exs, ctx = codec.parse_examples(doc, method)
    assert _features(ctx) == {"query": ("bytes", [b"pizza"]), "location": ("bytes", [b"sfo"])}
    first = _features(exs[0])
    assert first["names"] == ("bytes", [b"foo", b"bar"]) and first["age"] == ("int64", [20])
    assert first["ratings"][0] == "float" and first["ratings"][1][:2] == [8.0, 9.0]
    assert math.isnan(first["ratings"][1][2]) and first["ratings"][1][3] == INF
    assert _features(exs[1]) == {"names": ("bytes", [b"baz", b"hello"]), "ratings": ("float", [6.0]),
                                 "intboolmix": ("int64", [1, 1, 0])}
    assert _features(exs[2]) == {"names": ("bytes", [b"bar"]), "ratings": ("float", [-INF])}


# (case, body, substring TF checks, full text from TF Serving's source or None)
EXAMPLE_ERRORS = [
    ("ClassifyRegressRequestTest.JsonErrors/1",
     '{"signature_name": [ "hello" ], "examples": [ { "names": [ "foo", "bar" ] } ]}',
     "'signature_name' key must be a string", None),
    ("ClassifyRegressRequestTest.JsonErrors/2", '{"context": [ { "names": [ "foo", "bar" ] } ]}',
     "Example must be JSON object", "Example must be JSON object but got JSON Array"),
    ("ClassifyRegressRequestTest.JsonErrors/3", '{"examples": { "names": [ "foo", "bar" ] }}', "list/array",
     None),
    ("ClassifyRegressRequestTest.JsonErrors/4", '{"examples": [ [ { "names": [ "foo", "bar" ] } ] ]}',
     "Example must be JSON object", "Example must be JSON object but got JSON Array"),
    ("ClassifyRegressRequestTest.JsonErrors/5", '{"examples": [ { "names": [ 10, null ] } ]}',
     "names has element with unexpected JSON type: Null", "Feature: names has element with unexpected JSON type: Null"),
    ("ClassifyRegressRequestTest.JsonErrors/6", '{"examples": [ { "names": [ 10, 10.0 ] } ]}',
     "feature: names expecting type: int64", "Unexpected element type in feature: names expecting type: int64"),
    ("ClassifyRegressRequestTest.JsonErrors/7", '{"examples": [ { "names": [ 10, { "test": 10 } ] } ]}',
     "names has element with unexpected JSON type: Object", None),
    ("ClassifyRegressRequestTest.JsonErrors/8", '{"examples": [ { "names": [ [10], 20 ] } ]}',
     "names has element with unexpected JSON type: Array", None),
    ("ClassifyRegressRequestTest.JsonErrors/9", '{"examples": [ { "names": [ 20, 18446744073709551603 ] } ]}',
     "Only int64_t is supported", "Feature: names has uint64_t element. Only int64_t is supported."),
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("body", "substring", "text"), [pytest.param(*r[1:], id=r[0]) for r in EXAMPLE_ERRORS])
def test_classify_regress_request_json_errors(method, body, substring, text):
    doc = jsonio.loads(body.encode())
    with pytest.raises(GatewayError) as e:
        codec.signature_name(doc)
        codec.parse_examples(doc, method)
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT and substring in e.value.message
    if text is not None:
        assert e.value.message == text


# -- MakeJsonFromClassificationResult / MakeJsonFromRegressionResult -------------------------------
def test_json_from_classification_result():  # ClassifyRegressnResultTest.JsonFromClassificationResult
    labels = [["car", "bike", "bus"], ["car", "bike", "bus"]]
    got = codec.write_classify(labels, np.array([[0.2, 0.7, 0.1], [0.7, 0.1, 0.2]], np.float32))
    assert json.loads(got) == {"results": [[["car", 0.2], ["bike", 0.7], ["bus", 0.1]],
                                           [["car", 0.7], ["bike", 0.1], ["bus", 0.2]]]}


def test_json_from_regression_result():  # ClassifyRegressnResultTest.JsonFromRegressionResult
    assert json.loads(codec.write_regress(np.array([0.2, 0.9, 1.0], np.float32))) == {"results": [0.2, 0.9, 1.0]}


def test_json_from_regression_result_with_non_finite():
    # ClassifyRegressnResultTest.JsonFromRegressionResultWithNonFinite (number tokens compared as text)
    got = codec.write_regress(np.array([0.2, INF, 1.0, -INF, NAN], np.float32))
    assert got == b'{\n    "results": [0.2, Infinity, 1.0, -Infinity, NaN]\n}'


@pytest.mark.parametrize(("write", "text"), [
    pytest.param(lambda: codec.write_classify([], np.zeros((0, 0), np.float32)),
                 "Cannot convert empty ClassificationResults to JSON", id="JsonFromResultErrors/classify"),
    pytest.param(lambda: codec.write_regress(np.zeros(0, np.float32)),
                 "Cannot convert empty RegressionResults to JSON", id="JsonFromResultErrors/regress"),
])
def test_json_from_result_errors(write, text):  # ClassifyRegressnResultTest.JsonFromResultErrors
    with pytest.raises(GatewayError) as e:
        write()
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT and e.value.message == text


@pytest.mark.parametrize("message", ['Bad key: "key"', "Bad key: 'key'"])
def test_json_from_status_error(message):  # MakeJsonFromTensors.StatusError
    status, body = errors.http_error(GatewayError(ErrorKind.INVALID_ARGUMENT, message))
    assert status == 400 and json.loads(body) == {"error": message}
