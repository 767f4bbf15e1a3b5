"""GRPS HTTP listener (7080): thin handlers over GrpsService.

    /grps/v1/health/{online,offline,live,ready}   GET/POST
    /grps/v1/infer/predict                        JSON or application/octet-stream (bin_data);
                                                  ?model=, ?return-ndarray=true, ?streaming=true
    /grps/v1/metadata/{server,model}              YAML in str_data
    /, /grps/v1/monitor/metrics                   the monitoring page
    /grps/v1/monitor/series?name=...              GRPS's series JSON
"""

from __future__ import annotations

import numpy as np
import orjson
from sanic import Request, Sanic

from gateway.call import stream_headers
from gateway.core.errors import invalid
from gateway.cutover import httprelay
from gateway.edge import Edge, httpbody
from gateway.process import offload

from . import codec, cutover, gtensors, monitor_page
from .service import GrpsService

METHODS = ["GET", "POST", "PUT"]
JSON = "application/json"
OCTET = "application/octet-stream"


def attach(app: Sanic, edge: Edge, svc: GrpsService) -> None:
    """GRPS's routes behind the edge (errors in GRPS's envelope, by the dialect's Rendering)."""
    app.ctx.grps = svc
    edge.route(app, _health, "/grps/v1/health/<op:online|offline|live|ready>", METHODS, "health")
    # bin_data: one copy; the fast lane where streaming is asked in the query (which the lane leaves to sanic)
    # without dialects.grps.legacy the predict route is Triton's path itself (no layer for the cut-over)
    edge.route(app, _predict if svc.cutover is not None else _predict_triton, "/grps/v1/infer/predict", METHODS,
               "predict", buffered=True,
               fast=svc.cfg.streaming.ctrl_mode == "query_param")
    edge.route(app, _server_metadata, "/grps/v1/metadata/server", METHODS, "server_metadata")
    edge.route(app, _model_metadata, "/grps/v1/metadata/model", METHODS, "model_metadata")
    monitor_page.add_routes(app, edge, svc.monitor)


# -- rendering ------------------------------------------------------------------------------------
def _svc(request: Request) -> GrpsService:
    return request.app.ctx.grps


def _answer(request: Request, msg: codec.GrpsMessage, ndarray: np.ndarray | bytes | memoryview | None = None):
    if isinstance(ndarray, bytes | memoryview):  # a bin_data answer kept out of the message (a view: not copied)
        return httpbody.raw(ndarray, content_type=OCTET)  # a large one: not joined to its header
    pretty = _svc(request).cfg.pretty_json
    if ndarray is not None:
        return httpbody.raw(codec.ndarray_to_json(msg, ndarray, pretty), content_type=JSON)
    if msg.WhichOneof("data_oneof") == "bin_data":
        return httpbody.raw(msg.bin_data, content_type=OCTET)
    status = msg.status.code if msg.status.status == codec.FAILURE else 200
    body = codec.message_to_json(msg, pretty)
    return httpbody.raw(body, status=_http_status(request, status), content_type=JSON)


def _http_status(request: Request, code: int) -> int:
    return code if _svc(request).cfg.http_error_status else 200


# -- handlers -------------------------------------------------------------------------------------
async def _health(request: Request, op: str):
    svc = _svc(request)
    if op in ("online", "offline"):
        return _answer(request, svc.set_online(op == "online"))
    return _answer(request, codec.ok() if op == "live" else await svc.ready())


async def _server_metadata(request: Request):
    return _answer(request, await _svc(request).server_metadata())


async def _model_metadata(request: Request):
    cut = _svc(request).cutover
    if cut is not None:  # a model on the legacy route: the legacy server's own metadata
        d = cut.choose(cutover.model_of(request, _svc(request).cfg), request.headers.get, request.ip)
        if d.route == "legacy":
            return httprelay.answer(await httprelay.forward(cut, request))
    msg = codec.parse_message(codec.load_json(request.body))
    return _answer(request, await _svc(request).model_metadata(msg))


async def _predict(request: Request):
    """A predict with dialects.grps.legacy set: the model's route may be another than triton."""
    svc = _svc(request)
    handled, resp = await cutover.predict_http(svc, svc.cutover, request, _predict_triton,
                                               _asks_streaming(request, svc))
    return resp if handled else await _predict_triton(request)


def _asks_streaming(request: Request, svc: GrpsService) -> bool:
    doc = _json_object(request.body) if svc.cfg.streaming.ctrl_mode == "body_param" else {}
    return _streaming(request, svc, doc)


async def _predict_triton(request: Request):
    svc = _svc(request)
    return_ndarray = _arg(request, "return-ndarray").lower() == "true"
    doc = _plain_doc(request) if not return_ndarray else None
    if doc is not None:  # the common JSON gtensors predict (gtensors.py), else the general path below
        found = gtensors.tensors(doc)
        if found is not None and not _streaming(request, svc, doc):
            model, inputs = found
            body = await svc.predict_plain(model or _arg(request, "model"), inputs)
            return httpbody.raw(body, content_type=JSON)
    # GRPS's order (PredictByHttp): the streaming switch and return-ndarray first, then the body
    seen = doc
    if seen is None and svc.cfg.streaming.ctrl_mode == "body_param":  # the body as JSON, whatever its type
        seen = await offload.run(len(request.body), _json_object, request.body)
    streaming = _streaming(request, svc, seen)
    if streaming and return_ndarray:
        raise invalid("Streaming and ret ndarray are not supported at the same time.")
    msg, ndarray = await _decode_predict(request, doc)
    payload = request.body if msg.WhichOneof("data_oneof") == "bin_data" and not msg.bin_data else None
    if streaming:
        if payload is not None:
            msg.bin_data = bytes(payload)  # a large body is a memoryview (Edge.route buffered)
        return await _stream(request, svc, msg, ndarray)
    out, arr = await svc.predict(msg, ndarray, return_ndarray, payload=payload)
    size = arr.nbytes if isinstance(arr, np.ndarray) else 0 if isinstance(arr, bytes | memoryview) else out.ByteSize()
    return await offload.run(size, _answer, request, out, arr)  # a large answer is written in a thread


def _plain_doc(request: Request) -> dict | None:
    """A small JSON body's object (parsed inline), else None (for the general path to read)."""
    body = request.body
    if not body or not offload.inline(len(body)):  # empty: not JSON (the general path says so)
        return None
    ctype = request.headers.get("content-type")
    if ctype != JSON and (not ctype or ctype.split(";", 1)[0].strip().lower() != JSON):
        return None
    return codec.load_json(body)


async def _decode_predict(request: Request, doc: dict | None = None):
    """The request → (GrpsMessage with its model set, ndarray or None); ``doc``: the JSON body
    already parsed (``_plain_doc``). A missing Content-Type is one GRPS does not support either
    (brpc reads it as "")."""
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media == OCTET:
        # the body stays out of the message (oneof set, empty): predict takes it as the payload
        msg, ndarray = codec.GrpsMessage(bin_data=b""), None
    elif doc is not None:
        msg, ndarray = codec.message_from_json(doc, request.body)
    elif media == JSON:  # a large body is parsed in a thread (limits.offload_bytes)
        _, msg, ndarray = await offload.run(len(request.body), codec.decode_predict, request.body)
    else:
        raise invalid("Content type is not supported.")
    if not msg.model:
        msg.model = _arg(request, "model")
    return msg, ndarray


def _streaming(request: Request, svc: GrpsService, doc: dict) -> bool:
    """GRPS's ``IfHttpStreaming``, asked before the body is decoded; ``doc``: the body as a JSON
    object (read whatever its Content-Type; ``{}`` when it is not one), used in ``body_param`` mode."""
    ctrl = svc.cfg.streaming
    if ctrl.ctrl_mode == "body_param":
        return doc.get(ctrl.ctrl_key) is True
    value = request.headers.get(ctrl.ctrl_key, "") if ctrl.ctrl_mode == "header_param" else _arg(request, ctrl.ctrl_key)
    return str(value).lower() == "true"


def _json_object(body: bytes) -> dict:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _arg(request: Request, name: str) -> str:
    """The query parameter ``name`` ("" when absent): sanic parses the query into ``request.args`` on
    first use, so a request without a query (the common predict) skips it."""
    return request.args.get(name, "") if request.query_string else ""


async def _stream(request: Request, svc: GrpsService, msg, ndarray):
    """Chunked answer, one GrpsMessage JSON document per chunk (bin_data as raw bytes).

    An error before the first message is an ordinary error answer; afterwards it is the last chunk.
    """
    messages = svc.predict_stream(msg, ndarray)
    try:
        first = await anext(messages)
        if first.status.status == codec.FAILURE:
            return _answer(request, first)
        resp = await request.respond(content_type=svc.cfg.streaming.res_content_type, headers=stream_headers())
        pretty = svc.cfg.pretty_json
        await resp.send(_chunk(first, pretty))
        async for item in messages:
            await resp.send(_chunk(item, pretty))
        await resp.eof()
    finally:
        await messages.aclose()  # client gone: closing cancels the Triton request


def _chunk(msg: codec.GrpsMessage, pretty: bool) -> bytes:
    return msg.bin_data if msg.WhichOneof("data_oneof") == "bin_data" else codec.message_to_json(msg, pretty)
