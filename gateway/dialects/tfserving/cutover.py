"""TF Serving REST on a legacy route (dialects.tfserving.legacy): the glue between the REST listener
and the neutral cutover core (gateway/cutover).

``rest(service, cut, request, dispatch)`` answers a request whose model is not on ``triton``:
``legacy`` relays it to the TF Serving behind the gateway and gives its answer back unchanged;
``shadow`` does the same while the gateway's own answer from Triton (``dispatch``, the listener's
ordinary path) runs in the background; ``canary`` answers the drawn share from Triton and the rest
from the legacy server, with the other side in the background under ``reverse_shadow``. Only
predict, classify and regress are compared; status and metadata requests of a model on a legacy
route are relayed (or, for Triton's share, answered) without a comparison.

``decode(status, body)`` reads one REST answer, legacy's or the gateway's, with the dialect's own
JSON reader (``jsonio.loads``: TF Serving's NaN/Infinity tokens included) into an ``Answer``:
``{"predictions": ...}`` (a list, or rows of named outputs), ``{"outputs": ...}`` (one tensor or
named ones), ``{"result": ...}`` (classify: labels and scores; regress: values); an error status
with its ``{"error": ...}`` words. Numbers become int64 / float64 / bool arrays by their JSON
spelling (so ``1`` against ``1.0`` is a dtype difference, as a JSON client sees it), strings and
``{"b64": ...}`` values byte arrays. The field order is that of the named outputs.
"""

from __future__ import annotations

import base64

import numpy as np

from gateway.call import current
from gateway.core.errors import GatewayError
from gateway.cutover import Answer, Wire, failure, httprelay
from gateway.edge import httpbody

from . import errors, jsonio

JSON = "application/json"


async def rest(service, cut, request, route, model: str, dispatch):
    """The answer for a request on a legacy route, or None when Triton answers it as today."""
    d = cut.choose(model, request.headers.get, httprelay.client(request))
    if d.route == "triton":
        return None
    call = current()
    if call is not None:
        call.model = model
        if route is not None:
            call.route = route[3]
    compared = route is not None and d.shadow
    body = bytes(request.body or b"")
    if d.answer == "legacy":
        pending = cut.shadow.start(model, d, body, lambda: _triton(service, request, dispatch)) if compared else None
        try:
            reply = await httprelay.forward(cut, request, body)
        except GatewayError as err:
            if pending is not None:
                pending.fail(*_rendered(err))
            raise
        if pending is not None:
            pending.settle(_wire(reply.status, reply.body))
        return httprelay.answer(reply)
    if not compared:
        return None
    pending = cut.shadow.start(model, d, body, lambda: _legacy(cut, request, body))
    try:
        out = await dispatch(service, request)
    except GatewayError as err:
        if pending is not None:
            pending.settle(_wire(*errors.http_error(err)))
        raise
    if pending is not None:
        pending.settle(_wire(200, out))
    return httpbody.raw(out, content_type=JSON)


def _rendered(err: GatewayError) -> tuple[str, str, bytes]:
    status, body = errors.http_error(err)
    return str(status), _words(body), body


async def _triton(service, request, dispatch) -> Wire:
    """The gateway's own answer from Triton, as the client would have had it."""
    try:
        out = await dispatch(service, request)
    except GatewayError as err:
        status, body = errors.http_error(err)
        return _wire(status, body)
    return _wire(200, out)


async def _legacy(cut, request, body: bytes) -> Wire:
    reply = await httprelay.forward(cut, request, body)
    return _wire(reply.status, reply.body)


def _wire(status: int, body: bytes) -> Wire:
    return Wire(str(status), bytes(body), lambda: decode(status, body))


def _words(body: bytes) -> str:
    try:
        doc = jsonio.loads(body) if body else None
    except GatewayError:
        return body.decode("utf-8", "replace")
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return doc["error"]
    return body.decode("utf-8", "replace")


def decode(status: int, body: bytes) -> Answer:
    if status != 200:
        return failure(str(status), _words(body), body)
    try:
        doc = jsonio.loads(body)
    except GatewayError as err:
        return failure("unreadable", err.message, body)
    if not isinstance(doc, dict):
        return failure("unreadable", "not a JSON object", body)
    outputs: dict[str, np.ndarray] = {}
    fields: tuple[str, ...] = ()
    if "predictions" in doc:
        rows = doc["predictions"]
        if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
            fields = tuple(rows[0])
            for name in fields:
                outputs[name] = array([r.get(name) for r in rows])
        else:
            outputs["predictions"] = array(rows)
    elif "outputs" in doc:
        outs = doc["outputs"]
        if isinstance(outs, dict):
            fields = tuple(outs)
            outputs = {name: array(v) for name, v in outs.items()}
        else:
            outputs["outputs"] = array(outs)
    elif "result" in doc:
        result = doc["result"]
        if isinstance(result, list) and result and isinstance(result[0], list):  # classify: [[label, score]...]
            outputs["labels"] = array([[p[0] for p in row] for row in result])
            outputs["scores"] = array([[p[1] for p in row] for row in result])
        else:
            outputs["result"] = array(result)
    else:
        return failure("unreadable", f"unknown answer fields {sorted(doc)[:8]}", body)
    return Answer(outputs=outputs, body=body, fields=fields)


def _leaf(v):
    if isinstance(v, dict) and "b64" in v:
        try:
            return base64.b64decode(v["b64"])
        except (ValueError, TypeError):
            return repr(v).encode()
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass")
    if isinstance(v, list):
        return [_leaf(x) for x in v]
    return v


def array(value) -> np.ndarray:
    """A JSON value as a tensor: int64, float64, bool by the JSON's own types; bytes as objects."""
    value = _leaf(value)
    try:
        a = np.asarray(value)
    except ValueError:  # ragged
        a = np.empty(1, dtype=object)
        a[0] = value
        return a
    if a.dtype.kind in "SUV":  # numpy's S would drop trailing NUL bytes: objects keep them
        return np.array(value, dtype=object)
    if a.dtype.kind == "i" and a.dtype != np.int64:
        a = a.astype(np.int64)
    return a
