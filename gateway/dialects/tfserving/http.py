"""TensorFlow Serving REST listener (8501): one catch-all route, TF Serving's own path parsing.

Sanic cannot route ``<model>:predict`` inside one segment, so every path comes here and is matched
with TF Serving's regular expressions (case-insensitive). The request Content-Type is never
checked; every answer, errors included, is ``application/json``. Request ids, admission, the
deadline (30 s by default, TF Serving's REST timeout), metrics and error rendering are the edge's.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from google.protobuf import json_format
from sanic import Request, Sanic, response

from gateway.core.errors import invalid, not_found
from gateway.edge import Edge, current

from . import codec, jsonio, protocodec
from .mapping import Spec
from .service import Service

_PREDICT = re.compile(r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
                      re.I)
_STATUS = re.compile(r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
                     re.I)
_V1 = re.compile(r"/v1/.*", re.I)
_ORIGIN = re.compile(r"https?://.*", re.I)
JSON = "application/json"


def attach(app: Sanic, edge: Edge, service: Service) -> None:
    async def tfserving(request: Request, path: str):
        return response.raw(await dispatch(service, request), content_type=JSON)

    edge.route(app, tfserving, "/<path:path>", ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"], "rest")


def _version(text: str | None) -> int | None:
    if text is None:
        return None
    value = int(text)
    if value >= 2**63:
        raise invalid(f"Failed to convert version: {text} to numeric.")
    return value


async def dispatch(service: Service, request: Request) -> bytes:
    path, method = request.path, request.method
    if method == "OPTIONS":
        if not _ORIGIN.fullmatch(request.headers.get("origin", "")):
            raise invalid("Origin header is missing in CORS preflight")
        return b""
    m = _PREDICT.fullmatch(path)
    if m and method == "POST":
        spec = Spec(unquote(m[1]), _version(m[2]), unquote(m[3]) if m[3] else None)
        call = current()
        call.model, call.route = spec.name, m[4].lower()
        return await _infer(service, spec, call.route, request.body)
    m = _STATUS.fullmatch(path)
    if m and method == "GET":
        if not m[1]:
            raise invalid("Missing model name in request.")
        spec = Spec(unquote(m[1]), _version(m[2]), unquote(m[3]) if m[3] else None)
        call = current()
        call.model, call.route = spec.name, "metadata" if m[4] else "status"
        return await (_metadata(service, spec) if m[4] else _status(service, spec))
    if _V1.fullmatch(path):
        raise invalid(f"Malformed request: {method} {path}")
    raise not_found(f"Not found: {method} {path}")


async def _infer(service: Service, spec: Spec, verb: str, body: bytes) -> bytes:
    doc = jsonio.loads(body)
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} Is not object")
    sig = doc.get("signature_name", "")
    if not isinstance(sig, str):
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} not formatted correctly. 'signature_name' key "
                      "must be a string value.")
    target = await service.resolve(Spec(spec.name, spec.version, spec.label, sig))
    if verb == "predict":
        inputs, row = codec.parse_predict(doc, target.signature)
        _, outs = await service.predict(target, inputs)
        return codec.write_predict(outs, row)
    exs, context = codec.parse_examples(doc, verb)
    _, result = await service.run_examples(target, verb, exs, context)
    return codec.write_regress(result) if verb == "regress" else codec.write_classify(*result)


async def _metadata(service: Service, spec: Spec) -> bytes:
    version, sigs = await service.metadata(spec)
    ms = json_format.MessageToDict(protocodec.model_spec(spec.name, version, ""), preserving_proto_field_name=True,
                                   always_print_fields_with_no_presence=True)
    sdm = json_format.MessageToDict(protocodec.signature_def_map(sigs), preserving_proto_field_name=True,
                                    always_print_fields_with_no_presence=True)
    return jsonio.dumps({"model_spec": ms, "metadata": {"signature_def": sdm}})


async def _status(service: Service, spec: Spec) -> bytes:
    rows = await service.status(spec)
    text = json_format.MessageToJson(protocodec.status_response(rows), indent=1,
                                     always_print_fields_with_no_presence=True)
    return text.encode()
