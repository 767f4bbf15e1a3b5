"""A converted TF signature on CPU: model.onnx (next to this file) run with ONNX Runtime in Triton's
python backend. Copied into each version directory by `gateway import tfserving`
(gateway/migrate/repository.py); the inputs and outputs are the model's config.pbtxt."""

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = Path(__file__).with_name("model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        config = json.loads(args["model_config"])
        self.inputs = [t["name"] for t in config["input"]]
        self.outputs = [(t["name"], t["data_type"]) for t in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feed = {}
            for name in self.inputs:
                value = pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                if value.dtype == np.object_:  # TYPE_STRING arrives as bytes; ONNX strings are str
                    value = np.vectorize(lambda b: b.decode("utf-8", "surrogateescape"), otypes=[object])(value)
                feed[name] = value
            try:
                results = self.session.run([name for name, _ in self.outputs], feed)
            except Exception as e:  # noqa: BLE001 - ONNX Runtime's errors are the request's answer
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
                continue
            tensors = []
            for (name, dtype), value in zip(self.outputs, results, strict=True):
                if dtype == "TYPE_STRING":
                    value = np.array([v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v
                                      for v in value.reshape(-1)], dtype=object).reshape(value.shape)
                tensors.append(pb_utils.Tensor(name, value))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
