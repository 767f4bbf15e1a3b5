"""Triton-compatible ``POST /v2/models/{m}/generate`` and ``/generate_stream`` (MindIE flavour).

Both MindIE's nested ``parameters`` (``max_new_tokens``, ...) and Triton's flat top-level keys
(``max_tokens``, ``temperature``, ...) are accepted; nested values win. Response:
``{"id","model_name","model_version":null,"text_output","details"?}``; the stream uses ``data:``
without a space, one event per chunk with the delta text, and ``finish_reason`` (in ``details``)
only on the last event, which is sent when ``details`` was requested.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.llm.served import ServedModels
from gateway.llm.types import Done, GenerateRequest, Token

from . import validate as v
from .common import Encoder, Plan, sampling_tgi

_ID = re.compile(r"^[a-zA-Z0-9_-]{1,256}$")
_RESERVED = {"text_input", "id", "parameters", "stream"}


def _params(body: dict[str, Any]) -> dict[str, Any]:
    flat = {k: val for k, val in body.items() if k not in _RESERVED}
    if "max_tokens" in flat and "max_new_tokens" not in flat:
        flat["max_new_tokens"] = flat.pop("max_tokens")
    if "stop_words" in flat and "stop" not in flat:
        flat["stop"] = flat.pop("stop_words")
    return {**flat, **v.obj(body, "parameters")}


async def plan(body: dict[str, Any], catalog: ServedModels, rid: str, path_model: str | None = None, *,
               stream: bool = False) -> Plan:
    prompt = v.text(body, "text_input")
    req_id = body.get("id")
    if req_id is not None and (not isinstance(req_id, str) or not _ID.match(req_id)):
        raise v.invalid("Parameter id must match ^[a-zA-Z0-9_-]{1,256}$.")
    p = _params(body)
    v.number(p, "priority", 1, 5, integer=True)
    v.positive_int(p, "batch_size")
    model = await catalog.resolve(path_model)
    req = GenerateRequest(
        model=model.name,
        prompt=prompt,
        max_tokens=v.positive_int(p, "max_new_tokens") or model.spec.max_new_tokens,
        sampling=sampling_tgi(p, top_k_zero_ok=True),
        stop=v.stop(p),
        stream=stream,
        timeout=v.timeout_s(p),
        request_id=rid,
    )
    return Plan(req, model, TritonEncoder(req_id or rid, model.name, v.boolean(p, "details", False)))


class TritonEncoder(Encoder):
    prefix = b"data:"

    def __init__(self, rid: str, model: str, details: bool):
        self.rid, self.model, self.details = rid, model, details
        self.count = 0

    def _out(self, text: str, details: dict | None) -> dict:
        out: dict[str, Any] = {"id": self.rid, "model_name": self.model, "model_version": None, "text_output": text}
        if details is not None:
            out["details"] = details
        return out

    def _details(self, generated: int, finish: str | None = None, *, batch: Any = 1, queue: Any = 0) -> dict:
        """MindIE's details: per event (seed 004) scalars, per non-stream answer per-iteration arrays.

        ``first_token_cost``/``decode_cost`` are ``null`` in MindIE Server too; ``batch_size`` is this
        request's own (1 per event: Triton's batching is not visible over KServe); ``queue_wait_time``
        (microseconds) is the wait in the gateway before the request reached Triton, on the first
        event, then 0 (the gateway holds nothing between tokens; Triton's own queue is not visible).
        """
        out: dict[str, Any] = {"finish_reason": finish} if finish is not None else {}
        out.update(generated_tokens=generated, first_token_cost=None, decode_cost=None, batch_size=batch,
                   queue_wait_time=queue)
        return out

    def token(self, tok: Token) -> bytes:
        self.count += max(1, len(tok.ids))
        if not self.details:
            return self.event(self._out(tok.text, None))
        out = self._out(tok.text, self._details(self.count, queue=tok.queue_us))
        # MindIE Server: the engine's per-event timings in milliseconds, after details
        out["prefill_time"], out["decode_time"] = tok.prefill_ms, tok.decode_ms
        return self.event(out)

    def done(self, done: Done) -> bytes:
        if not self.details:
            return b""
        return self.event(self._out("", self._details(done.completion_tokens, done.finish_reason)))

    def body(self, done: Done) -> dict:
        details = None
        if self.details:
            n = max(1, done.completion_tokens)  # one engine iteration per generated token
            details = self._details(done.completion_tokens, done.finish_reason, batch=[1] * n,
                                    queue=[done.queue_us] + [0] * (n - 1))
        return self._out(done.text, details)
