"""TF Serving REST (:8501) against the real Triton: the seed's examples and the reference's pairs,
byte for byte where TF Serving's text is documented, through a plain HTTP client (urllib)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from gateway.dialects.tfserving import codec

HP3 = "saved_model_half_plus_three"


def _json(raw: bytes):
    return json.loads(raw)  # the stdlib parser takes NaN/Infinity tokens


# -- the seed (002), verbatim ------------------------------------------------------------------
def test_seed_model_status(tf_rest):
    status, ctype, body = tf_rest("GET", f"/v1/models/{HP3}")
    assert (status, ctype) == (200, "application/json")
    # ToJsonString (http_rest_api_util.cc): protobuf's C++ printer, add_whitespace, a final newline
    assert body == (b'{\n "model_version_status": [\n  {\n   "version": "123",\n   "state": "AVAILABLE",\n'
                    b'   "status": {\n    "error_code": "OK",\n    "error_message": ""\n   }\n  }\n ]\n}\n')


def test_seed_predict_without_content_type(tf_rest):
    status, ctype, body = tf_rest("POST", f"/v1/models/{HP3}:predict", '{"instances": [1.0,2.0,5.0]}')
    assert (status, ctype) == (200, "application/json")
    # MakeRowFormatJsonFromTensors (json_tensor.cc) through rapidjson's PrettyWriter
    assert body == b'{\n    "predictions": [3.5, 4.0, 5.5\n    ]\n}'


def test_seed_regress(tf_rest):
    req = '{"signature_name": "tensorflow/serving/regress", "examples": [{"x": 1.0}, {"x": 2.0}]}'
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}:regress", req)
    assert status == 200
    assert body == b'{\n    "results": [3.5, 4.0]\n}'  # MakeJsonFromRegressionResult


def test_seed_unknown_model_is_404_with_tf_text(tf_rest):
    status, ctype, body = tf_rest("POST", "/v1/models/half:predict", '{"instances": [1.0,5.0]}')
    assert (status, ctype) == (404, "application/json")
    assert body == b'{\n    "error": "Servable not found for request: Latest(half)"\n}'  # MakeJsonFromStatus


# -- the reference's documented pairs ------------------------------------------------------------
def test_columnar_with_version_and_signature(tf_rest):
    req = '{"signature_name": "serving_default", "inputs": [3.0, 4.0]}'
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}/versions/123:predict", req)
    assert (status, body) == (200, b'{\n    "outputs": [\n        4.5,\n        5.0\n    ]\n}')


def test_classify_one_class_with_empty_label(tf_rest):
    req = '{"signature_name": "tensorflow/serving/classify", "examples": [{"x": 20.0}, {"x": 1}]}'
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}:classify", req)
    assert (status, body) == (200, b'{\n    "results": [[["", 13.0]], [["", 3.5]]\n    ]\n}')


def test_classify_and_regress_with_context(tf_rest):
    req = '{"signature_name": "tensorflow/serving/regress", "context": {"x": 4.0}, "examples": [{}, {}]}'
    assert tf_rest("POST", f"/v1/models/{HP3}:regress", req)[2] == b'{\n    "results": [5.0, 5.0]\n}'


def test_routing_is_case_insensitive_but_the_verb_is_not(tf_rest):
    # TF Serving's path regex is (?i), but ProcessRequest then compares the verb as written
    status, _, body = tf_rest("POST", f"/V1/MODELS/{HP3}:predict", '{"instances": [2.0]}')
    assert (status, body) == (200, b'{\n    "predictions": [4.0\n    ]\n}')
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}:PREDICT", '{"instances": [2.0]}')
    assert (status, _json(body)) == (400, {"error": f"Malformed request: POST /v1/models/{HP3}:PREDICT"})


def test_nan_and_infinity_in_and_out_as_bare_tokens(tf_rest):
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}:predict", '{"instances": [NaN, Infinity, -Infinity, 1]}')
    assert (status, body) == (200, b'{\n    "predictions": [NaN, Infinity, -Infinity, 3.5\n    ]\n}')


def test_metadata_lists_the_three_signatures_with_tf_dtype_names(tf_rest):
    status, _, body = tf_rest("GET", f"/v1/models/{HP3}/metadata")
    assert status == 200
    # ToJsonString(GetModelMetadataResponse): two C++ MessageToJsonString texts joined by hand
    assert body.startswith(
        b'{\n"model_spec":{\n "name": "saved_model_half_plus_three",\n "version": "123",\n "signature_name": ""\n}\n,\n'
        b'"metadata": {"signature_def": {\n "signature_def": {\n  "serving_default": {\n   "inputs": {\n'
        b'    "x": {\n     "name": "x",\n     "dtype": "DT_FLOAT",\n     "tensor_shape": {\n      "dim": [],\n'
        b'      "unknown_rank": true\n     }\n    }\n   },\n   "outputs": {\n')
    assert body.endswith(b'"tensorflow/serving/regress",\n   "defaults": {}\n  }\n }\n}\n}\n}\n')
    doc = _json(body)
    assert doc["model_spec"] == {"name": HP3, "signature_name": "", "version": "123"}
    sigs = doc["metadata"]["signature_def"]["signature_def"]
    assert set(sigs) == {"serving_default", "tensorflow/serving/regress", "tensorflow/serving/classify"}
    # serving_default is declared element-wise in tests/config/tfserving.yaml: unknown rank, as TF
    x = sigs["serving_default"]["inputs"]["x"]
    assert x == {"dtype": "DT_FLOAT", "tensor_shape": {"dim": [], "unknown_rank": True}, "name": "x"}
    y = sigs["tensorflow/serving/regress"]["outputs"]["outputs"]
    assert y["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert sigs["serving_default"]["method_name"] == "tensorflow/serving/predict"
    assert sigs["tensorflow/serving/regress"]["inputs"]["inputs"]["dtype"] == "DT_STRING"
    assert sigs["tensorflow/serving/classify"]["outputs"]["scores"]["dtype"] == "DT_FLOAT"


# -- multi-tensor model: several inputs/outputs, strings, b64, *_bytes --------------------------
def test_multi_tensor_row_format(tf_rest):
    req = {"instances": [{"tag": "foo", "signal": [1, 2, 3, 4], "count": 2},
                         {"tag": {"b64": base64.b64encode(b"ab").decode()}, "signal": [0.5, 0, 0, 0], "count": 1}]}
    status, _, body = tf_rest("POST", "/v1/models/multi_tensor:predict", json.dumps(req))
    assert status == 200, body
    preds = _json(body)["predictions"]
    assert preds[0] == {"tag_bytes": [{"b64": base64.b64encode(b"oof\x00\xff").decode()}],
                        "scaled": [2.0, 4.0, 6.0, 8.0], "total": [20.0], "length": [3]}
    assert preds[1]["tag_bytes"] == [{"b64": base64.b64encode(b"ba\x00\xff").decode()}]
    assert preds[1]["total"] == [0.5]


def test_multi_tensor_columnar_shape_rule(tf_rest):
    # tag [1] and count [1] get a trailing 1 (declared [-1, 1]); signal [4] a leading batch dim
    # ([-1, 4]); not every input got a batch dim, so the outputs keep theirs.
    req = {"inputs": {"tag": ["héllo"], "signal": [1, 1, 1, 1], "count": [3]}}
    status, _, body = tf_rest("POST", "/v1/models/multi_tensor:predict", json.dumps(req))
    assert status == 200, body
    out = _json(body)["outputs"]
    assert out["scaled"] == [[3.0, 3.0, 3.0, 3.0]]
    assert out["length"] == [[6]]
    assert out["tag_bytes"] == [[{"b64": base64.b64encode("héllo".encode()[::-1] + b"\x00\xff").decode()}]]


def test_renamed_model_label_and_signature_over_another_triton_model(tf_rest):
    got = tf_rest("POST", "/v1/models/hp3/labels/stable:predict", '{"instances": [1.0]}')[2]
    assert got == b'{\n    "predictions": [3.5\n    ]\n}'
    req = {"signature_name": "multi", "inputs": {"name": [["a"]], "values": [[1, 2, 3, 4]], "n": [[1]]}}
    status, _, body = tf_rest("POST", "/v1/models/hp3:predict", json.dumps(req))
    assert status == 200, body
    assert _json(body)["outputs"] == {"reversed_bytes": [[{"b64": base64.b64encode(b"a\x00\xff").decode()}]],
                                      "sum": [[10.0]]}


def test_configured_classify_labels(tf_rest):
    req = '{"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}'
    assert tf_rest("POST", "/v1/models/hp3:classify", req)[2] == b'{\n    "results": [[["half", 4.0]]\n    ]\n}'


# -- documented errors ---------------------------------------------------------------------------
ERRORS = [
    ("POST", f"/v1/models/{HP3}:predict", "", 400, "JSON Parse error: The document is empty"),
    ("POST", "/v1/models/half:predict", "", 400, "JSON Parse error: The document is empty"),
    ("POST", f"/v1/models/{HP3}:predict", "{", 400, None),
    ("POST", f"/v1/models/{HP3}:predict", "[1]", 400, None),
    ("POST", f"/v1/models/{HP3}:predict", '{"instances": [1.0], "inputs": [1.0]}', 400, None),
    ("POST", f"/v1/models/{HP3}:predict", '{"foo": 1}', 400, "Missing 'inputs' or 'instances' key"),
    ("POST", f"/v1/models/{HP3}:predict", '{"instances": 1.0}', 400, None),
    ("POST", f"/v1/models/{HP3}:predict", '{"instances": []}', 400, None),
    ("POST", f"/v1/models/{HP3}:predict", '{"instances": ["x"]}', 400,
     "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
     'JSON Value: "x" Type: String is not of expected type: float'),
    ("POST", f"/v1/models/{HP3}:predict", '{"inputs": ["x"]}', 400,
     'JSON Value: "x" Type: String is not of expected type: float'),
    ("POST", f"/v1/models/{HP3}:predict", '{"signature_name": "nope", "instances": [1.0]}', 400,
     'Serving signature name: "nope" not found in signature def'),
    ("POST", f"/v1/models/{HP3}:predict", '{"signature_name": 5, "instances": [1.0]}', 400, None),
    ("POST", f"/v1/models/{HP3}/versions/7:predict", '{"instances": [1.0]}', 404,
     f"Servable not found for request: Specific({HP3}, 7)"),
    ("POST", "/v1/models/hp3/labels/nope:predict", '{"instances": [1.0]}', 400,
     "Unrecognized servable version label: nope"),
    # ServerCore resolves the label before it looks for the model (GetModelVersionForLabel)
    ("POST", "/v1/models/nope/labels/stable:predict", '{"instances": [1.0]}', 400,
     "Unrecognized servable version label: stable"),
    ("GET", "/v1/models/nope/labels/stable/metadata", None, 400, "Unrecognized servable version label: stable"),
    ("POST", "/v1/models/hp3/labels/broken:predict", '{"instances": [1.0]}', 404,
     "Servable not found for request: Specific(hp3, 7)"),
    ("POST", f"/v1/models/{HP3}:regress", '{"signature_name": "tensorflow/serving/regress"}', 400, None),
    ("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    ("GET", f"/v1/models/{HP3}/versions/7", None, 404, f"Could not find version 7 of model {HP3}"),
    ("GET", "/v1/models", None, 400, "Missing model name in request."),
    ("GET", f"/v1/models/{HP3}:predict", None, 400, f"Malformed request: GET /v1/models/{HP3}:predict"),
    ("POST", f"/v1/models/{HP3}/metadata", "{}", 400, f"Malformed request: POST /v1/models/{HP3}/metadata"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "message"), ERRORS)
def test_documented_errors(tf_rest, method, path, body, status, message):
    got_status, ctype, raw = tf_rest(method, path, body)
    assert (got_status, ctype) == (status, "application/json"), raw
    err = _json(raw)["error"]
    if message is not None:
        assert err == message
    # and the gateway keeps serving
    assert tf_rest("POST", f"/v1/models/{HP3}:predict", '{"instances": [1.0]}')[2] == b'{\n    "predictions": [3.5\n    ]\n}'


def test_error_texts_with_the_request_document(tf_rest):
    raw = tf_rest("POST", f"/v1/models/{HP3}:predict", '{"instances": [1.0], "inputs": [1.0]}')[2]
    err = _json(raw)["error"]
    assert err.startswith("JSON Value: {") and err.endswith(
        "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist ")
    raw = tf_rest("POST", f"/v1/models/{HP3}:regress", '{"signature_name": "tensorflow/serving/regress"}')[2]
    assert _json(raw)["error"].endswith("When method is classify, key 'examples' is expected and was not found")
    raw = tf_rest("POST", f"/v1/models/{HP3}:predict", "{")[2]
    assert _json(raw)["error"].startswith("JSON Parse error: ")


# -- TF Serving's path and shape rules ------------------------------------------------------------
def test_half_plus_three_takes_any_shape_as_tf_serving_does(tf_rest):
    # its serving_default is declared element-wise (tests/config/tfserving.yaml, gateway.yaml)
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}:predict", '{"instances": [[1.0, 2.0], [3.0, 4.0]]}')
    assert (status, body) == (200, b'{\n    "predictions": [[3.5, 4.0], [4.5, 5.0]\n    ]\n}')
    assert tf_rest("POST", f"/v1/models/{HP3}:predict", '{"inputs": 2.0}')[2] == b'{\n    "outputs": 4.0\n}'
    assert tf_rest("POST", f"/v1/models/{HP3}:predict", '{"inputs": [[[1.0]], [[3.0]]]}')[2] == (
        b'{\n    "outputs": [\n        [\n            [\n                3.5\n            ]\n        ],\n'
        b'        [\n            [\n                4.5\n            ]\n        ]\n    ]\n}')


def test_metadata_subresource_is_compared_as_written(tf_rest):
    status, _, body = tf_rest("GET", f"/v1/models/{HP3}/METADATA")  # a status request in TF Serving
    assert status == 200 and "model_version_status" in _json(body)


def test_cors_preflight_answers_have_no_body(tf_rest):
    assert tf_rest("OPTIONS", f"/v1/models/{HP3}:predict", None, {"Origin": "http://example.com"})[::2] == (200, b"")
    assert tf_rest("OPTIONS", f"/v1/models/{HP3}:predict")[::2] == (400, b"")


def test_version_past_int64_is_a_400_with_an_empty_body(tf_rest):
    for method, path in (("POST", f"/v1/models/{HP3}/versions/9223372036854775808:predict"),
                         ("GET", f"/v1/models/{HP3}/versions/9223372036854775808")):
        status, ctype, body = tf_rest(method, path, '{"instances": [1.0]}' if method == "POST" else None)
        assert (status, ctype, body) == (400, "application/json", b"")
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}/versions/9223372036854775807:predict", '{"instances": [1.0]}')
    assert status == 404 and _json(body)["error"].endswith("9223372036854775807)")


def test_classify_and_regress_read_the_body_before_the_model(tf_rest):
    # FillClassificationRequestFromJson runs before the servable is looked up
    status, _, body = tf_rest("POST", "/v1/models/nope:regress", '{"examples": [1]}')
    assert (status, _json(body)) == (400, {"error": "Example must be JSON object but got JSON Number"})
    status, _, body = tf_rest("POST", f"/v1/models/{HP3}:classify", '{"signature_name": "nope", "examples": [{"x": 1.0}]}')
    assert (status, _json(body)) == (400, {"error": "No signature was found with the name: nope"})


def test_trailing_text_after_the_document_is_ignored(tf_rest):  # rapidjson's kParseStopWhenDoneFlag
    assert tf_rest("POST", f"/v1/models/{HP3}:predict", '{"instances": [1.0]} trailing')[2] == b'{\n    "predictions": [3.5\n    ]\n}'


@pytest.mark.parametrize("key", ["instances", "inputs"])
def test_image_sized_body_read_densely_answers_as_the_general_path(tf_rest, key):
    """A 1x64x64x3 image as nested lists (39 KiB) is read by the dense path (core/densejson.py);
    naming the signature makes the same request take the general path: the two answers are the same bytes."""
    rng = np.random.default_rng(7)
    image = rng.standard_normal((1, 64, 64, 3)).astype(np.float32).astype(np.float64).tolist()
    dense_body = json.dumps({key: image}).encode()
    general_body = json.dumps({key: image, "signature_name": "serving_default"}).encode()
    assert len(dense_body) >= codec.DENSE_MIN and codec.dense_body(dense_body) is not None
    assert codec.dense_body(general_body) is None
    got = tf_rest("POST", f"/v1/models/{HP3}:predict", dense_body)
    want = tf_rest("POST", f"/v1/models/{HP3}:predict", general_body)
    assert got[0] == 200 and got == want
    out = _json(got[2])["predictions" if key == "instances" else "outputs"]
    assert np.allclose(np.array(out), np.array(image, np.float32) * 0.5 + 3, rtol=1e-6)
