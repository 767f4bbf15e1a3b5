"""KServe V2 over HTTP/REST (``v2_http``, 8000: Triton's own HTTP port), translated into V2 gRPC.

One catch-all route; paths are matched with Triton's own regular expressions in Triton's order
(server ``src/http_server.cc``, ``HTTPAPIServer::Handle``), so every answer (status, body, the
``{"error":"..."}`` envelope, 405 and 404 texts) is the one Triton's HTTP front end gives:

    GET  /v2, /v2/health/live|ready                       ServerMetadata, ServerLive, ServerReady
    GET  /v2/models/M[/versions/V][/ready|/config|/stats] ModelMetadata, ModelReady, ModelConfig, ...
    GET  /v2/models/stats                                 ModelStatistics of every model
    POST /v2/models/M[/versions/V]/infer                  ModelInfer (jsontensor: JSON and binary tensors)
    POST /v2/models/M[/versions/V]/generate[_stream]      ModelStreamInfer (generate: one answer, or SSE)
    POST /v2/repository/index                             RepositoryIndex
    GET  /v2/{system,cuda}sharedmemory[/region/R]/status  System/CudaSharedMemoryStatus (read-only)
    load/unload, shared-memory registration, trace, log   the control plane: 403 unless
                                                          dialects.v2.control_plane (load/unload then
                                                          forwarded; the others 501 here)

The model scope (``dialects.v2.triton_models``) answers other models as Triton answers an
unknown one; the edge adds keys, request ids, admission, deadlines and metrics. A client that
goes away cancels the Triton call (``finally: call.cancel()``).
"""

from __future__ import annotations

import base64
import re
import zlib

from sanic import Request, Sanic
from tritonclient.grpc import service_pb2

from gateway.call import current
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.edge import Edge, httpbody
from gateway.process import offload
from gateway.upstream.wire import serialize_message

from . import calls, documents, jsontensor, plain, rawinput, sse
from .calls import JSON, Rest
from .errors import Denied
from .jsonbody import loads
from .state import State

_MODEL = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
                    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?")
_HEALTH = re.compile(r"/v2(?:/health/(live|ready))?")
_SHM = re.compile(r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_REPO = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_TRACE = "/v2/trace/setting"
_ATOI = re.compile(r"\s*[-+]?\d+")
HEADER_LENGTH = "inference-header-content-length"


async def dispatch(rest: Rest, request: Request):
    path = request.path
    edge_call = current()
    if path == "/v2/models/stats":
        edge_call.route = "stats"
        return await _stats(rest, request, "", "")
    if path == "/v2/logging":
        return _control(rest, edge_call, "LogSettings")
    m = _MODEL.fullmatch(path)
    if m:
        model, version, kind = m[1], calls.version(m[2]), m[3] or "metadata"
        edge_call.model, edge_call.route = model, kind
        if kind == "infer":
            return await _infer(rest, request, model, version)
        if kind == "ready":
            return await _ready(rest, request, model, version)
        if kind == "config":
            return await _config(rest, request, model, version)
        if kind == "stats":
            return await _stats(rest, request, model, version)
        if kind == "metadata":
            return await _metadata(rest, request, model, version)
        if kind in ("generate", "generate_stream"):
            return await sse.handle(rest, request, model, version, kind == "generate_stream")
        if not m[2]:
            return _control(rest, edge_call, "TraceSetting")
    if path == "/v2":
        edge_call.route = "server_metadata"
        calls.require(request, "GET")
        return calls.answer(documents.server_metadata(await rest.call("ServerMetadata", service_pb2.ServerMetadataRequest())))
    m = _HEALTH.fullmatch(path)
    if m:
        edge_call.route = m[1]
        calls.require(request, "GET")
        name = "ServerLive" if m[1] == "live" else "ServerReady"
        req = service_pb2.ServerLiveRequest() if m[1] == "live" else service_pb2.ServerReadyRequest()
        ok = getattr(await rest.call(name, req), m[1])
        return calls.answer(b"", 200 if ok else 400, calls.EMPTY)  # Triton's: the status, an empty body
    m = _SHM.fullmatch(path)
    if m:
        if m[3] != "status":  # registration: the control plane
            return _control(rest, edge_call, "SharedMemory")
        return await _shared_memory_status(rest, request, edge_call, m[1] == "system", m[2] or "")
    m = _REPO.fullmatch(path)
    if m:
        if m[2] == "index":
            edge_call.route = "repository_index"
            return await _index(rest, request)
        return await _load(rest, request, edge_call, m[3], m[4])
    if path == _TRACE:
        return _control(rest, edge_call, "TraceSetting")
    edge_call.route = "_unrouted"
    raise GatewayError(ErrorKind.NOT_FOUND, "Not Found")


def _control(rest: Rest, edge_call, rpc: str):
    edge_call.route = "control"
    if not rest.control:
        raise Denied(rpc)
    raise GatewayError(ErrorKind.UNIMPLEMENTED, f"{rpc} is not served on this listener (use V2 gRPC)")


async def _shared_memory_status(rest: Rest, request: Request, edge_call, system: bool, region: str):
    """The regions registered with Triton (read-only, as its own HTTP front end lists them)."""
    edge_call.route = "shared_memory_status"
    calls.require(request, "GET")
    if system:
        resp = await rest.call("SystemSharedMemoryStatus", service_pb2.SystemSharedMemoryStatusRequest(name=region))
    else:
        resp = await rest.call("CudaSharedMemoryStatus", service_pb2.CudaSharedMemoryStatusRequest(name=region))
    return calls.answer(documents.shared_memory_status(resp, system))


async def _metadata(rest: Rest, request: Request, model: str, version: str):
    calls.require(request, "GET")
    rest.check(model)
    resp = await rest.call("ModelMetadata", service_pb2.ModelMetadataRequest(name=model, version=version), model)
    return calls.answer(documents.model_metadata(resp))


async def _ready(rest: Rest, request: Request, model: str, version: str):
    calls.require(request, "GET")
    ready = False
    if rest.scope is None or rest.scope.allows(model):
        ready = (await rest.call("ModelReady", service_pb2.ModelReadyRequest(name=model, version=version), model)).ready
    if not ready:
        raise invalid("Model version not ready")
    return calls.answer(b"", 200, calls.EMPTY)


async def _config(rest: Rest, request: Request, model: str, version: str):
    calls.require(request, "GET")
    rest.check(model)
    resp = await rest.call("ModelConfig", service_pb2.ModelConfigRequest(name=model, version=version), model)
    return calls.answer(documents.message(resp.config))


async def _stats(rest: Rest, request: Request, model: str, version: str):
    calls.require(request, "GET")
    if model:
        rest.check(model)
    resp = await rest.call("ModelStatistics", service_pb2.ModelStatisticsRequest(name=model, version=version), model)
    if rest.scope is not None and not model:
        kept = [s for s in resp.model_stats if rest.scope.allows(s.name)]
        del resp.model_stats[:]
        resp.model_stats.extend(kept)
    return calls.answer(documents.statistics(resp))


async def _index(rest: Rest, request: Request):
    calls.require(request, "POST")
    ready = False
    if request.body:
        doc = loads(request.body)
        if isinstance(doc, dict) and "ready" in doc:
            if type(doc["ready"]) is not bool:
                raise invalid("attempt to access JSON non-boolean as boolean")
            ready = doc["ready"]
    resp = await rest.call("RepositoryIndex", service_pb2.RepositoryIndexRequest(ready=ready))
    models = [m for m in resp.models if rest.scope is None or rest.scope.allows(m.name)]
    return calls.answer(documents.repository_index(models))


async def _load(rest: Rest, request: Request, edge_call, model: str, action: str):
    edge_call.route, edge_call.model = action, model
    rpc = "RepositoryModelLoad" if action == "load" else "RepositoryModelUnload"
    if not rest.control:
        raise Denied(rpc)
    calls.require(request, "POST")
    rest.check(model)
    msg = (service_pb2.RepositoryModelLoadRequest if action == "load" else service_pb2.RepositoryModelUnloadRequest)(
        model_name=model)
    doc = loads(request.body) if request.body else {}
    params = doc.get("parameters") if isinstance(doc, dict) else None
    for key, value in (params or {}).items():
        p = msg.parameters[key]
        if key.startswith("file:") and type(value) is str:  # a model file, base64 in JSON, bytes in gRPC
            try:
                p.bytes_param = base64.b64decode(value, validate=True)
            except ValueError:
                raise invalid(f"failed to decode '{key}' from base64") from None
        elif type(value) is bool:
            p.bool_param = value
        elif type(value) is int:
            p.int64_param = value
        elif type(value) is str:
            p.string_param = value
        else:
            raise invalid(f"parameter '{key}' has invalid type")
    await rest.call(rpc, msg, model)
    return calls.answer(b"", 200, JSON)


def _decompress(request: Request) -> bytes:
    body = request.body or b""
    encoding = request.headers.get("content-encoding")
    if not encoding or encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise GatewayError(ErrorKind.UNIMPLEMENTED, "Unsupported compression type")
    try:
        return zlib.decompress(body, 31 if encoding == "gzip" else 15)
    except zlib.error as e:
        raise invalid(f"failed to decompress the request: {e}") from None


def _accepts(header: str | None) -> str:
    """``CompressionTypeUsed``: the best weighted of identity, deflate and gzip."""
    if not header:
        return "identity"
    best, weight = "identity", 0.0
    for enc in header.split(","):
        name, _, q = enc.strip().partition(";q=")
        try:
            w = float(q) if q else 1.0
        except ValueError:
            continue
        if name in ("identity", "deflate", "gzip") and w > weight:
            best, weight = name, w
    return best


def _header_length(request: Request, size: int) -> int:
    text = request.headers.get(HEADER_LENGTH)
    if text is None:
        return size
    m = _ATOI.match(text)  # Triton 2.51 reads it as atoi does: no number is 0 (a body without JSON)
    value = int(m[0]) if m else 0
    if value < 0 or value > size:
        raise invalid(f"inference header size should be in range (0, {size}), got: {text}")
    return value


def _parse(body: bytes, header: int, model: str, version: str,
           wire: bool = True) -> tuple[bytes | None, jsontensor.Parsed]:
    """The ModelInfer request's wire bytes and how to answer: a plain body written straight
    (plain.request), any other through the protobuf message (jsontensor.parse, jsontensor.serialize).
    ``wire`` False: the message and its raw inputs (views of the body) only, no bytes (None), for
    a request whose large inputs go through the shared-memory region (``Arena.send_placed`` in ``_infer``)."""
    doc = loads(body if header == len(body) else bytes(body[:header]))
    binary = memoryview(body)[header:]
    if wire:
        fast = plain.request(doc, model, version, binary)
        if fast is not None:
            return fast
    parsed = jsontensor.parse(doc, model, version, binary)
    return (jsontensor.serialize(parsed) if wire else None), parsed


def _parse_raw(meta, body, model: str, version: str, wire: bool) -> tuple[bytes | None, jsontensor.Parsed]:
    """``_parse`` of a raw-input body (rawinput.parse): the wire bytes (None: through the region) and how to answer."""
    parsed = rawinput.parse(meta, model, version, body)
    return (jsontensor.serialize(parsed) if wire else None), parsed


async def _infer(rest: Rest, request: Request, model: str, version: str):
    calls.require(request, "POST")
    rest.check(model)
    meta = await rest.upstream.model_metadata(model, version)  # cached: unknown model / decoupled first
    if meta.decoupled:
        raise GatewayError(ErrorKind.UNIMPLEMENTED,
                           "HTTP end point doesn't support models with decoupled transaction policy")
    body = _decompress(request)
    header = _header_length(request, len(body))
    size = len(body)
    # a body that may hold an input of the shared-memory size: its large inputs are placed in the
    # region (not copied again when the body was read into it, Edge.route buffered), not sent on the wire
    arena = rest.upstream.shared_arena()
    wire = arena is None or size < arena.min_bytes
    if header == 0:  # Triton's raw-input mode: the whole body is the model's one input
        if offload.inline(size if wire else 0):
            data, parsed = _parse_raw(meta, body, model, version, wire)
        else:
            data, parsed = await offload.run(size, _parse_raw, meta, body, model, version, wire)
    else:
        # the parse's work: the JSON header, and with wire bytes to write, the tensors copied into them
        work = size if wire else header
        if offload.inline(work):  # small bodies (most): no coroutine around the parse
            data, parsed = _parse(body, header, model, version, wire)
        else:
            data, parsed = await offload.run(work, _parse, body, header, model, version, wire)
    if data is not None:
        resp, raws = await rest.call("ModelInfer", data, model)
    else:
        resp, raws = await arena.send_placed(
            lambda region, leases: serialize_message(parsed.msg, parsed.raws, region, leases),
            lambda placed: rest.call("ModelInfer", placed, model))
    raws = list(resp.raw_output_contents) if raws is None else raws  # each read once (a read copies)
    out_size = 4 * sum(len(r) for r in raws)
    if offload.inline(out_size):
        pieces, json_len = jsontensor.render(resp, parsed, raws)
    else:
        pieces, json_len = await offload.run(out_size, jsontensor.render, resp, parsed, raws)
    headers = None
    if json_len is not None:
        headers = {"Inference-Header-Content-Length": str(json_len)}
    content_type = "application/octet-stream" if json_len is not None else JSON
    encoding = _accepts(request.headers.get("accept-encoding"))
    if encoding == "identity":  # the JSON header, then the binary outputs as gRPC received them: never joined
        return httpbody.pieces(pieces, 200, headers, content_type)
    payload = b"".join(pieces)
    payload = zlib.compress(payload) if encoding == "deflate" else _gzip(payload)
    return calls.answer(payload, 200, content_type, {**(headers or {}), "Content-Encoding": encoding})


def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=31)
    return c.compress(data) + c.flush()


def _answers_once(path: str) -> bool:
    """Whether a POST to ``path`` is answered with one response (every route but generate_stream's SSE)."""
    return not path.endswith("/generate_stream")


def attach(app: Sanic, edge: Edge, state: State) -> None:
    rest = Rest(state)

    async def v2_rest(request: Request, path: str = ""):
        return await dispatch(rest, request)

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
    # a large body: one copy; every POST but generate_stream (SSE) may take the fast lane
    edge.route(app, v2_rest, "/<path:path>", methods, "rest", buffered=True, fast=_answers_once)
    edge.route(app, v2_rest, "/", methods, "rest_root")  # Triton's 404 "Not Found" there too


__all__ = ["attach", "dispatch"]
