"""TF Serving's own wire-level tests, ported and run against the gateway in front of a real Triton.

Sources (tensorflow/serving; each row names the TEST or test method it restates, ``/n`` for the
n-th request inside one test):

- ``tensorflow_serving/model_servers/http_rest_api_handler_test.cc`` (REST, model
  ``saved_model_half_plus_two_2_versions``, version 123, label ``Version_Label``);
- ``tensorflow_serving/model_servers/tensorflow_model_server_test.py`` (gRPC and REST through a
  real ``tensorflow_model_server``, model ``default`` = ``saved_model_half_plus_two_cpu``);
- ``tensorflow_serving/servables/tensorflow/predict_impl_test.cc`` (Predict status codes and
  answers, model ``test_model``).

All three are TF's half_plus_two (y = 0.5x + 2, y2 = 0.5x + 3, y3 = 0.5·x2 + 3), served here by
``model_repository/half_plus_two`` under those names (tests/config/tfserving.yaml). Requests and
expected answers are restated from the sources, not copied. Where the source checks a substring of
the status message, the row checks that substring in the REST ``error`` text (or the gRPC details);
where it compares JSON, the row compares the parsed documents. Rows marked DIFFERENCE assert the
gateway's documented answer instead (docs/tfserving.md, "Ported TF Serving tests").
"""

from __future__ import annotations

import json

import grpc
import ml_dtypes
import numpy as np
import pytest

from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    regression_pb2,
)
from gateway._proto.tensorflow_serving.apis.get_model_metadata_pb2 import SignatureDefMap

M = "saved_model_half_plus_two_2_versions"


# -- REST: one row per request ------------------------------------------------------------------
# expect: ("json", document) | ("error", substring) | ("error=", full text) | ("empty",) | ("status",)
_STATUS_123 = {"model_version_status": [{"version": "123", "state": "AVAILABLE",
                                         "status": {"error_code": "OK", "error_message": ""}}]}
H = "http_rest_api_handler_test.cc"
S = "tensorflow_model_server_test.py"


def _malformed(n: int, method: str, path: str) -> tuple:
    """An UnsupportedApiCalls row: a path TF Serving's REST handler does not route, answered 400
    "Malformed request"."""
    return (H, f"UnsupportedApiCalls/{n}", method, path, "", 400, ("error", "Malformed request"))


REST = [
    (H, "kPathRegex/1", "GET", "/v1/models", None, 400, ("error=", "Missing model name in request.")),
    (H, "kPathRegex/2", "GET", "/statuspage", None, 404, ("status",)),
    (H, "kPathRegex/3", "GET", "/index", None, 404, ("status",)),
    (H, "UnsupportedApiCalls/1", "GET", "/v1/foo", "", 400, ("error=", "Malformed request: GET /v1/foo")),
    (H, "UnsupportedApiCalls/2", "POST", "/v1/foo", "", 400, ("error=", "Malformed request: POST /v1/foo")),
    (H, "UnsupportedApiCalls/3", "GET", "/v1/models", "", 400, ("error", "Missing model name")),
    _malformed(4, "GET", "/v1/models/debug/model_name"),
    _malformed(5, "POST", "/v1/models"),
    _malformed(6, "GET", "/v1/models/foo:predict"),
    _malformed(7, "GET", "/v1/models/foo/version/50:predict"),
    _malformed(8, "POST", "/v1/models/foo/version/50:regress"),
    _malformed(9, "POST", "/v1/models/foo/versions/HELLO:regress"),
    # the "Failed to convert version" status is returned before TF Serving writes its JSON: the
    # client sees the 400 and an empty body
    (H, "UnsupportedApiCalls/10", "POST", "/v1/models/foo/versions/18446744073709551615:regress", "", 400,
     ("empty",)),
    _malformed(11, "POST", "/v1/models/foo/metadata"),
    _malformed(12, "POST", "/v1/models/foo/label/some_label:regress"),
    _malformed(13, "POST", "/v1/models/foo/versions/50/labels/some_label:regress"),
    _malformed(14, "POST", "/v1/models/foo/versions/some_label:regress"),
    (H, "PredictModelNameVersionErrors/1", "POST", "/v1/models/foo:predict", '{ "instances": [1] }', 404,
     ("error=", "Servable not found for request: Latest(foo)")),
    (H, "PredictModelNameVersionErrors/2", "POST", "/v1/models/foo/versions/50:predict", '{ "instances": [1] }', 404,
     ("error=", "Servable not found for request: Specific(foo, 50)")),
    (H, "PredictModelNameVersionErrors/3", "POST", f"/v1/models/{M}99:predict", '{ "instances": [1] }', 404,
     ("error=", f"Servable not found for request: Latest({M}99)")),
    (H, "PredictRequestErrors/1", "POST", f"/v1/models/{M}:predict", "", 400,
     ("error=", "JSON Parse error: The document is empty")),
    (H, "PredictRequestErrors/2", "POST", f"/v1/models/{M}:predict", "instances = [1, 2]", 400,
     ("error", "JSON Parse error: Invalid value")),
    (H, "PredictRequestErrors/3", "POST", f"/v1/models/{M}:predict", '{ "instances": ["x", "y"] }', 400,
     ("error=", "Failed to process element: 0 of 'instances' list. Error: INVALID_ARGUMENT: "
                'JSON Value: "x" Type: String is not of expected type: float')),
    (H, "PredictRequestErrors/4", "POST", f"/v1/models/{M}/labels/Version_Nonexistent:predict",
     '{ "instances": ["x", "y"] }', 400, ("error=", "Unrecognized servable version label: Version_Nonexistent")),
    (H, "PredictRequestErrors/5", "POST", f"/v1/models/{M}:predict", '{ "signature_name": 100 }', 400,
     ("error", "'signature_name' key must be a string value.")),
    (H, "Predict/1", "POST", f"/v1/models/{M}:predict", '{"instances": [[1.0, 2.0], [3.0, 4.0]]}', 200,
     ("json", {"predictions": [[2.5, 3.0], [3.5, 4.0]]})),
    (H, "Predict/2", "POST", f"/v1/models/{M}/versions/123:predict", '{"instances": [1.0, 2.0]}', 200,
     ("json", {"predictions": [2.5, 3.0]})),
    (H, "Predict/3", "POST", f"/v1/models/{M}/labels/Version_Label:predict", '{"instances": [1.0, 2.0]}', 200,
     ("json", {"predictions": [2.5, 3.0]})),
    (H, "Predict/4", "POST", f"/v1/models/{M}/versions/123:predict",
     '{"signature_name": "serving_default", "instances": [3.0, 4.0]}', 200, ("json", {"predictions": [3.5, 4.0]})),
    (H, "Predict/5", "POST", f"/v1/models/{M}/versions/123:predict",
     '{"signature_name": "serving_default", "inputs": [3.0, 4.0]}', 200, ("json", {"outputs": [3.5, 4.0]})),
    (H, "Regress/1", "POST", f"/v1/models/{M}:regress",
     '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }', 200, ("json", {"results": [42]})),
    (H, "Regress/2", "POST", f"/v1/models/{M}/versions/123:regress",
     '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }', 200, ("json", {"results": [42]})),
    (H, "Regress/3", "POST", f"/v1/models/{M}/labels/Version_Label:regress",
     '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }', 200, ("json", {"results": [42]})),
    (H, "Classify/1", "POST", f"/v1/models/{M}:classify",
     '{"signature_name": "classify_x_to_y", "examples": [ { "x": 20.0 } ] }', 200,
     ("json", {"results": [[["", 12]]]})),
    (H, "Classify/2", "POST", f"/v1/models/{M}/labels/Version_Label:classify",
     '{"signature_name": "classify_x_to_y", "examples": [ { "x": 10.0 } ] }', 200,
     ("json", {"results": [[["", 7]]]})),
    (H, "GetStatus/1", "GET", f"/v1/models/{M}", None, 200, ("json", _STATUS_123)),
    (H, "GetStatus/2", "GET", f"/v1/models/{M}/versions/123", None, 200, ("json", _STATUS_123)),
    (H, "GetStatus/3", "GET", f"/v1/models/{M}/labels/Version_Label", None, 200, ("json", _STATUS_123)),
    (S, "testClassifyREST", "POST", "/v1/models/default:classify",
     json.dumps({"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}), 200,
     ("json", {"results": [[["", 3.0]]]})),
    (S, "testRegressREST", "POST", "/v1/models/default:regress",
     json.dumps({"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}), 200, ("json", {"results": [3.0]})),
    (S, "testPredictREST", "POST", "/v1/models/default:predict", json.dumps({"instances": [2.0, 3.0, 4.0]}), 200,
     ("json", {"predictions": [3.0, 3.5, 4.0]})),
    (S, "testPredictColumnarREST", "POST", "/v1/models/default:predict", json.dumps({"inputs": [2.0, 3.0, 4.0]}), 200,
     ("json", {"outputs": [3.0, 3.5, 4.0]})),
    (S, "testGetStatusREST", "GET", "/v1/models/default", None, 200, ("json", _STATUS_123)),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "expect"),
                         [pytest.param(*r[2:], id=f"{r[0]}::{r[1]}") for r in REST])
def test_rest(tf_rest, method, path, body, status, expect):
    got_status, ctype, raw = tf_rest(method, path, body)
    assert got_status == status, raw
    if expect[0] == "status":  # not a REST API path: TF Serving's HTTP server (libevent) answers 404 itself
        assert (ctype, raw) == ("text/html; charset=ISO-8859-1", b"<HTML><HEAD>\n<TITLE>404 Not Found</TITLE>\n"
                                b"</HEAD><BODY>\n<H1>Not Found</H1>\n</BODY></HTML>\n")
        return
    assert ctype == "application/json"
    if expect[0] == "empty":
        assert raw == b""
    elif expect[0] == "json":
        assert json.loads(raw) == expect[1]
    else:
        err = json.loads(raw)["error"]
        assert (err == expect[1]) if expect[0] == "error=" else (expect[1] in err), err


# -- REST metadata: TF compares the whole document with a file ---------------------------------------
def _normalised(doc: dict) -> dict:
    """The metadata document without what the gateway documents as different: graph tensor names
    (x:0 vs the Triton name), tensor shapes (Triton's config vs the graph's), and the inputs of
    classify/regress signatures (serialized tf.Example for the gateway; a DT_FLOAT x2:0 in
    TF's regress_x2_to_y3, the only signature of the test model that takes a plain tensor)."""
    sigs = doc["metadata"]["signature_def"]["signature_def"]
    out = {}
    for name, sd in sigs.items():
        ins = {a: t["dtype"] for a, t in sd["inputs"].items()}
        if sd["method_name"] != "tensorflow/serving/predict":
            ins = {a: "(tf.Example)" for a in ins}
        out[name] = {"method_name": sd["method_name"], "inputs": ins,
                     "outputs": {a: t["dtype"] for a, t in sd["outputs"].items()}, "defaults": sd.get("defaults")}
    return {"model_spec": doc["model_spec"], "signatures": out}


# restated from tensorflow_serving/servables/tensorflow/testdata/saved_model_half_plus_two_2_versions_metadata.json
# and half_plus_two_model_metadata.json, then normalised as above
def _tf_metadata(name: str, classify_x2: bool) -> dict:
    sigs = {
        "serving_default": ("tensorflow/serving/predict", {"x": "DT_FLOAT"}, {"y": "DT_FLOAT"}),
        "classify_x_to_y": ("tensorflow/serving/classify", {"inputs": "(tf.Example)"}, {"scores": "DT_FLOAT"}),
        "regress_x_to_y": ("tensorflow/serving/regress", {"inputs": "(tf.Example)"}, {"outputs": "DT_FLOAT"}),
        "regress_x_to_y2": ("tensorflow/serving/regress", {"inputs": "(tf.Example)"}, {"outputs": "DT_FLOAT"}),
        "regress_x2_to_y3": ("tensorflow/serving/regress", {"inputs": "(tf.Example)"}, {"outputs": "DT_FLOAT"}),
    }
    if classify_x2:
        sigs["classify_x2_to_y3"] = ("tensorflow/serving/classify", {"inputs": "(tf.Example)"}, {"scores": "DT_FLOAT"})
    return {"model_spec": {"name": name, "signature_name": "", "version": "123"},
            "signatures": {k: {"method_name": m, "inputs": i, "outputs": o, "defaults": {}}
                           for k, (m, i, o) in sigs.items()}}


@pytest.mark.parametrize(("path", "name", "classify_x2"), [
    pytest.param(f"/v1/models/{M}/metadata", M, True, id=f"{H}::GetModelMetadata"),
    pytest.param("/v1/models/default/metadata", "default", False, id=f"{S}::testGetModelMetadataREST"),
])
def test_rest_metadata(tf_rest, path, name, classify_x2):
    status, ctype, raw = tf_rest("GET", path)
    assert (status, ctype) == (200, "application/json")
    doc = json.loads(raw)
    assert _normalised(doc) == _tf_metadata(name, classify_x2)
    # DIFFERENCE (documented): the element-wise serving_default has unknown rank, TF's graph says [-1, 1]
    x = doc["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["x"]
    assert x["tensor_shape"] == {"dim": [], "unknown_rank": True}


# -- gRPC: tensorflow_model_server_test.py (model "default") ---------------------------------------
def _model_spec_ok(ms, name: str, signature: str) -> None:
    # _VerifyModelSpec: name, signature name and version of the answer
    assert (ms.name, ms.signature_name, ms.version.value) == (name, signature, 123)


def test_grpc_get_model_status(tf_channel):  # tensorflow_model_server_test.py::testGetModelStatus
    stub = model_service_pb2_grpc.ModelServiceStub(tf_channel)
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = "default"
    result = stub.GetModelStatus(req, timeout=5)
    assert len(result.model_version_status) == 1
    assert result.model_version_status[0].version == 123
    assert result.model_version_status[0].status.error_code == 0


def test_grpc_get_model_metadata(tf_stub):  # tensorflow_model_server_test.py::testGetModelMetadata
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = "default"
    req.metadata_field.append("signature_def")
    result = tf_stub.GetModelMetadata(req, timeout=5)
    assert result.model_spec.name == "default" and result.model_spec.version.value == 123
    assert list(result.metadata) == ["signature_def"]
    sdm = SignatureDefMap()
    assert result.metadata["signature_def"].Unpack(sdm)
    assert set(sdm.signature_def) == {"serving_default", "classify_x_to_y", "regress_x_to_y", "regress_x_to_y2",
                                      "regress_x2_to_y3"}


def _example_input(request, x: float) -> None:
    example = request.input.example_list.examples.add()
    example.features.feature["x"].float_list.value.extend([x])


def test_grpc_classify(tf_stub):  # tensorflow_model_server_test.py::testClassify
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name, req.model_spec.signature_name = "default", "classify_x_to_y"
    _example_input(req, 2.0)
    result = tf_stub.Classify(req, timeout=5)
    assert len(result.result.classifications) == 1 and len(result.result.classifications[0].classes) == 1
    assert result.result.classifications[0].classes[0].score == 3.0
    _model_spec_ok(result.model_spec, "default", "classify_x_to_y")


def test_grpc_regress(tf_stub):  # tensorflow_model_server_test.py::testRegress
    req = regression_pb2.RegressionRequest()
    req.model_spec.name, req.model_spec.signature_name = "default", "regress_x_to_y"
    _example_input(req, 2.0)
    result = tf_stub.Regress(req, timeout=5)
    assert len(result.result.regressions) == 1 and result.result.regressions[0].value == 3.0
    _model_spec_ok(result.model_spec, "default", "regress_x_to_y")


def test_grpc_multi_inference(tf_stub):  # tensorflow_model_server_test.py::testMultiInference
    req = inference_pb2.MultiInferenceRequest()
    for sig, method in (("regress_x_to_y", "tensorflow/serving/regress"),
                        ("classify_x_to_y", "tensorflow/serving/classify")):
        task = req.tasks.add()
        task.model_spec.name, task.model_spec.signature_name, task.method_name = "default", sig, method
    _example_input(req, 2.0)
    result = tf_stub.MultiInference(req, timeout=5)
    assert len(result.results) == 2
    assert result.results[0].regression_result.regressions[0].value == 3.0
    assert result.results[1].classification_result.classifications[0].classes[0].score == 3.0
    for i in range(2):
        _model_spec_ok(result.results[i].model_spec, "default", req.tasks[i].model_spec.signature_name)


def test_grpc_predict_saved_model(tf_stub):  # tensorflow_model_server_test.py::testPredictSavedModel
    req = predict_pb2.PredictRequest()
    req.model_spec.name, req.model_spec.signature_name = "default", "serving_default"
    req.inputs["x"].dtype = types_pb2.DT_FLOAT
    req.inputs["x"].float_val.append(2.0)
    req.inputs["x"].tensor_shape.dim.add().size = 1
    req.output_filter.append("y")
    result = tf_stub.Predict(req, timeout=5)
    assert "y" in result.outputs and result.outputs["y"].dtype == types_pb2.DT_FLOAT
    assert list(result.outputs["y"].float_val) == [3.0]
    _model_spec_ok(result.model_spec, "default", "serving_default")


# -- gRPC: predict_impl_test.cc (model "test_model") -------------------------------------------------
def _test_model_request(**inputs) -> predict_pb2.PredictRequest:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "test_model"
    req.model_spec.version.value = 123
    for k, tp in inputs.items():
        req.inputs[k].CopyFrom(tp)
    return req


def _scalar_float(v: float) -> tensor_pb2.TensorProto:  # no tensor_shape at all: a scalar
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[v])


def _one_string(s: bytes) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[s],
                                  tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                      dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code()


def test_missing_or_empty_model_spec(tf_stub):  # predict_impl_test.cc::MissingOrEmptyModelSpec
    assert _code(lambda: tf_stub.Predict(predict_pb2.PredictRequest(), timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT
    req = predict_pb2.PredictRequest()
    req.model_spec.SetInParent()  # present, no name
    assert _code(lambda: tf_stub.Predict(req, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT
    req.model_spec.name = "test"
    assert _code(lambda: tf_stub.Predict(req, timeout=5)) is grpc.StatusCode.NOT_FOUND


def test_empty_input_list(tf_stub):  # predict_impl_test.cc::EmptyInputList
    assert _code(lambda: tf_stub.Predict(_test_model_request(), timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT


def test_input_tensors_dont_match_model_spec_inputs(tf_stub):  # ::InputTensorsDontMatchModelSpecInputs
    req = _test_model_request(key=_one_string(b"any_key"))
    assert _code(lambda: tf_stub.Predict(req, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT


def test_output_filters_dont_match_model_spec_outputs(tf_stub):  # ::OutputFiltersDontMatchModelSpecOutputs
    req = _test_model_request(x=_scalar_float(2.0))
    req.output_filter.append("output_filter")
    assert _code(lambda: tf_stub.Predict(req, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT
    del req.output_filter[:]
    req.output_filter.append("y")
    tf_stub.Predict(req, timeout=5)
    req.output_filter.append("y")
    assert _code(lambda: tf_stub.Predict(req, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT


def test_input_tensors_have_wrong_type(tf_stub):  # predict_impl_test.cc::InputTensorsHaveWrongType
    req = _test_model_request(x=_one_string(b"any_key"))
    req.output_filter.append("y")
    assert _code(lambda: tf_stub.Predict(req, timeout=5)) is grpc.StatusCode.INVALID_ARGUMENT


def test_prediction_success(tf_stub):  # predict_impl_test.cc::PredictionSuccess
    result = tf_stub.Predict(_test_model_request(x=_scalar_float(2.0)), timeout=5)
    expected = predict_pb2.PredictResponse()
    expected.model_spec.name, expected.model_spec.signature_name = "test_model", "serving_default"
    expected.model_spec.version.value = 123
    expected.outputs["y"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[3.0],
                                                          tensor_shape=tensor_shape_pb2.TensorShapeProto()))
    assert result == expected


@pytest.mark.parametrize(("signature", "output"), [
    pytest.param("regress_x2_to_y3", "outputs", id="PredictionWithNamedRegressionSignature"),
    pytest.param("classify_x2_to_y3", "scores", id="PredictionWithNamedClassificationSignature"),
])
def test_prediction_with_named_example_signature(tf_stub, signature, output):
    # "Predict calls work with predict, classify, and regress signatures": the input under "inputs"
    req = _test_model_request(inputs=_scalar_float(2.0))
    req.model_spec.signature_name = signature
    result = tf_stub.Predict(req, timeout=5)
    expected = predict_pb2.PredictResponse()
    expected.model_spec.CopyFrom(req.model_spec)
    expected.outputs[output].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[4.0],
                                                             tensor_shape=tensor_shape_pb2.TensorShapeProto()))
    assert result == expected


# -- DT_HALF and DT_BFLOAT16 (not from TF's tests): Triton FP16/BF16 through both surfaces -------------
def _half_tensor(values, dtype, tf_dtype) -> tensor_pb2.TensorProto:
    bits = np.asarray(values, dtype=dtype).reshape(-1).view(np.uint16).astype(np.int32)
    return tensor_pb2.TensorProto(dtype=tf_dtype, half_val=bits.tolist(), tensor_shape=tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2), tensor_shape_pb2.TensorShapeProto.Dim(size=2)]))


@pytest.mark.parametrize(("signature", "dtype", "tf_dtype"), [
    ("half", np.float16, types_pb2.DT_HALF),
    ("bfloat16", ml_dtypes.bfloat16, types_pb2.DT_BFLOAT16),
])
def test_grpc_half_and_bfloat16(tf_stub, signature, dtype, tf_dtype):
    req = predict_pb2.PredictRequest()
    req.model_spec.name, req.model_spec.signature_name = "half_plus_two", signature
    req.inputs["x"].CopyFrom(_half_tensor([[1.0, 2.0], [3.0, 80.0]], dtype, tf_dtype))
    out = tf_stub.Predict(req, timeout=10).outputs["y"]
    assert out.dtype == tf_dtype and [d.size for d in out.tensor_shape.dim] == [2, 2]
    values = np.asarray(out.half_val, dtype=np.int32).astype(np.uint16).view(dtype)
    assert values.astype(np.float32).tolist() == [2.5, 3.0, 3.5, 42.0]


@pytest.mark.parametrize(("signature", "tf_name"), [("half", "half"), ("bfloat16", "bfloat16")])
def test_rest_half_and_bfloat16_as_tf_serving_refuses_them(tf_rest, signature, tf_name):
    path = "/v1/models/half_plus_two:predict"
    status, _, raw = tf_rest("POST", path, json.dumps({"signature_name": signature, "inputs": [1.0, 2.0]}))
    assert (status, json.loads(raw)) == (501, {"error": f"Conversion of JSON Value: 1.0 to type: {tf_name}"})
    # in 'instances' the conversion error is wrapped with the element's position, and the wrapper is a 400
    status, _, raw = tf_rest("POST", path, json.dumps({"signature_name": signature, "instances": [1.0, 2.0]}))
    assert (status, json.loads(raw)) == (400, {"error": "Failed to process element: 0 of 'instances' list. Error: "
                                                        f"UNIMPLEMENTED: Conversion of JSON Value: 1.0 to type: {tf_name}"})
    doc = json.loads(tf_rest("GET", "/v1/models/half_plus_two/metadata")[2])
    x = doc["metadata"]["signature_def"]["signature_def"][signature]["inputs"]["x"]
    assert x["dtype"] == {"half": "DT_HALF", "bfloat16": "DT_BFLOAT16"}[signature]


# -- json_tensor_test.cc cases that matter on the wire: nesting deeper than a recursive parser goes --
def test_deeply_nested_well_formed_through_the_gateway(tf_rest):  # json_tensor_test.cc::DeeplyNestedWellFormed
    body = '{"instances":[1], "nested":' + "[" * 500000 + "]" * 500000 + "}"
    status, _, raw = tf_rest("POST", f"/v1/models/{M}:predict", body)
    assert (status, json.loads(raw)) == (200, {"predictions": [2.5]})


def test_deeply_nested_malformed_through_the_gateway(tf_rest):  # json_tensor_test.cc::DeeplyNestedMalformed
    body = '{"signature_name":' + "[" * 500000 + "]" * 500000 + "}"
    status, _, raw = tf_rest("POST", f"/v1/models/{M}:predict", body)
    err = json.loads(raw)["error"]
    assert status == 400 and err.startswith('JSON Value: {\n    "signature_name": [[[[')
    assert err.endswith(" not formatted correctly. 'signature_name' key must be a string value.")


@pytest.mark.parametrize("signature", ["half_as_float", "bfloat16_as_float"])
def test_half_precision_model_shown_as_float(tf_rest, tf_stub, signature):
    # `half_as_float: true`: the FP16/BF16 tensors are DT_FLOAT to clients, converted by the gateway
    status, _, raw = tf_rest("POST", "/v1/models/half_plus_two:predict",
                          json.dumps({"signature_name": signature, "instances": [[1.0, 2.0], [3.0, 80.0]]}))
    assert (status, raw) == (200, b'{\n    "predictions": [[2.5, 3.0], [3.5, 42.0]\n    ]\n}')
    doc = json.loads(tf_rest("GET", "/v1/models/half_plus_two/metadata")[2])
    sd = doc["metadata"]["signature_def"]["signature_def"][signature]
    assert sd["inputs"]["x"]["dtype"] == sd["outputs"]["y"]["dtype"] == "DT_FLOAT"
    req = predict_pb2.PredictRequest()
    req.model_spec.name, req.model_spec.signature_name = "half_plus_two", signature
    req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0, 80.0],
                                                    tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                                        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)])))
    out = tf_stub.Predict(req, timeout=10).outputs["y"]
    assert out.dtype == types_pb2.DT_FLOAT and list(out.float_val) == [2.5, 42.0]
