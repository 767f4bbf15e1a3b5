"""TF Serving gRPC answers as neutral tensors, for the cutover's comparator (docs/migration.md).

Each answer, the legacy server's or the gateway's own, is read from its bytes with this dialect's
own reader (``protocodec.tensor_from_proto``) into ``{name: Tensor}``:

    Predict           each output under its alias; the answer's model_spec as ``model_spec``
    Classify          ``classes.label`` (BYTES [N, C]) and ``classes.score`` (FP32 [N, C])
    Regress           ``value`` (FP32 [N])
    MultiInference    the same per task, prefixed ``<i>/``
    GetModelMetadata, GetModelStatus
                      the whole message as one ``message`` BYTES tensor (its JSON, keys
                      sorted): equal or not, nothing finer to say

and the request's model name is read from its bytes (``model_of``) without parsing the rest. The
Answer's ``canonical`` form: the message serialized deterministically (a map's entries in key order,
which upb otherwise writes in an order of each process's own), the sorted-key JSON for the whole
messages (their packed Any as well): two answers differing only there are the same to every client.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from gateway._proto.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    predict_pb2,
    regression_pb2,
)
from gateway.core.protowire import fields
from gateway.core.tensors import Tensor
from gateway.cutover import Answer

from . import protocodec

PREDICTION = "/tensorflow.serving.PredictionService/"
MODEL = "/tensorflow.serving.ModelService/"
PATHS = {"Predict": PREDICTION, "Classify": PREDICTION, "Regress": PREDICTION, "MultiInference": PREDICTION,
         "GetModelMetadata": PREDICTION, "GetModelStatus": MODEL}
_SPEC = 1 << 3 | 2  # model_spec = 1 (Predict, Classify, Regress, metadata and status requests)
_NAME = 1 << 3 | 2  # ModelSpec.name = 1


def path(method: str) -> str:
    return PATHS[method] + method


def model_of(method: str, data: bytes) -> str:
    """The request's model name, read from its bytes (the last ``model_spec.name`` wins, as
    protobuf merges a repeated message field); MultiInference: its first task's. "" when the
    bytes are not a message: the route's choice then falls to the dialect's default."""
    try:
        top = fields(data)
        if method == "MultiInference":  # tasks = 1, each an InferenceTask with model_spec = 1
            for tag, _, p, q in top:
                if tag == _SPEC:
                    return _spec_name(data, fields(data, p, q))
            return ""
        return _spec_name(data, top)
    except DecodeError:
        return ""


def _spec_name(data: bytes, top) -> str:
    name = b""
    for tag, _, p, q in top:
        if tag == _SPEC:
            for t, _, a, b in fields(data, p, q):
                if t == _NAME:
                    name = data[a:b]
    return name.decode("utf-8", "replace")


def _spec_tensor(spec) -> Tensor:
    which = spec.WhichOneof("version_choice")
    version = str(spec.version.value) if which == "version" else spec.version_label if which else ""
    text = f"{spec.name}|{version}|{spec.signature_name}".encode()
    return Tensor("model_spec", np.array([text], dtype=object), "BYTES")


def _predict(data: bytes) -> dict[str, Tensor]:
    resp = predict_pb2.PredictResponse.FromString(data)
    out = {}
    for alias in sorted(resp.outputs):
        arr, v2 = protocodec.tensor_from_proto(resp.outputs[alias], alias)
        out[alias] = Tensor(alias, arr, v2)
    out["model_spec"] = _spec_tensor(resp.model_spec)
    return out


def _classes(result, prefix: str = "") -> dict[str, Tensor]:
    rows = result.classifications
    width = max((len(c.classes) for c in rows), default=0)
    labels = np.full((len(rows), width), b"", dtype=object)
    scores = np.full((len(rows), width), np.nan, dtype=np.float32)
    for i, c in enumerate(rows):
        for j, k in enumerate(c.classes):
            labels[i, j], scores[i, j] = k.label.encode(), k.score
    return {prefix + "classes.label": Tensor(prefix + "classes.label", labels, "BYTES"),
            prefix + "classes.score": Tensor(prefix + "classes.score", scores, "FP32")}


def _values(result, prefix: str = "") -> dict[str, Tensor]:
    values = np.array([r.value for r in result.regressions], dtype=np.float32)
    return {prefix + "value": Tensor(prefix + "value", values, "FP32")}


def _classify(data: bytes) -> dict[str, Tensor]:
    resp = classification_pb2.ClassificationResponse.FromString(data)
    return {**_classes(resp.result), "model_spec": _spec_tensor(resp.model_spec)}


def _regress(data: bytes) -> dict[str, Tensor]:
    resp = regression_pb2.RegressionResponse.FromString(data)
    return {**_values(resp.result), "model_spec": _spec_tensor(resp.model_spec)}


def _multi(data: bytes) -> dict[str, Tensor]:
    resp = inference_pb2.MultiInferenceResponse.FromString(data)
    out = {}
    for i, r in enumerate(resp.results):
        prefix = f"{i}/"
        kind = r.WhichOneof("result")
        if kind == "classification_result":
            out.update(_classes(r.classification_result, prefix))
        elif kind == "regression_result":
            out.update(_values(r.regression_result, prefix))
        out[prefix + "model_spec"] = _spec_tensor(r.model_spec)
    return out


def _whole(cls):
    def read(data: bytes) -> dict[str, Tensor]:
        # parsed and written as JSON with sorted keys: map order does not count, inside the packed
        # Any of GetModelMetadata too (a deterministic serialization keeps the Any's bytes as they came)
        text = json_format.MessageToJson(cls.FromString(data), sort_keys=True, indent=None).encode()
        return {"message": Tensor("message", np.array([text], dtype=object), "BYTES")}
    return read


READERS = {"Predict": _predict, "Classify": _classify, "Regress": _regress, "MultiInference": _multi,
           "GetModelMetadata": _whole(get_model_metadata_pb2.GetModelMetadataResponse),
           "GetModelStatus": _whole(get_model_status_pb2.GetModelStatusResponse)}


def tensors(method: str, data: bytes) -> dict[str, Tensor]:
    """The answer of ``method`` (its bytes) as neutral tensors; DecodeError or GatewayError when
    they are not one (counted by the caller as that side's error)."""
    return READERS[method](data)


MESSAGES = {"Predict": predict_pb2.PredictResponse, "Classify": classification_pb2.ClassificationResponse,
            "Regress": regression_pb2.RegressionResponse, "MultiInference": inference_pb2.MultiInferenceResponse}


def answer(method: str, data: bytes) -> Answer:
    """An OK answer's bytes as the comparator's Answer (gateway.cutover.compare)."""
    outs = tensors(method, data)
    cls = MESSAGES.get(method)
    canonical = outs["message"].data[0] if cls is None else cls.FromString(data).SerializeToString(deterministic=True)
    return Answer(outputs={name: t.data for name, t in outs.items()}, fields=tuple(outs), canonical=canonical)


__all__ = ["PATHS", "answer", "model_of", "path", "tensors"]
