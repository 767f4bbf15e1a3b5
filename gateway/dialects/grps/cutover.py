"""GRPS on a legacy route (dialects.grps.legacy): the glue between the GRPS listeners and the neutral
cutover core (gateway/cutover).

HTTP (``predict_http``): a predict whose model (the body's ``model``, else ``?model=``, else
``default_model``) is not on ``triton`` is relayed to the GRPS server behind the gateway and its
answer given back unchanged, a streamed one (chunked) chunk by chunk as it comes; under ``shadow``
(and the canary's ``reverse_shadow``) the other side runs in the background and both answers are
compared. A streamed predict is relayed but not compared (counted ``skipped``): the gateway's own
stream would have to be written somewhere. Health, server metadata and the monitoring page stay the
gateway's own; model metadata is relayed on ``legacy``.

``decode(status, content_type, body)`` reads one GRPS HTTP answer with the dialect's own readers
(``codec.parse_message``, ``codec.tensor_from_generic``, ``codec.gmap_values``): the status
(``FAILURE``: its code and words; an HTTP status other than 200 too), then ``gtensors`` output by
output (a tensor without a name is ``#<index>``), ``str_data``, ``bin_data`` (an octet-stream
answer), ``ndarray`` and ``gmap`` (``gmap.<key>``), each as a tensor.
"""

from __future__ import annotations

import numpy as np
import orjson

from gateway.core.errors import GatewayError
from gateway.cutover import Answer, Wire, failure, httproute

from . import codec


def model_of(request, cfg) -> str:
    """The GRPS model a predict names, as the service would pick it (the default's name when none)."""
    name = ""
    ctype = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if ctype == "application/json" and request.body:
        try:
            doc = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("model"), str):
            name = doc["model"]
    if not name and request.query_string:
        name = request.args.get("model", "")
    return name or cfg.default_model


async def predict_http(svc, cut, request, local, streaming: bool):
    """(handled, answer): the answer for a predict on a legacy route (None: streamed to the client);
    handled False when Triton answers it as today. ``local(request)``: the listener's own predict."""
    return await httproute.routed(cut, request, model_of(request, svc.cfg), streaming, local=lambda: local(request),
                                  read=_wire, error=lambda err: _error(svc, err))


def _error(svc, err: GatewayError) -> Answer:
    resp = svc.errors.http(err)
    return decode(resp.status, resp.content_type, bytes(resp.body or b""))


def _wire(status: int, content_type: str | None, body: bytes) -> Wire:
    return Wire(f"{status} {content_type or ''}", body, lambda: decode(status, content_type, body))


def decode(status: int, content_type: str | None, body: bytes) -> Answer:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if status == 200 and media == "application/octet-stream":
        return Answer(outputs={"bin_data": _bytes([body])}, body=body)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        words = body.decode("utf-8", "replace")
        return failure(str(status), words, body) if status != 200 else failure("unreadable", words, body)
    if not isinstance(doc, dict):
        return failure(str(status) if status != 200 else "unreadable", "not a JSON object", body)
    st = doc.get("status") or {}
    if status != 200 or st.get("status") == "FAILURE":
        return failure(f"{status}/{st.get('code', '')}", str(st.get("msg", "")), body)
    outputs: dict[str, np.ndarray] = {}
    fields: list[str] = []
    if "ndarray" in doc:
        outputs["ndarray"] = np.asarray(doc["ndarray"])
        fields.append("ndarray")
    try:
        msg = codec.parse_message({k: v for k, v in doc.items() if k != "ndarray"})
        which = msg.WhichOneof("data_oneof")
        if which == "gtensors":
            for i, gt in enumerate(msg.gtensors.tensors):
                t = codec.tensor_from_generic(gt)
                name = gt.name or f"#{i}"
                outputs[name] = _bytes(t.data.ravel().tolist()).reshape(t.data.shape) if t.data.dtype == object \
                    else t.data
                fields.append(name)
        elif which == "str_data":
            outputs["str_data"] = _bytes([msg.str_data.encode()])
            fields.append("str_data")
        elif which == "bin_data":
            outputs["bin_data"] = _bytes([msg.bin_data])
            fields.append("bin_data")
        elif which == "gmap":
            for key, (_v2, value) in codec.gmap_values(msg.gmap).items():
                outputs[f"gmap.{key}"] = _bytes([value]) if isinstance(value, bytes) else np.asarray([value])
                fields.append(f"gmap.{key}")
    except GatewayError as err:
        return failure("unreadable", err.message, body)
    return Answer(outputs=outputs, body=body, fields=tuple(fields))


def _bytes(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = bytes(v) if not isinstance(v, str) else v.encode()
    return out
