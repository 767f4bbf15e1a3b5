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
    load/unload, shared memory, trace, logging            the control plane: 403 unless
                                                          dialects.v2.control_plane (load/unload then
                                                          forwarded; the others 501 here)

The model scope (``dialects.v2.triton_models``) answers other models as Triton answers an
unknown one; the edge adds keys, request ids, admission, deadlines and metrics. A client that
goes away cancels the Triton call (``finally: call.cancel()``).
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
import zlib

import grpc
from sanic import Request, Sanic, response
from tritonclient.grpc import service_pb2

from gateway import metrics, offload
from gateway.access import unknown_model
from gateway.call import current, stream_headers
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.edge import Edge

from . import documents, generate, jsontensor, rjson
from .jsonbody import loads
from .passthrough import PREFIX, Denied, State, UpstreamStatus

_MODEL = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
                    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?")
_HEALTH = re.compile(r"/v2(?:/health/(live|ready))?")
_SHM = re.compile(r"/v2/(?:system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_REPO = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_TRACE = "/v2/trace/setting"
_ATOI = re.compile(r"\s*[-+]?\d+")
JSON = "application/json"
HEADER_LENGTH = "inference-header-content-length"
_RAW_INPUT_TAG = bytes([service_pb2.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number << 3 | 2])


class MethodNotAllowed(GatewayError):
    __slots__ = ()
    http_status = 405

    def __init__(self):
        super().__init__(ErrorKind.INVALID_ARGUMENT, "Method Not Allowed")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _serialize(parsed: jsontensor.Parsed) -> bytes:
    """The request with each tensor's bytes appended as its own ``raw_input_contents`` field (copied once)."""
    pieces = [parsed.msg.SerializeToString()]
    for raw in parsed.raws:
        pieces += (_RAW_INPUT_TAG, _varint(len(raw)), raw)
    return b"".join(pieces)


class Rest:
    """The listener's upstream calls, built once per listener."""

    def __init__(self, state: State):
        self.scope = state.ctx.scope  # dialects.v2.triton_models (None: every model)
        self.upstream = state.ctx.upstream
        self.control = state.config.control_plane
        channel = state.ctx.channel
        self._rpc = {}
        for name, resp in (("ServerLive", service_pb2.ServerLiveResponse),
                                ("ServerReady", service_pb2.ServerReadyResponse),
                                ("ServerMetadata", service_pb2.ServerMetadataResponse),
                                ("ModelReady", service_pb2.ModelReadyResponse),
                                ("ModelMetadata", service_pb2.ModelMetadataResponse),
                                ("ModelConfig", service_pb2.ModelConfigResponse),
                                ("ModelStatistics", service_pb2.ModelStatisticsResponse),
                                ("RepositoryIndex", service_pb2.RepositoryIndexResponse),
                                ("RepositoryModelLoad", service_pb2.RepositoryModelLoadResponse),
                                ("RepositoryModelUnload", service_pb2.RepositoryModelUnloadResponse),
                                ("ModelInfer", service_pb2.ModelInferResponse)):
            self._rpc[name] = channel.unary_unary(PREFIX + name, request_serializer=_bytes_or_message,
                                                  response_deserializer=resp.FromString)

        self._stream = channel.stream_stream(PREFIX + "ModelStreamInfer", request_serializer=_bytes_or_message,
                                             response_deserializer=service_pb2.ModelStreamInferResponse.FromString)

    def stream(self, request: bytes, done: asyncio.Event):
        """ModelStreamInfer of one request; the request side stays open until ``done`` (Triton's
        answers for it are complete)."""

        async def requests():
            yield request
            await done.wait()

        return self._stream(requests(), timeout=current().remaining(stream=True))

    def check(self, model: str) -> None:
        if self.scope is not None and not self.scope.allows(model):
            raise unknown_model(model)

    async def call(self, name: str, request, model: str = ""):
        start, code = time.perf_counter(), "OK"
        call = self._rpc[name](request, timeout=current().remaining())
        try:
            return await call
        except grpc.aio.AioRpcError as err:
            code = err.code().name
            raise UpstreamStatus(err) from None
        except asyncio.CancelledError:  # the client went away (sanic cancels the handler)
            code = "CANCELLED"
            raise
        finally:
            call.cancel()  # no-op once done; cancels Triton's work when the client went away
            metrics.observe_upstream(name, model, code, time.perf_counter() - start)


def _bytes_or_message(req) -> bytes:
    return req if isinstance(req, bytes) else req.SerializeToString()


def _version(text: str | None) -> str:
    return text or ""


def _answer(body: bytes, status: int = 200, content_type: str | None = JSON, headers: dict | None = None):
    return response.raw(body, status=status, content_type=content_type, headers=headers)


def _require(request: Request, method: str) -> None:
    if request.method != method:
        raise MethodNotAllowed()


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
        model, version, kind = m[1], _version(m[2]), m[3] or "metadata"
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
            return await _generate(rest, request, model, version, kind == "generate_stream")
        if not m[2]:
            return _control(rest, edge_call, "TraceSetting")
    if path == "/v2":
        edge_call.route = "server_metadata"
        _require(request, "GET")
        return _answer(documents.server_metadata(await rest.call("ServerMetadata", service_pb2.ServerMetadataRequest())))
    m = _HEALTH.fullmatch(path)
    if m:
        edge_call.route = m[1]
        _require(request, "GET")
        name = "ServerLive" if m[1] == "live" else "ServerReady"
        req = service_pb2.ServerLiveRequest() if m[1] == "live" else service_pb2.ServerReadyRequest()
        ok = getattr(await rest.call(name, req), m[1])
        # Triton's status; the body seed 001 and KServe's client expect ({"live": true}), where Triton's is empty
        return _answer(b'{"%s":%s}' % (m[1].encode(), b"true" if ok else b"false"), 200 if ok else 400)
    if _SHM.fullmatch(path):
        return _control(rest, edge_call, "SharedMemory")
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


async def _metadata(rest: Rest, request: Request, model: str, version: str):
    _require(request, "GET")
    rest.check(model)
    resp = await rest.call("ModelMetadata", service_pb2.ModelMetadataRequest(name=model, version=version), model)
    return _answer(documents.model_metadata(resp))


async def _ready(rest: Rest, request: Request, model: str, version: str):
    _require(request, "GET")
    ready = False
    if rest.scope is None or rest.scope.allows(model):
        ready = (await rest.call("ModelReady", service_pb2.ModelReadyRequest(name=model, version=version), model)).ready
    if not ready:
        raise invalid("Model version not ready")
    return _answer(b"", 200, None)


async def _config(rest: Rest, request: Request, model: str, version: str):
    _require(request, "GET")
    rest.check(model)
    resp = await rest.call("ModelConfig", service_pb2.ModelConfigRequest(name=model, version=version), model)
    return _answer(documents.message(resp.config))


async def _stats(rest: Rest, request: Request, model: str, version: str):
    _require(request, "GET")
    if model:
        rest.check(model)
    resp = await rest.call("ModelStatistics", service_pb2.ModelStatisticsRequest(name=model, version=version), model)
    if rest.scope is not None and not model:
        kept = [s for s in resp.model_stats if rest.scope.allows(s.name)]
        del resp.model_stats[:]
        resp.model_stats.extend(kept)
    return _answer(documents.statistics(resp))


async def _index(rest: Rest, request: Request):
    _require(request, "POST")
    ready = False
    if request.body:
        doc = loads(request.body)
        if isinstance(doc, dict) and "ready" in doc:
            if type(doc["ready"]) is not bool:
                raise invalid("attempt to access JSON non-boolean as boolean")
            ready = doc["ready"]
    resp = await rest.call("RepositoryIndex", service_pb2.RepositoryIndexRequest(ready=ready))
    models = [m for m in resp.models if rest.scope is None or rest.scope.allows(m.name)]
    return _answer(documents.repository_index(models))


async def _load(rest: Rest, request: Request, edge_call, model: str, action: str):
    edge_call.route, edge_call.model = action, model
    rpc = "RepositoryModelLoad" if action == "load" else "RepositoryModelUnload"
    if not rest.control:
        raise Denied(rpc)
    _require(request, "POST")
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
    return _answer(b"", 200, JSON)


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
    best, weight = "identity", 0.0
    for enc in (header or "").split(","):
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


def _parse(body: bytes, header: int, model: str, version: str) -> jsontensor.Parsed:
    doc = loads(bytes(body[:header]))
    return jsontensor.parse(doc, model, version, memoryview(body)[header:])


async def _infer(rest: Rest, request: Request, model: str, version: str):
    _require(request, "POST")
    rest.check(model)
    meta = await rest.upstream.model_metadata(model, version)  # cached: unknown model / decoupled first
    if meta.decoupled:
        raise GatewayError(ErrorKind.UNIMPLEMENTED,
                           "HTTP end point doesn't support models with decoupled transaction policy")
    body = _decompress(request)
    header = _header_length(request, len(body))
    if header == 0 and len(meta.inputs) == 1:  # Triton's raw-input mode: gRPC has no raw input
        raise invalid("a body without a JSON header (Triton's raw-input mode) is not served by this gateway: send the "
                      "input as JSON or binary tensor data")
    if header == 0:
        raise invalid(f"[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got "
                      f"{len(meta.inputs)} inputs in '{model}' model configuration")
    size = len(body)
    parsed = await offload.run(size, _parse, body, header, model, version)
    resp = await rest.call("ModelInfer", _serialize(parsed), model)
    out_size = sum(len(r) for r in resp.raw_output_contents)
    pieces, json_len = await offload.run(4 * out_size, jsontensor.render, resp, parsed)
    payload = b"".join(pieces)
    headers = {}
    if json_len is not None:
        headers["Inference-Header-Content-Length"] = str(json_len)
    encoding = _accepts(request.headers.get("accept-encoding"))
    if encoding != "identity":
        payload = zlib.compress(payload) if encoding == "deflate" else _gzip(payload)
        headers["Content-Encoding"] = encoding
    return _answer(payload, 200, "application/octet-stream" if json_len is not None else JSON, headers)


# Triton's core prefixes the errors of a request it refuses before running it (validation)
_REQUEST_ERROR = re.compile(r"\[request id: [^\]]*\] ")


class Refused(GatewayError):
    """A streamed request Triton refused before its first answer: Triton's HTTP answers it as a
    plain error with its status."""

    def __init__(self, message: str, status: int):
        super().__init__(ErrorKind.INVALID_ARGUMENT if status == 400 else ErrorKind.UPSTREAM_FAILED, message)
        self.http_status = status


def _stream_status(message: str) -> int:
    """An in-stream error carries only its text: 404 for an unknown model, else 400, the status
    Triton's HTTP gives the codes a model's errors have (UNKNOWN, INVALID_ARG: ``HttpCodeFromError``)."""
    low = message.lower()
    return 404 if "unknown model" in low or "is not found" in low else 400


async def _generate(rest: Rest, request: Request, model: str, version: str, streaming: bool):
    """Triton's generate extension over ModelStreamInfer: ``generate`` answers the one response,
    ``generate_stream`` each response as an SSE event; the status is the first response's."""
    _require(request, "POST")
    rest.check(model)
    meta = await rest.upstream.model_metadata(model, version)
    if request.headers.get("content-encoding", "identity") != "identity":
        raise invalid("Unsupported content-encoding, only 'identity' is supported.")
    parsed = generate.convert(loads(request.body or b""), meta, model, version)
    done = asyncio.Event()
    start, code = time.perf_counter(), "OK"
    call = rest.stream(_serialize(parsed), done)
    edge_call = current()
    try:
        answers = aiter(call)
        first = await _next_event(answers, done, meta.decoupled)
        if not streaming:
            events = [first] if first is not None else []
            while not done.is_set() and (event := await _next_event(answers, done, meta.decoupled)) is not None:
                events.append(event)
            status, body, _ = events[0] if events else (200, b"", "")
            if len(events) != 1 and status == 200:
                body = rjson.error(generate.ONE_RESPONSE)
            return _answer(body, status)
        status = first[0] if first is not None else 200
        if status != 200 and _REQUEST_ERROR.match(first[2]):  # refused before it ran: a plain error
            raise Refused(first[2], status)
        if status != 200:
            edge_call.failed = "upstream_failed"
        resp = await request.respond(status=status, content_type="text/event-stream; charset=utf-8",
                                     headers=stream_headers())
        event = first
        while event is not None:
            if event[0] != 200:
                edge_call.failed = "upstream_failed"
            await resp.send(b"data: " + event[1] + b"\n\n")
            event = await _next_event(answers, done, meta.decoupled) if not done.is_set() else None
        await resp.eof()
        return None
    except grpc.aio.AioRpcError as err:
        code = err.code().name
        raise UpstreamStatus(err) from None
    except (asyncio.CancelledError, ConnectionError):  # the client went away
        code = "CANCELLED"
        raise
    finally:
        done.set()
        call.cancel()  # the client went away or the answer is complete: nothing more from Triton
        metrics.observe_upstream("ModelStreamInfer", model, code, time.perf_counter() - start)


async def _next_event(answers, done: asyncio.Event, decoupled: bool) -> tuple[int, bytes, str] | None:
    """The next answer as (status, JSON, error text) (None: the stream is over); ``done`` once the
    final came. A decoupled model's empty final response only marks the end; a model that is not
    decoupled answers once, outputs or none."""
    async for item in answers:
        if item.error_message:
            done.set()
            return _stream_status(item.error_message), rjson.error(item.error_message), item.error_message
        resp = item.infer_response
        final = generate.is_final(resp)
        if final:
            done.set()
        if resp.outputs or not final or not decoupled:
            return 200, generate.render(resp), ""
        return None
    done.set()
    return None


def _gzip(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=31)
    return c.compress(data) + c.flush()


def attach(app: Sanic, edge: Edge, state: State) -> None:
    rest = Rest(state)

    async def v2_rest(request: Request, path: str = ""):
        return await dispatch(rest, request)

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
    edge.route(app, v2_rest, "/<path:path>", methods, "rest")
    edge.route(app, v2_rest, "/", methods, "rest_root")  # Triton's 404 "Not Found" there too


__all__ = ["attach", "dispatch", "rjson"]
