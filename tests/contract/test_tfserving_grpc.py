"""TF Serving gRPC (:8500) against the real Triton through the stubs generated from TF Serving's
protos (gateway/_proto: same packages, paths, messages and field numbers as tensorflow-serving-api),
written the way legacy clients write them."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from gateway._proto.tensorflow.core.example import example_pb2, feature_pb2
from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    regression_pb2,
)

HP3 = "saved_model_half_plus_three"


@pytest.fixture(scope="module")
def models(tf_channel):
    return model_service_pb2_grpc.ModelServiceStub(tf_channel)


def _shape(*dims):
    return tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])


def _predict(name=HP3, **inputs):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    for k, tp in inputs.items():
        req.inputs[k].CopyFrom(tp)
    return req


def _float_content(values):
    arr = np.asarray(values, dtype=np.float32)
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=_shape(*arr.shape),
                                  tensor_content=arr.tobytes())


def test_predict_tensor_content_answers_typed_float_val(tf_stub):
    resp = tf_stub.Predict(_predict(x=_float_content([1.0, 2.0, 5.0])), 10.0)
    y = resp.outputs["y"]
    assert list(y.float_val) == [3.5, 4.0, 5.5]
    assert y.dtype == types_pb2.DT_FLOAT and [d.size for d in y.tensor_shape.dim] == [3]
    assert not y.tensor_content
    assert resp.model_spec.name == HP3
    assert resp.model_spec.version.value == 123
    assert resp.model_spec.signature_name == "serving_default"


def test_predict_typed_values_and_broadcast_scalar(tf_stub):
    typed = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=_shape(2), float_val=[1.0, 2.0])
    assert list(tf_stub.Predict(_predict(x=typed)).outputs["y"].float_val) == [3.5, 4.0]
    # tf.make_tensor_proto(1.0, shape=[4]) sends ONE float_val to be broadcast
    one = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=_shape(4), float_val=[1.0])
    assert list(tf_stub.Predict(_predict(x=one)).outputs["y"].float_val) == [3.5] * 4


def test_predict_future_like_mnist_client(tf_stub):
    fut = tf_stub.Predict.future(_predict(x=_float_content([2.0, 4.0])), 5.0)
    assert list(fut.result().outputs["y"].float_val) == [4.0, 5.0]


def test_predict_multi_tensor_with_output_filter(tf_stub):
    tag = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_shape=_shape(2, 1), string_val=[b"ab", b"xyz"])
    signal = _float_content([[1, 2, 3, 4], [0, 0, 0, 1]])
    count = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, tensor_shape=_shape(2, 1), int_val=[2])  # broadcast
    req = _predict("multi_tensor", tag=tag, signal=signal, count=count)
    req.output_filter.extend(["tag_bytes", "total"])
    resp = tf_stub.Predict(req)
    assert set(resp.outputs) == {"tag_bytes", "total"}
    assert list(resp.outputs["tag_bytes"].string_val) == [b"ba\x00\xff", b"zyx\x00\xff"]
    assert list(resp.outputs["total"].double_val) == [20.0, 2.0]
    assert resp.outputs["total"].dtype == types_pb2.DT_DOUBLE


def _examples(*xs, context=None):
    exs = [example_pb2.Example(features=feature_pb2.Features(
        feature={"x": feature_pb2.Feature(float_list=feature_pb2.FloatList(value=[x]))})) for x in xs]
    return exs


def test_regress_same_numbers_as_rest(tf_stub):
    req = regression_pb2.RegressionRequest()
    req.model_spec.name = HP3
    req.model_spec.signature_name = "tensorflow/serving/regress"
    req.input.example_list.examples.extend(_examples(1.0, 2.0))
    resp = tf_stub.Regress(req)
    assert [r.value for r in resp.result.regressions] == [3.5, 4.0]
    assert resp.model_spec.signature_name == "tensorflow/serving/regress"


def test_classify_with_context(tf_stub):
    req = classification_pb2.ClassificationRequest()
    req.model_spec.name = HP3
    req.model_spec.signature_name = "tensorflow/serving/classify"
    lst = req.input.example_list_with_context
    lst.examples.extend([example_pb2.Example(), example_pb2.Example()])
    lst.context.CopyFrom(_examples(20.0)[0])
    resp = tf_stub.Classify(req)
    assert [[(c.label, c.score) for c in r.classes] for r in resp.result.classifications] == [[("", 13.0)]] * 2


def test_multi_inference(tf_stub):
    req = inference_pb2.MultiInferenceRequest()
    for sig in ("tensorflow/serving/regress", "tensorflow/serving/classify"):
        t = req.tasks.add(method_name=sig)
        t.model_spec.name = HP3
        t.model_spec.signature_name = sig
    req.input.example_list.examples.extend(_examples(1.0))
    resp = tf_stub.MultiInference(req)
    assert resp.results[0].regression_result.regressions[0].value == 3.5
    assert resp.results[1].classification_result.classifications[0].classes[0].score == 3.5


def test_get_model_metadata_signature_def_map_in_any(tf_stub):
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = HP3
    req.metadata_field.append("signature_def")
    resp = tf_stub.GetModelMetadata(req)
    assert resp.model_spec.version.value == 123
    any_ = resp.metadata["signature_def"]
    assert any_.type_url == "type.googleapis.com/tensorflow.serving.SignatureDefMap"
    sdm = get_model_metadata_pb2.SignatureDefMap()
    assert any_.Unpack(sdm)
    sd = sdm.signature_def["serving_default"]
    assert sd.method_name == "tensorflow/serving/predict"
    assert sd.inputs["x"].dtype == types_pb2.DT_FLOAT and sd.outputs["y"].name == "y"
    assert "tensorflow/serving/regress" in sdm.signature_def


def test_get_model_status(models):
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = HP3
    resp = models.GetModelStatus(req)
    [mvs] = resp.model_version_status
    assert (mvs.version, mvs.state, mvs.status.error_code) == (
        123, get_model_status_pb2.ModelVersionStatus.AVAILABLE, 0)


def _code(fn, req):
    with pytest.raises(grpc.RpcError) as e:
        fn(req)
    return e.value.code(), e.value.details()


def test_errors_have_tf_serving_codes_and_texts(tf_stub, models):
    assert _code(tf_stub.Predict, _predict("half", x=_float_content([1.0]))) == (
        grpc.StatusCode.NOT_FOUND, "Servable not found for request: Latest(half)")
    req = _predict(x=_float_content([1.0]))
    req.model_spec.version.value = 7
    assert _code(tf_stub.Predict, req) == (
        grpc.StatusCode.NOT_FOUND, f"Servable not found for request: Specific({HP3}, 7)")
    req = _predict(x=_float_content([1.0]))
    req.model_spec.signature_name = "nope"
    assert _code(tf_stub.Predict, req) == (grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found.')
    req = _predict(x=_float_content([1.0]))
    req.output_filter.append("z")
    assert _code(tf_stub.Predict, req) == (grpc.StatusCode.INVALID_ARGUMENT,
                                        "output tensor alias not found in signature: z Outputs expected to be in "
                                        "the set {y}.")
    code, msg = _code(tf_stub.Predict, _predict(z=_float_content([1.0])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and msg.startswith("input size does not match signature")
    req = get_model_metadata_pb2.GetModelMetadataRequest()
    req.model_spec.name = HP3
    assert _code(tf_stub.GetModelMetadata, req) == (
        grpc.StatusCode.INVALID_ARGUMENT, "GetModelMetadataRequest must specify at least one metadata_field")
    req = get_model_status_pb2.GetModelStatusRequest()
    req.model_spec.name = "nope"
    assert _code(models.GetModelStatus, req) == (grpc.StatusCode.NOT_FOUND, "Could not find any versions of model nope")
    # classify/regress word an unknown signature as TF Serving's classifier.cc/regressor.cc
    creq = classification_pb2.ClassificationRequest()
    creq.model_spec.name, creq.model_spec.signature_name = HP3, "nope"
    creq.input.example_list.examples.add().features.feature["x"].float_list.value.append(1.0)
    assert _code(tf_stub.Classify, creq) == (grpc.StatusCode.INVALID_ARGUMENT, "No signature was found with the name: nope")
    code, _ = _code(models.HandleReloadConfigRequest, model_management_pb2.ReloadConfigRequest())
    assert code == grpc.StatusCode.UNIMPLEMENTED
    # still serving
    assert list(tf_stub.Predict(_predict(x=_float_content([1.0]))).outputs["y"].float_val) == [3.5]


def test_repeated_requests_read_by_their_form_answer_their_own_values(tf_stub, tf_channel):
    """Predict reads a request shaped like one it parsed before by its learned form
    (gateway/dialects/tfserving/predictform.py): each answer is its own request's, and the checks
    still answer every request as the first."""
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = rng.standard_normal(6).astype(np.float32)
        typed = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=_shape(2, 3), float_val=x.tolist())
        for tp in (typed, _float_content(x.reshape(2, 3))):
            y = tf_stub.Predict(_predict(x=tp), 10.0).outputs["y"]
            assert list(y.float_val) == (x * np.float32(0.5) + np.float32(3)).tolist()
            assert [d.size for d in y.tensor_shape.dim] == [2, 3]
    double = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=_shape(2), double_val=[1.0, 2.0])
    for _ in range(2):
        assert _code(tf_stub.Predict, _predict(x=double)) == (
            grpc.StatusCode.INVALID_ARGUMENT, "Expects arg[0] to be float but double is provided")
    # bytes that are no PredictRequest: grpc.aio's own answer, as before Predict parsed its requests itself
    call = tf_channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
    with pytest.raises(grpc.RpcError) as err:
        call(b"\xff\xff\xff", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert err.value.details() == ("Unexpected <class 'google.protobuf.message.DecodeError'>: "
                                   "Error parsing message with type 'tensorflow.serving.PredictRequest'")
    assert dict(err.value.trailing_metadata())["x-request-id"]
