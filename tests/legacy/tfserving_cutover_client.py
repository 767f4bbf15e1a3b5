"""tensorflow-serving-api's own stubs through the cutover routes (tests/contract/test_cutover_grpc.py).
Run in a subprocess (its descriptors would clash with the gateway's own copies in one process).

Usage: python tfserving_cutover_client.py HOST:PORT MODEL...

Prints one JSON line: per model, the Predict answer as tensorflow-serving-api parsed it and wrote
it again (hex), or [status code name, details] when the call fails; and the trailing x-request-id.
"""

import json
import sys

import grpc
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def main(target: str, models: list[str]) -> None:
    out = {}
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for model in models:
            req = predict_pb2.PredictRequest()
            req.model_spec.name = model
            shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=3)])
            req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0, 2.0, 5.0],
                                                            tensor_shape=shape))
            try:
                resp, call = stub.Predict.with_call(req, 30, metadata=(("x-request-id", f"tfs-{model}"),))
                out[model] = [resp.SerializeToString(deterministic=True).hex(),
                              dict(call.trailing_metadata()).get("x-request-id")]
            except grpc.RpcError as err:
                out[model] = [err.code().name, err.details()]
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
