"""MindIE on a legacy route (dialects.mindie.legacy): the glue between the MindIE listener's
generation routes and the neutral cutover core (gateway/cutover).

Every generation route (OpenAI chat and completions, TGI, vLLM, MindIE native, Triton generate)
goes through ``Handlers.run``, which asks ``generation`` first. The model is the path's, else the
body's ``model``, else the served default. ``legacy`` relays the request to the MindIE server
behind the gateway and gives its answer back unchanged, an SSE stream event by event as it comes.
``shadow`` (and the canary's ``reverse_shadow``) compares a whole (non-streamed) answer: the other
side runs in the background. A streamed request under shadow is relayed or answered but not
compared (counted ``skipped``).

``decode(status, body, greedy)`` reads a whole answer: OpenAI chat (``choices[].message.content``)
and completions (``choices[].text``), TGI (``generated_text``, ``details.generated_tokens``), vLLM
(``text``); token counts from ``usage``. Greedy: ``temperature`` 0, ``do_sample`` false or
``top_k`` 1 in the request (top level or TGI's ``parameters``); a sampled request's text and
counts are not compared (``skipped``).
"""

from __future__ import annotations

import orjson

from gateway.core.errors import GatewayError
from gateway.cutover import Answer, failure, httproute


def greedy(body: dict) -> bool:
    for where in (body, body.get("parameters") if isinstance(body.get("parameters"), dict) else {}):
        if where.get("temperature") == 0 or where.get("do_sample") is False or where.get("top_k") == 1:
            return True
    return False


async def generation(h, cut, request, body: dict, kw: dict, local):
    """(handled, answer) for a generation request; handled False: Triton answers it as today.
    ``local()``: the route's own answer from Triton."""
    model = kw.get("path_model") or (body.get("model") if isinstance(body.get("model"), str) else "")
    if not model:
        model = await h.catalog.default_name()
    stream = bool(kw.get("stream")) or body.get("stream") is True
    eager = greedy(body)

    def read(status: int, _content_type, out: bytes):
        return lambda: decode(status, out, eager)

    return await httproute.routed(cut, request, model, stream, local=local, read=read,
                                  error=lambda err: _error(h, err))


def _error(h, err: GatewayError) -> Answer:
    resp = h.errors.http(err)
    return decode(resp.status, bytes(resp.body or b""), True)


def _words(doc) -> str:
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))
        if err is not None:
            return str(err)
        return str(doc.get("message", doc))
    return str(doc)


def decode(status: int, body: bytes, eager: bool) -> Answer:
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if status != 200:
        return failure(str(status), _words(doc) if doc is not None else body.decode("utf-8", "replace"), body)
    if not isinstance(doc, dict | list):
        return failure("unreadable", body[:200].decode("utf-8", "replace"), body)
    text, tokens = None, None
    if isinstance(doc, dict) and isinstance(doc.get("choices"), list):
        parts = []
        for c in doc["choices"]:
            msg = c.get("message") if isinstance(c, dict) else None
            parts.append(str((msg or {}).get("content") if msg is not None else c.get("text", "")))
        text = "\x1e".join(parts)
        usage = doc.get("usage") or {}
        tokens = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    elif isinstance(doc, dict) and "generated_text" in doc:
        text = str(doc["generated_text"])
        details = doc.get("details") or {}
        tokens = (None, details.get("generated_tokens")) if isinstance(details, dict) else None
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict) and "generated_text" in doc[0]:
        text = "\x1e".join(str(x.get("generated_text")) for x in doc)
    elif isinstance(doc, dict) and isinstance(doc.get("text"), list):
        text = "\x1e".join(str(x) for x in doc["text"])
    else:  # another shape: the document itself, its volatile fields aside
        text = orjson.dumps({k: v for k, v in doc.items() if k not in ("id", "created")} if isinstance(doc, dict)
                            else doc, option=orjson.OPT_SORT_KEYS).decode()
    return Answer(text=text, tokens=tokens, greedy=eager, body=body)
