"""Triton's generate extension (``/generate``, ``/generate_stream``) ⇄ ``ModelStreamInfer``, as
Triton's HTTP front end converts it (server ``src/http_server.cc``: ``ConvertGenerateRequest``,
``ExactMappingInput``, ``GenerateRequestClass::FinalizeResponse``, ``ExactMappingOutput``).

Request: each top-level key that names a model input becomes that tensor (its dtype from the model
metadata; the metadata shape's -1 filled from the value count); every other key a request
parameter. Answer: one flat object per response, keys in sorted order (Triton's ``std::map``):
``id``, ``model_name``, ``model_version``, the response parameters and every output (a value
when it has one element, else an array). ``generate`` wants exactly one response; ``generate_stream``
writes each as an SSE event (``data: {...}\\n\\n``), errors in-band as ``data: {"error":"..."}``.
"""

from __future__ import annotations

from tritonclient.grpc import service_pb2

from gateway.core import datatypes
from gateway.core.errors import invalid
from gateway.core.tensors import ModelMetadata

from . import jsontensor, rjson

FINAL = "triton_final_response"
EMPTY_FINAL = "triton_enable_empty_final_response"
ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate stream for model that generates "
                "various number of responses")


def _shape(name: str, dims: tuple[int, ...], count: int) -> list[int]:
    shape = list(dims)
    for d in reversed(shape):
        if d != -1:
            if d == 0 or count % d:
                raise invalid(f"The schema can not convert input '{name}' to tensor with proper shape")
            count //= d
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i], count = count, 1
    if count != 1:
        raise invalid(f"The schema can not convert input '{name}' to tensor with proper shape")
    return shape


def convert(doc, meta: ModelMetadata, model: str, version: str) -> jsontensor.Parsed:
    """``ConvertGenerateRequest`` with Triton's default (unspecified) schema."""
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    if isinstance(doc, dict) and "id" in doc:
        if type(doc["id"]) is not str:
            raise invalid("Unable to parse 'id': attempt to access JSON non-string as string")
        msg.id = doc["id"]
    if not isinstance(doc, dict):
        raise invalid("attempt to get members for non-object")
    parsed = jsontensor.Parsed(msg)
    inputs = {s.name: s for s in meta.inputs}
    for key, value in doc.items():
        spec = inputs.get(key)
        if spec is None:
            jsontensor.param(msg.parameters, key, value)
            continue
        data = value if type(value) is list else [value]
        count = len(data)
        if spec.datatype == "BYTES":
            raw = jsontensor.bytes_values(jsontensor._flatten(data), key)
            size = len(raw)
        else:
            try:
                size = count * datatypes.by_v2(spec.datatype).size
            except KeyError:
                raise invalid(f"input '{key}' has unsupported datatype {spec.datatype}") from None
            raw = b""
        if size == 0:
            # no data: Triton adds the input without a shape and its core lets it through; gRPC
            # needs one, the metadata's with its -1 as 0
            msg.inputs.add(name=key, datatype=spec.datatype, shape=[0 if d == -1 else d for d in spec.shape])
            parsed.raws.append(b"")
            continue
        shape = _shape(key, spec.shape, count)
        if spec.datatype != "BYTES":
            raw = jsontensor.values(key, spec.datatype, data, count, shape)
        msg.inputs.add(name=key, datatype=spec.datatype, shape=shape)
        parsed.raws.append(raw)
    msg.parameters[EMPTY_FINAL].bool_param = True
    return parsed


def render(resp: service_pb2.ModelInferResponse) -> bytes:
    """One response as Triton's generate object."""
    entries: dict[str, bytes] = {}
    if resp.id:
        entries["id"] = rjson.string(resp.id)
    entries["model_name"] = rjson.string(resp.model_name)
    entries["model_version"] = rjson.string(resp.model_version)
    for key, p in resp.parameters.items():
        if key != FINAL:
            entries.setdefault(key, jsontensor.param_text(p))
    raws = resp.raw_output_contents
    for i, out in enumerate(resp.outputs):
        if out.name in entries:
            continue
        count = 1
        for d in out.shape:
            count *= d
        text = jsontensor.data_text(out.name, out.datatype, raws[i] if i < len(raws) else b"", count)
        entries[out.name] = text[1:-1] if count == 1 else text
    return b"{" + b",".join(rjson.string(k) + b":" + entries[k] for k in sorted(entries)) + b"}"


def is_final(resp: service_pb2.ModelInferResponse) -> bool:
    p = resp.parameters.get(FINAL)
    return p is None or p.bool_param
