"""Triton's raw-input mode: a V2 REST infer whose JSON header is empty (``Inference-Header-Content-
Length: 0``, or an empty body) carries the model's one input as the whole body.

Triton's HTTP front end adds the body as a raw input (server ``src/http_server.cc``,
``EVBufferToRawInput``) and its core works out the tensor from the model's configuration (core
``src/infer_request.cc``, ``InferenceRequest::Normalize``); every output is answered in binary.
KServe V2 gRPC has no raw input, so the tensor is worked out here by the same rules and sent as an
ordinary input, with Triton's words for each refusal:

- the model must have exactly one input;
- its shape: ``[1]`` first when the model batches (``max_batch_size`` > 0), then the configured
  dimensions, of which at most one may be variable (``-1``); that one is the body's size divided
  by the other dimensions' product and the element size (integer division, as Triton's);
- a BYTES input must have the shape ``[1]`` (no variable dimension, one element); the body
  becomes that one element (its 4-byte length prepended, as Triton prepends it);
- any other type: the body must hold exactly the shape's bytes, else Triton's size mismatch,
  which names the raw input as Triton's core knows it (``raw_input``).
"""

from __future__ import annotations

import struct

from tritonclient.grpc import service_pb2

from gateway.core import datatypes
from gateway.core.errors import invalid
from gateway.core.tensors import ModelMetadata

from .jsontensor import Parsed

_PREFIX = "[request id: <id_unknown>] "  # Triton's LogRequest() of a request without an id
RAW_NAME = "raw_input"  # the name Triton's HTTP front end gives the raw input (its core's errors use it)


def shape(meta: ModelMetadata, model: str, size: int) -> list[int]:
    """The input's shape for a body of ``size`` bytes, or Triton's refusal."""
    if len(meta.inputs) != 1:
        raise invalid(f"{_PREFIX}Raw request must only have 1 input (found 1) to be deduced but got "
                      f"{len(meta.inputs)} inputs in '{model}' model configuration")
    spec = meta.inputs[0]
    dims = spec.shape[1:] if meta.max_batch_size else spec.shape  # metadata puts -1 first for the batch
    out = [1] if meta.max_batch_size else []
    dynamic, count = -1, 1
    for d in dims:
        if d == -1:
            if dynamic != -1:
                raise invalid(f"{_PREFIX}The shape of the raw input '{spec.name}' can not be deduced because there "
                              "are more than one variable-sized dimension")
            dynamic = len(out)
        else:
            count *= d
        out.append(d)
    if spec.datatype == "BYTES":
        if dynamic != -1 or count != 1:
            raise invalid(f"{_PREFIX}For BYTE datatype raw input '{spec.name}', the model must have input shape [1]")
        return out
    item = datatypes.by_v2(spec.datatype).size
    if dynamic != -1:
        # Triton divides by zero here when another dimension is 0 (a crash); 0 elements instead
        out[dynamic] = size // count // item if count else 0
    expected = item
    for d in out:
        expected *= d
    if size != expected:
        raise invalid(f"{_PREFIX}input byte size mismatch for input '{RAW_NAME}' for model '{model}'. Expected "
                      f"{expected}, got {size}")
    return out


def parse(meta: ModelMetadata, model: str, version: str, body) -> Parsed:
    """The ModelInfer request of a raw-input body, answered as Triton answers it: every output binary."""
    dims = shape(meta, model, len(body))
    spec = meta.inputs[0]
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    msg.inputs.add(name=spec.name, datatype=spec.datatype, shape=dims)
    raw = struct.pack("<I", len(body)) + bytes(body) if spec.datatype == "BYTES" else body
    return Parsed(msg, [raw], binary_default=True)
