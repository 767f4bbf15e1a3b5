"""A legacy TensorFlow Serving gRPC client, written as such clients are: tensorflow-serving-api's
own generated stubs, untouched. Run in a subprocess (its descriptors would clash with the
gateway's own copies in one process). Prints one JSON line of what it got back.

Usage: python tfserving_client.py HOST:PORT [labels]

- without ``labels``: Predict, GetModelMetadata, Regress, Classify, GetModelStatus, a missing model;
- ``labels``: version labels, per case the answer's fields, or [status code name, details] when the
  call fails.
"""

import json
import sys

import grpc
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

MODEL = "saved_model_half_plus_three"
PREDICT = "/tensorflow.serving.PredictionService/Predict"


def float_tensor(values: list[float]) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(values))])
    return tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=values, tensor_shape=shape)


def main(target: str) -> None:
    out = {}
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        req = predict_pb2.PredictRequest()
        req.model_spec.name = MODEL
        req.model_spec.signature_name = "serving_default"
        req.inputs["x"].CopyFrom(float_tensor([1.0, 2.0, 5.0]))
        out["predict"] = list(stub.Predict(req, 10.0).outputs["y"].float_val)

        md = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        md.model_spec.name = MODEL
        signatures = get_model_metadata_pb2.SignatureDefMap()
        stub.GetModelMetadata(md, 10.0).metadata["signature_def"].Unpack(signatures)
        out["signatures"] = sorted(signatures.signature_def)
        out["serving_default_inputs"] = sorted(signatures.signature_def["serving_default"].inputs)

        rr = regression_pb2.RegressionRequest()
        rr.model_spec.name = MODEL
        rr.model_spec.signature_name = "tensorflow/serving/regress"
        for v in (1.0, 2.0):
            rr.input.example_list.examples.add().features.feature["x"].float_list.value.append(v)
        out["regress"] = [r.value for r in stub.Regress(rr, 10.0).result.regressions]

        cr = classification_pb2.ClassificationRequest()
        cr.model_spec.name = MODEL
        cr.model_spec.signature_name = "tensorflow/serving/classify"
        cr.input.example_list.examples.add().features.feature["x"].float_list.value.append(1.0)
        out["classify"] = [[(c.label, c.score) for c in cl.classes]
                           for cl in stub.Classify(cr, 10.0).result.classifications]

        status = get_model_status_pb2.GetModelStatusRequest()
        status.model_spec.name = MODEL
        versions = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status, 10.0)
        out["status"] = [(v.version, get_model_status_pb2.ModelVersionStatus.State.Name(v.state))
                         for v in versions.model_version_status]

        missing = predict_pb2.PredictRequest()
        missing.model_spec.name = "half"
        missing.inputs["x"].CopyFrom(req.inputs["x"])
        try:
            stub.Predict(missing, 10.0)
        except grpc.RpcError as e:
            out["missing"] = [e.code().name, e.details()]
    print(json.dumps(out))


def spec_fields(ms) -> list:
    return [ms.name, ms.WhichOneof("version_choice"), ms.version.value, ms.signature_name]


def predict_request(name: str, **choice) -> predict_pb2.PredictRequest:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    for key, value in choice.items():  # in the order given: the oneof keeps the last one set
        if key == "version":
            req.model_spec.version.value = value
        else:
            req.model_spec.version_label = value
    req.inputs["input" if name == "hp3" else "x"].CopyFrom(float_tensor([1.0, 2.0]))
    return req


def call(fn, request, read):
    try:
        return read(fn(request, 10.0))
    except grpc.RpcError as e:
        return [e.code().name, e.details()]


def labels(target: str) -> None:
    out = {}
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        def predicted(resp):
            name = sorted(resp.outputs)[0]
            return [name, list(resp.outputs[name].float_val), spec_fields(resp.model_spec)]

        out["label"] = call(stub.Predict, predict_request("hp3", version_label="stable"), predicted)
        out["label_of_tf_test_model"] = call(
            stub.Predict, predict_request("saved_model_half_plus_two_2_versions", version_label="Version_Label"),
            predicted)
        # ModelSpec's version_choice is a oneof: a client that sets both sends the one set last
        out["version_then_label"] = call(stub.Predict, predict_request("hp3", version=7, version_label="stable"),
                                         predicted)
        out["label_then_version"] = call(stub.Predict, predict_request("hp3", version_label="stable", version=7),
                                         predicted)
        # both on the wire (two ModelSpec entries merged, as protobuf parses them): the last one wins
        raw = channel.unary_unary(PREDICT, request_serializer=lambda b: b,
                                  response_deserializer=predict_pb2.PredictResponse.FromString)
        label = predict_request("hp3", version_label="stable").SerializeToString()
        then_version = predict_pb2.PredictRequest()
        then_version.model_spec.version.value = 7
        out["wire_label_then_version"] = call(raw, label + then_version.SerializeToString(), predicted)
        out["wire_version_then_label"] = call(raw, then_version.SerializeToString() + label, predicted)
        out["unknown_label"] = call(stub.Predict, predict_request("hp3", version_label="nope"), predicted)
        out["empty_label"] = call(stub.Predict, predict_request("hp3", version_label=""), predicted)
        out["label_of_unknown_model"] = call(stub.Predict, predict_request("nope", version_label="stable"), predicted)
        out["label_of_model_without_labels"] = call(
            stub.Predict, predict_request("saved_model_half_plus_three", version_label="stable"), predicted)
        out["label_to_missing_version"] = call(stub.Predict, predict_request("hp3", version_label="broken"), predicted)

        md = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        md.model_spec.name, md.model_spec.version_label = "hp3", "canary"

        def metadata(resp):
            sigs = get_model_metadata_pb2.SignatureDefMap()
            resp.metadata["signature_def"].Unpack(sigs)
            return [spec_fields(resp.model_spec), sorted(sigs.signature_def)]

        out["metadata"] = call(stub.GetModelMetadata, md, metadata)
        md.model_spec.version_label = "nope"
        out["metadata_unknown_label"] = call(stub.GetModelMetadata, md, metadata)

        rr = regression_pb2.RegressionRequest()
        rr.model_spec.name, rr.model_spec.version_label = "hp3", "stable"
        rr.model_spec.signature_name = "regress_x_to_y"
        rr.input.example_list.examples.add().features.feature["x"].float_list.value.append(2.0)
        out["regress"] = call(stub.Regress, rr,
                              lambda r: [[x.value for x in r.result.regressions], spec_fields(r.model_spec)])

        status = get_model_status_pb2.GetModelStatusRequest()
        status.model_spec.name, status.model_spec.version_label = "hp3", "nope"
        out["status_ignores_the_label"] = call(
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus, status,
            lambda r: [[v.version, get_model_status_pb2.ModelVersionStatus.State.Name(v.state)]
                       for v in r.model_version_status])
    print(json.dumps(out))


if __name__ == "__main__":
    (labels if sys.argv[2:] == ["labels"] else main)(sys.argv[1])
