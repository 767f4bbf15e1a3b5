"""The peer of bench/kserve_side.py: KServe's transformer pattern in front of Triton, written the way
KServe's docs write a transformer. Run by .venv-kserve's Python (``make bench-kserve`` installs it from
requirements/bench-kserve.txt); neither the gateway nor its tests import it.

A TF Serving style (KServe V1) ``POST /v1/models/<name>:predict`` with ``{"instances": [...]}``:

- ``preprocess`` turns the instances into a V2 ``InferRequest`` (input ``x``, FP32, numpy data);
- ``predict`` is the SDK's own: ``kserve.Model.predict`` sends it to ``--predictor_host`` over gRPC
  (``--predictor_protocol grpc-v2``, the SDK's ``InferenceGRPCClient``, raw FP32 input contents);
- ``postprocess`` maps the ``InferResponse``'s first output back to ``{"predictions": [...]}``.

The ModelServer takes its own arguments (``--http_port``, ``--workers``, ``--model_name``,
``--predictor_host``, ``--predictor_protocol``, ``--enable_grpc``...) as in a deployment. One change
from one: uvicorn listens on 127.0.0.1, not on the 0.0.0.0 that KServe's RESTServer hard-codes (the
benchmark stays on loopback); nothing on the request path differs.
"""

from __future__ import annotations

import numpy as np
import uvicorn
from kserve import InferInput, InferRequest, InferResponse, Model, ModelServer, model_server


class _LoopbackConfig(uvicorn.Config):
    def __init__(self, app, **kwargs):
        kwargs["host"] = "127.0.0.1"
        super().__init__(app, **kwargs)


uvicorn.Config = _LoopbackConfig  # kserve.protocol.rest.server builds uvicorn.Config(app, host="0.0.0.0", ...)


class V1ToV2Transformer(Model):
    """V1 instances of a one-input, one-output FP32 model (saved_model_half_plus_three: x -> y)."""

    def __init__(self, name: str, input_name: str = "x"):
        super().__init__(name)
        self.input_name = input_name
        self.ready = True

    def preprocess(self, payload: dict, headers: dict[str, str] | None = None) -> InferRequest:
        data = np.asarray(payload["instances"], dtype=np.float32)
        infer_input = InferInput(name=self.input_name, shape=list(data.shape), datatype="FP32", data=data)
        return InferRequest(model_name=self.name, infer_inputs=[infer_input])

    def postprocess(self, result: InferResponse, headers: dict[str, str] | None = None,
                    response_headers: dict[str, str] | None = None) -> dict:
        return {"predictions": result.outputs[0].as_numpy().tolist()}


if __name__ == "__main__":
    args = model_server.args  # the ModelServer's own parser, as parsed at its import
    ModelServer().start([V1ToV2Transformer(args.model_name)])
