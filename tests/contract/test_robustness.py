"""Hostile input across dialects: always a client error in the dialect's envelope, never a 5xx,
never an unbounded allocation, and the gateway keeps serving."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def _post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_tfserving_rest_refuses_tensors_nested_deeper_than_tensors_go(gateway):
    # TF Serving's parser reads any depth (kParseIterativeFlag) and then judges the tensor: a rank
    # past TensorShape's 254 dims is a client error, answered without recursion
    body = b'{"instances": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, out = _post(gateway.url("tfserving_rest") + "/v1/models/saved_model_half_plus_three:predict", body)
    assert status == 400 and out["error"].startswith("Failed to process element: 0 of 'instances' list. Error: ")
    assert out["error"].endswith(" is nested more than 254 levels deep")


@pytest.mark.parametrize("shape", [[4294967295, 4294967295], [100000, 100000]])
def test_grps_shapes_that_cannot_be_filled_are_a_400(gateway, shape):
    body = json.dumps({"gtensors": {"tensors": [{"name": "in1", "dtype": "DT_INT32", "shape": shape,
                                                 "flat_int32": [1]}]}}).encode()
    status, out = _post(gateway.url("grps_http") + "/grps/v1/infer/predict", body)
    assert (status, out["status"]["code"], out["status"]["status"]) == (200, 400, "FAILURE")  # HTTP 200: GRPS's C++
    assert "-" not in out["status"]["msg"].split("shape")[-1]  # no overflowed element counts


def test_tfserving_grpc_broadcast_to_a_huge_shape_is_refused_not_allocated(gateway):
    with grpc.insecure_channel(gateway.target("tfserving_grpc")) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        req = predict_pb2.PredictRequest()
        req.model_spec.name = "saved_model_half_plus_three"
        dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=100000), tensor_shape_pb2.TensorShapeProto.Dim(size=100000)]
        req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0],
                                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims)))
        with pytest.raises(grpc.RpcError) as err:
            stub.Predict(req, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT, float_val=[1.0, 2.0, 5.0],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=3)])))
        assert list(stub.Predict(req, timeout=30).outputs["y"].float_val) == [3.5, 4.0, 5.5]


def test_tfserving_rest_half_a_surrogate_pair_is_a_parse_error(gateway):
    # rapidjson refuses "\ud800" alone; the gateway must not let it reach its UTF-8 encoders (a 500)
    url = gateway.url("tfserving_rest") + "/v1/models/multi_tensor:predict"
    status, out = _post(url, b'{"inputs": {"tag": ["\\ud800"], "signal": [[1, 2, 3, 4]], "count": [[1]]}}')
    assert status == 400 and out["error"].startswith("JSON Parse error: The surrogate pair in string is invalid.")
