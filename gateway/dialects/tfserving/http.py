"""TensorFlow Serving REST listener (8501): one catch-all route, TF Serving's own path parsing.

Sanic cannot route ``<model>:predict`` inside one segment, so every path comes here and is matched
with TF Serving's regular expressions (case-insensitive). The request Content-Type is never
checked; every answer, errors included, is ``application/json``. Request ids, admission, the
deadline (30 s by default, TF Serving's REST timeout), metrics and error rendering are the edge's.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from sanic import Request, Sanic

from gateway.call import current
from gateway.core import bounded
from gateway.core.bounded import check_name, keep
from gateway.core.errors import GatewayError, invalid
from gateway.edge import Edge, httpbody
from gateway.process import offload

from . import codec, cutover, errors, jsonio, protocodec, protojson
from .mapping import ServableRef
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
        cut = service.cutover
        if cut is not None:  # dialects.tfserving.legacy: the model's route may be another than triton
            model, route = _model_of(request)
            if model:
                resp = await cutover.rest(service, cut, request, route, model, dispatch)
                if resp is not None:
                    return resp
        return httpbody.raw(await dispatch(service, request), content_type=JSON)

    edge.route(app, tfserving, "/<path:path>", ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"], "rest", fast=True)


def _model_of(request) -> tuple[str, Route | None]:
    """(the model a request names, its inference route or None), ("", None) for none or a path it refuses."""
    try:
        route = _inference_route(request.path) if request.method == "POST" else None
    except GatewayError:
        return "", None
    if route is not None:
        return route[0], None if route[3] not in _VERBS else route
    m = _STATUS.fullmatch(request.path) if request.method == "GET" else None
    return (unquote(m[1]), None) if m and m[1] else ("", None)


def _version(text: str | None) -> int | None:
    """absl::SimpleAtoi into int64; past it TF Serving answers 400 with an empty body."""
    if text is None:
        return None
    value = int(text)
    if value >= 2**63:
        raise errors.bad_version(text)
    return value


_VERBS = ("classify", "regress", "predict")


async def dispatch(service: Service, request: Request) -> bytes:
    """TF Serving's ProcessRequest: its regular expressions match case-insensitively, but the verb
    and the ``metadata`` subresource are then compared as written, so ``:PREDICT`` is a malformed
    request and ``/METADATA`` a status request."""
    path, method = request.path, request.method
    if method == "OPTIONS":
        if not _ORIGIN.search(request.headers.get("origin", "")):
            raise errors.BareError(errors.ErrorKind.FAILED_PRECONDITION, "Origin header is missing in CORS preflight")
        return b""
    route = _inference_route(path) if method == "POST" else None
    if route is not None:
        call = current()
        call.model, call.route = route[0], route[3]
        return await _infer(service, route, request.body)
    m = _STATUS.fullmatch(path) if method == "GET" else None
    if m:
        spec = ServableRef(unquote(m[1]) if m[1] else "", _version(m[2]), unquote(m[3]) if m[3] else None)
        if not m[1]:
            raise invalid("Missing model name in request.")
        call = current()
        call.model, call.route = spec.name, "metadata" if m[4] == "metadata" else "status"
        return await (_metadata(service, spec) if m[4] == "metadata" else _status(service, spec))
    if _V1.fullmatch(path):
        raise invalid(f"Malformed request: {method} {path}")
    raise errors.PageError(errors.ErrorKind.NOT_FOUND, f"Not found: {method} {path}")


Route = tuple[str, int | None, str | None, str, ServableRef]
_routes: dict[str, Route] = {}  # POST path -> its _inference_route
MAX_ROUTES, MAX_ROUTE_PATH = 1024, 512  # bounded: paths are the clients'


def _inference_route(path: str) -> Route | None:
    """(model, version, label, verb, the servable it names with the default signature) of a
    classify/regress/predict path, None for any other path (a refused name or version raises). A
    path once read is remembered (the hot path parses each client's few paths once)."""
    hit = _routes.get(path)
    if hit is not None:
        return hit
    m = _PREDICT.fullmatch(path)
    if not m:
        return None
    name = unquote(m[1])
    check_name(name, "Model name")
    version, label = _version(m[2]), unquote(m[3]) if m[3] else None
    if m[4] not in _VERBS:
        return None
    route = (name, version, label, m[4], ServableRef(name, version, label))
    if len(path) <= MAX_ROUTE_PATH:
        keep(_routes, path, route, MAX_ROUTES)
    return route


async def _infer(service: Service, route: Route, body: bytes) -> bytes:
    """Parsing and writing run in the worker's thread pool when the body or the answer is larger
    than limits.offload_bytes (``offload.run``), so a large one never holds up the event loop; a
    small body or answer (the common request) is read or written inline, without a coroutine."""
    name, version, label, verb, servable = route
    size = len(body)
    small = offload.inline(size)
    if verb == "predict" and size >= codec.DENSE_MIN:  # an image as JSON lists: read without a float object each
        dense = await offload.run(size, codec.dense_body, body, bounded.LIMITS.max_json_depth)
        if dense is not None:
            target = await service.resolve(servable, method="predict")
            inputs = codec.dense_inputs(dense[0], target.signature)
            if inputs is not None:
                return await _predict(service, target, inputs, dense[1])
    if small:
        doc = jsonio.loads(body, bounded.LIMITS.max_json_depth)
    else:
        doc = await offload.run(size, jsonio.loads, body, bounded.LIMITS.max_json_depth)
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} Is not object")
    signature = codec.signature_name(doc)  # the signature is named in the body
    spec = servable if not signature else ServableRef(name, version, label, signature)
    if verb == "predict":
        target = await service.resolve(spec, method="predict")
        bools, within = codec.may_hold_bools(body), codec.within_limit(size)
        if small:
            inputs, row = codec.parse_predict(doc, target.signature, bools, within)
        else:
            inputs, row = await offload.run(size, codec.parse_predict, doc, target.signature, bools, within)
        return await _predict(service, target, inputs, row)
    # classify/regress: the whole body is read into Examples before the model is looked up
    exs, context = await offload.run(size, codec.parse_examples, doc, verb)
    target = await service.resolve(spec, method=verb)
    _, result = await service.run_examples(target, verb, exs, context)
    return codec.write_regress(result) if verb == "regress" else codec.write_classify(*result)


async def _predict(service: Service, target, inputs, row: bool) -> bytes:
    _, outs = await service.predict(target, inputs)
    text = 4 * sum(a.nbytes for a, _ in outs.values())  # float text: ~10 bytes per 4-byte float
    if offload.inline(text):
        return codec.write_predict(outs, row)
    return await offload.run(text, codec.write_predict, outs, row)


async def _metadata(service: Service, spec: ServableRef) -> bytes:
    """GetModelMetadataImpl sets the name and version of the model spec (signature_name stays "")."""
    version, sigs = await service.metadata(spec)
    return protojson.metadata_answer(protocodec.model_spec(spec.name, version), protocodec.signature_def_map(sigs))


async def _status(service: Service, spec: ServableRef) -> bytes:
    rows = await service.status(spec)
    return protojson.status_answer(protocodec.status_response(rows))
