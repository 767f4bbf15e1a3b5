"""TF Serving REST answers byte for byte: rapidjson's PrettyWriter as json_tensor.cc drives it.

Each expected text below is written out by hand from the source, following the calls the named
function makes (tensorflow_serving/util/json_tensor.cc) and what rapidjson 1.1.0's PrettyWriter
writes for each (include/rapidjson/prettywriter.h): 4 spaces per open container; object members and
(multi-line) array elements on new lines; ``kFormatSingleLineArray`` joins elements with ``", "``
and closes without a newline, read at every element and every close. A second test drives a model
of that writer (``PrettyWriter`` below, a transcription of prettywriter.h's ``PrettyPrefix``,
``EndObject``, ``EndArray``, ``WriteIndent``) with json_tensor.cc's own call sequence over random
tensors and compares.
"""

from __future__ import annotations

import base64
import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import TensorSpec
from gateway.dialects.tfserving import codec, decimal, errors, jsonio, protocodec, protojson
from gateway.dialects.tfserving.mapping import Signature

F32 = np.float32


def row(outputs):
    return codec.write_predict(outputs, row=True)


def col(outputs):
    return codec.write_predict(outputs, row=False)


# -- MakeRowFormatJsonFromTensors --------------------------------------------------------------------
# StartObject, Key("predictions"), StartArray (flag off); per item: [StartObject], flag ON,
# [Key(name)], AddTensorValues(dim 1), flag OFF, [EndObject]; EndArray (flag off: "\n    ]"), EndObject.
ROW = [
    # one output, one value per item: the values follow "[" with ", " (flag on at each element's
    # PrettyPrefix), and the array closes with the flag off: newline + 4 spaces + "]"
    ("one output, rank 1", {"y": (np.array([3.5, 4.0, 5.5], F32), "FP32")},
     b'{\n    "predictions": [3.5, 4.0, 5.5\n    ]\n}'),
    ("one output, rank 2", {"y": (np.array([[1, 2], [3, 4]], F32), "FP32")},
     b'{\n    "predictions": [[1.0, 2.0], [3.0, 4.0]\n    ]\n}'),
    ("one output, rank 3", {"x": (np.arange(8, dtype=np.int32).reshape(2, 2, 2), "INT32")},
     b'{\n    "predictions": [[[0, 1], [2, 3]], [[4, 5], [6, 7]]\n    ]\n}'),
    ("one output, empty rows", {"x": (np.zeros((2, 0), F32), "FP32")},
     b'{\n    "predictions": [[], []\n    ]\n}'),
    # batch 0: EndArray of an empty array writes no newline
    ("batch 0", {"x": (np.zeros((0, 2), F32), "FP32")}, b'{\n    "predictions": []\n}'),
    ("bool and int64", {"b": (np.array([True, False]), "BOOL")},
     b'{\n    "predictions": [true, false\n    ]\n}'),
    # several outputs: each item's StartObject comes while the flag is off (newline + 8 spaces),
    # its members on new lines at 12 spaces, its "}" on a new line at 8
    ("several outputs", {"y": (np.array([3.5, 4.0], F32), "FP32"), "n": (np.array([[1, 2], [3, 4]], np.int64), "INT64")},
     b'{\n    "predictions": [\n        {\n            "y": 3.5,\n            "n": [1, 2]\n        },\n'
     b'        {\n            "y": 4.0,\n            "n": [3, 4]\n        }\n    ]\n}'),
    # b64 objects: objects are never single-line; its member at (open containers) x 4 spaces
    ("b64, one output", {"x_bytes": (np.array([b"hi", b"\xff"], dtype=object), "BYTES")},
     b'{\n    "predictions": [{\n            "b64": "aGk="\n        }, {\n            "b64": "/w=="\n        }\n    ]\n}'),
    ("b64 in several outputs",
     {"y": (np.array([1.5], F32), "FP32"), "s_bytes": (np.array([[b"a"]], dtype=object), "BYTES")},
     b'{\n    "predictions": [\n        {\n            "y": 1.5,\n            "s_bytes": [{\n'
     b'                    "b64": "YQ=="\n                }]\n        }\n    ]\n}'),
    # DT_STRING: Writer::WriteString escapes '"', '\\' and controls (\u00XX upper-case), copies other
    # bytes as they are (no UTF-8 validation)
    ("strings", {"s": (np.array([b"h\xc3\xa9", b'a"\\\n\x01\x7f\xff'], dtype=object), "BYTES")},
     b'{\n    "predictions": ["h\xc3\xa9", "a\\"\\\\\\n\\u0001\x7f\xff"\n    ]\n}'),
]


@pytest.mark.parametrize(("outputs", "expected"), [pytest.param(o, e, id=i) for i, o, e in ROW])
def test_row_format(outputs, expected):
    assert row(outputs) == expected


# -- MakeColumnarFormatJsonFromTensors ---------------------------------------------------------------
# StartObject, Key("outputs"), [StartObject, Key(name)...], AddTensorValues(dim 0) with the flag off
COLUMNAR = [
    ("one output, rank 1", {"y": (np.array([3.5, 4.0], F32), "FP32")},
     b'{\n    "outputs": [\n        3.5,\n        4.0\n    ]\n}'),
    ("one output, rank 2", {"y": (np.array([[3.5, 4.0], [4.5, 5.0]], F32), "FP32")},
     b'{\n    "outputs": [\n        [\n            3.5,\n            4.0\n        ],\n'
     b'        [\n            4.5,\n            5.0\n        ]\n    ]\n}'),
    # a scalar output: AddSingleValueAndAdvance straight after the key
    ("scalar", {"y": (np.array(2.5, F32), "FP32")}, b'{\n    "outputs": 2.5\n}'),
    ("empty inner arrays", {"x": (np.zeros((2, 0), F32), "FP32")},
     b'{\n    "outputs": [\n        [],\n        []\n    ]\n}'),
    ("several outputs", {"y": (np.array([1.5], np.float64), "FP64"), "n": (np.array(7, np.int64), "INT64")},
     b'{\n    "outputs": {\n        "y": [\n            1.5\n        ],\n        "n": 7\n    }\n}'),
    ("b64", {"x_bytes": (np.array([b"hi"], dtype=object), "BYTES")},
     b'{\n    "outputs": [\n        {\n            "b64": "aGk="\n        }\n    ]\n}'),
    ("b64 scalar", {"x_bytes": (np.array(b"hi", dtype=object), "BYTES")},
     b'{\n    "outputs": {\n        "b64": "aGk="\n    }\n}'),
]


@pytest.mark.parametrize(("outputs", "expected"), [pytest.param(o, e, id=i) for i, o, e in COLUMNAR])
def test_columnar_format(outputs, expected):
    assert col(outputs) == expected


def test_classify_regress_and_error():
    # MakeJsonFromClassificationResult: flag on from each classification's StartArray to its
    # EndArray, off before "results" closes
    assert codec.write_classify([["a", "b"], ["c"]], [np.array([0.9, 0.1], F32), np.array([0.5], F32)]) == (
        b'{\n    "results": [[["a", 0.9], ["b", 0.1]], [["c", 0.5]]\n    ]\n}')
    assert codec.write_classify([[]], [np.zeros(0, F32)]) == b'{\n    "results": [[]\n    ]\n}'
    # MakeJsonFromRegressionResult: flag on before "results" opens, so it closes on the same line
    assert codec.write_regress(np.array([3.5, 4.0], F32)) == b'{\n    "results": [3.5, 4.0]\n}'
    # MakeJsonFromStatus
    assert errors.http_error(GatewayError(ErrorKind.NOT_FOUND, 'no "m"\t')) == (
        404, b'{\n    "error": "no \\"m\\"\\t"\n}')


def test_unwritable_dtype_is_refused_only_with_values():
    with pytest.raises(GatewayError, match="Failed to write JSON value for tensor type: half"):
        row({"h": (np.array([1.0], np.float16), "FP16")})
    assert row({"h": (np.zeros((0,), np.float16), "FP16")}) == b'{\n    "predictions": []\n}'


# -- status and metadata: protobuf's C++ MessageToJsonString ------------------------------------------
Row = collections.namedtuple("Row", "version state error_code error_message")


def test_status_answer():
    # ToJsonString(GetModelStatusResponse) (http_rest_api_util.cc): add_whitespace (one space per
    # level), always_print_fields_with_no_presence, json_name; MessageToJsonStream's final NewLine
    got = protojson.status_answer(protocodec.status_response([Row(123, "AVAILABLE", "OK", "")]))
    assert got == (b'{\n "model_version_status": [\n  {\n   "version": "123",\n   "state": "AVAILABLE",\n'
                   b'   "status": {\n    "error_code": "OK",\n    "error_message": ""\n   }\n  }\n ]\n}\n')
    # the printer's escapes (writer.cc MustEscape): '<' and '>' as \u003c / \u003e, lower-case hex
    got = protojson.status_answer(protocodec.status_response([Row(1, "END", "UNKNOWN", "a<b>\n")]))
    assert b'"error_message": "a\\u003cb\\u003e\\n"' in got
    assert protojson.status_answer(protocodec.status_response([])) == b'{\n "model_version_status": []\n}\n'


def test_metadata_answer():
    # ToJsonString(GetModelMetadataResponse): model_spec and the SignatureDefMap printed apart
    # (preserve_proto_field_names), joined by hand; fields in number order (name, version,
    # signature_name; TensorInfo name, dtype, tensor_shape), defaults printed, maps in key order
    sig = Signature("serving_default", "predict", "m", 0,
                    (("x", TensorSpec("x", "FP32", (-1,))),), (("y", TensorSpec("y", "INT64", ())),))
    got = protojson.metadata_answer(protocodec.model_spec("m", 123), protocodec.signature_def_map({"serving_default": sig}))
    assert got == (
        b'{\n"model_spec":{\n "name": "m",\n "version": "123",\n "signature_name": ""\n}\n,\n'
        b'"metadata": {"signature_def": {\n "signature_def": {\n  "serving_default": {\n   "inputs": {\n'
        b'    "x": {\n     "name": "x",\n     "dtype": "DT_FLOAT",\n     "tensor_shape": {\n      "dim": [\n'
        b'       {\n        "size": "-1",\n        "name": ""\n       }\n      ],\n      "unknown_rank": false\n'
        b'     }\n    }\n   },\n   "outputs": {\n    "y": {\n     "name": "y",\n     "dtype": "DT_INT64",\n'
        b'     "tensor_shape": {\n      "dim": [],\n      "unknown_rank": false\n     }\n    }\n   },\n'
        b'   "method_name": "tensorflow/serving/predict",\n   "defaults": {}\n  }\n }\n}\n}\n}\n')


# -- the writer's model, driven as json_tensor.cc drives it --------------------------------------------
class PrettyWriter:
    """prettywriter.h (rapidjson 1.1.0) over a byte buffer: PrettyPrefix, EndObject, EndArray."""

    def __init__(self):
        self.out = bytearray()
        self.stack: list[list] = []  # [in_array, value_count]
        self.single = False  # kFormatSingleLineArray

    def indent(self):
        self.out += b" " * (4 * len(self.stack))

    def prefix(self):
        if not self.stack:
            return
        level = self.stack[-1]
        if level[0]:
            if level[1] > 0:
                self.out += b","
                if self.single:
                    self.out += b" "
            if not self.single:
                self.out += b"\n"
                self.indent()
        else:
            if level[1] > 0:
                self.out += b",\n" if level[1] % 2 == 0 else b": "
            else:
                self.out += b"\n"
            if level[1] % 2 == 0:
                self.indent()
        level[1] += 1

    def raw(self, text: bytes):
        self.prefix()
        self.out += text

    def string(self, raw: bytes):
        self.prefix()
        self.out += b'"'
        for byte in raw:
            ch = bytes([byte])
            if ch in b'"\\':
                self.out += b"\\" + ch
            elif byte < 0x20:
                named = {8: b"b", 9: b"t", 10: b"n", 12: b"f", 13: b"r"}.get(byte)
                self.out += b"\\" + named if named else b"\\u00%02X" % byte
            else:
                self.out += ch
        self.out += b'"'

    def start(self, array: bool):
        self.prefix()
        self.stack.append([array, 0])
        self.out += b"[" if array else b"{"

    def end(self):
        array, count = self.stack.pop()
        if count and not (array and self.single):
            self.out += b"\n"
            self.indent()
        self.out += b"]" if array else b"}"


def _value(w: PrettyWriter, v, v2: str, binary: bool):
    """AddSingleValueAndAdvance."""
    if v2 == "BYTES":
        if binary:
            w.start(False)
            w.string(b"b64")
            w.string(base64.b64encode(v))
            w.end()
        else:
            w.string(v)
    elif v2 in ("FP32", "FP64"):
        w.raw(decimal.tokens(np.array([v], F32 if v2 == "FP32" else np.float64))[0].encode())
    elif v2 == "BOOL":
        w.raw(b"true" if v else b"false")
    else:
        w.raw(str(int(v)).encode())


def _add_values(w: PrettyWriter, arr: np.ndarray, v2: str, binary: bool):
    """AddTensorValues."""
    if not isinstance(arr, np.ndarray) or arr.ndim == 0:  # iterating an array yields its items at the last level
        _value(w, arr.item() if isinstance(arr, np.ndarray) else arr, v2, binary)
        return
    w.start(True)
    for sub in arr:
        _add_values(w, sub, v2, binary)
    w.end()


def reference(outputs, row_format: bool) -> bytes:
    w = PrettyWriter()
    w.start(False)
    objects = len(outputs) > 1
    binary = {n: v2 == "BYTES" and n.endswith("_bytes") for n, (_, v2) in outputs.items()}
    if row_format:
        w.string(b"predictions")
        w.start(True)
        batch = next(iter(outputs.values()))[0].shape[0]
        for i in range(batch):
            if objects:
                w.start(False)
            w.single = True
            for name, (arr, v2) in outputs.items():
                if objects:
                    w.string(name.encode())
                _add_values(w, arr[i], v2, binary[name])
            w.single = False
            if objects:
                w.end()
        w.end()
    else:
        w.string(b"outputs")
        if objects:
            w.start(False)
        for name, (arr, v2) in outputs.items():
            if objects:
                w.string(name.encode())
            _add_values(w, arr, v2, binary[name])
        if objects:
            w.end()
    w.end()
    return bytes(w.out)


_DTYPES = {"FP32": F32, "FP64": np.float64, "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "BOOL": np.bool_}


@st.composite
def tensors(draw):
    batch = draw(st.integers(0, 3))
    out = {}
    for k in range(draw(st.integers(1, 3))):
        v2 = draw(st.sampled_from([*_DTYPES, "BYTES"]))
        shape = (batch, *draw(st.lists(st.integers(0, 3), max_size=3)))
        size = int(np.prod(shape))
        if v2 == "BYTES":
            arr = np.array(draw(st.lists(st.binary(max_size=4), min_size=size, max_size=size)) or [b""], dtype=object)
            arr = arr[:size].reshape(shape)
            name = f"t{k}" + draw(st.sampled_from(["", "_bytes"]))
        else:
            arr = (np.arange(size) * 0.37 - 1).astype(_DTYPES[v2]).reshape(shape)
            name = f"t{k}"
        out[name] = (arr, v2)
    return out


@settings(max_examples=300, deadline=None)
@given(tensors(), st.booleans())
def test_matches_prettywriter_model(outputs, row_format):
    assert codec.write_predict(outputs, row_format) == reference(outputs, row_format)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=3), st.booleans())
def test_columnar_scalars_and_nesting_match_the_model(shape, b64):
    size = int(np.prod(shape)) if shape else 1
    arr = np.array([bytes([65 + i % 26]) for i in range(size)], dtype=object).reshape(shape)
    outputs = {"s_bytes" if b64 else "s": (arr, "BYTES")}
    assert col(outputs) == reference(outputs, False)


# -- JsonValueToDebugString: the JSON value quoted in error texts -------------------------------------
@pytest.mark.parametrize(("value", "text"), [
    # PrettyWriter + kFormatSingleLineArray: objects multi-line at 4 spaces, arrays on one line
    ({"a": [1, 2.5, "x\n\x1f"], "b": {}, "c": [], "d": {"e": None}},
     '{\n    "a": [1, 2.5, "x\\n\\u001F"],\n    "b": {},\n    "c": [],\n    "d": {\n        "e": null\n    }\n}'),
    # Writer::Double (internal/dtoa.h Prettify): positional up to 1e21 and down to 1e-6, no '+'
    ([1e20, 1e21, 1e-6, 1e-7, 1.5e300, -0.0], "[100000000000000000000.0, 1e21, 0.000001, 1e-7, 1.5e300, -0.0]"),
    # Writer::Double refuses NaN (kWriteDefaultFlags): the walk stops after the separator
    ([1, float("nan"), 3], "[1, "),
])
def test_debug_string_is_rapidjsons_text(value, text):
    assert jsonio.debug_string(value) == text


def test_debug_string_stops_at_the_first_call_past_256_bytes():
    # JsonWriterWithLimit::InLimit: a call goes through while fewer than 256 bytes are written,
    # so the last number may end past 256, and nothing is closed
    text = jsonio.debug_string(list(range(1000)))
    assert text.startswith("[0, 1, 2, ") and text.endswith(", 65, 66") and len(text) == 257
