"""MindIE native ``POST /infer`` (and ``/infer_token``): text ``inputs``, top-level ``stream``."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.llm.served import ServedModels
from gateway.llm.types import Done, GenerateRequest, Token

from . import validate as v
from .common import Encoder, Plan, sampling_tgi


async def plan(body: dict[str, Any], catalog: ServedModels, rid: str, path_model: str | None = None) -> Plan:
    if "inputs" in body and "input_id" in body:
        raise v.invalid("Input conflict.")
    ids = _input_id(body) if "input_id" in body else None
    prompt = v.text(body, "inputs") if ids is None else ""
    stream = v.boolean(body, "stream", False)
    p = v.obj(body, "parameters")
    v.number(p, "priority", 1, 5, integer=True)
    model = await catalog.resolve(None)
    if ids is not None:
        v.token_model(model)
    req = GenerateRequest(
        model=model.name,
        prompt=prompt,
        prompt_ids=ids,
        max_tokens=v.positive_int(p, "max_new_tokens") or model.spec.max_new_tokens,
        sampling=sampling_tgi(p),
        stream=stream,
        timeout=v.timeout_s(p),
        request_id=rid,
    )
    return Plan(req, model, NativeEncoder(details=v.boolean(p, "details", False)))


def _input_id(body: dict[str, Any]) -> tuple[int, ...]:
    """``input_id``: token ids (MindIE's ``CheckTokenInput`` texts)."""
    value = body["input_id"]
    if value is None:
        raise v.invalid("Input_id should not be empty")
    if not isinstance(value, list):
        raise v.invalid("Parameter input_id must be an array")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise v.invalid("Parameter input_id must be integer")
    if not all(0 <= t <= v.MAX_TOKENS_NUM for t in value):
        raise v.invalid("Data element in param input_id is invalid")
    return tuple(v.token_ids(value))


class NativeEncoder(Encoder):
    def __init__(self, details: bool):
        self.details = details
        # the latest token event (JSON), written when the next one arrives: the last token's event is
        # the final one, as MindIE's; a PD hand-off carries it to D (a scalar of the encoder's state)
        self.held: str | None = None

    @staticmethod
    def _details(done: Done, *, token_ids: bool) -> dict:
        """Non-stream details list the generated token ids; the final stream event's do not."""
        out: dict[str, Any] = {"finish_reason": done.finish_reason, "generated_tokens": done.completion_tokens}
        if token_ids:
            out["generated_token_ids"] = list(done.token_ids)
        out["seed"] = done.seed
        return out

    def token(self, tok: Token) -> bytes:
        # MindIE Server puts the engine's per-event timings (milliseconds) before the token
        out = b"" if self.held is None else self.prefix + self.held.encode() + b"\n\n"  # event(loads(held))
        self.held = orjson.dumps({"prefill_time": tok.prefill_ms, "decode_time": tok.decode_ms,
                                  "token": {"id": list(tok.ids), "text": tok.text}}).decode()
        return out

    def done(self, done: Done) -> bytes:
        """MindIE's final event is the last token's: its timings (``decode_time`` first), the whole
        text, the details and the token's ids, with ``text`` null."""
        last = orjson.loads(self.held) if self.held is not None else {
            "prefill_time": None, "decode_time": None, "token": {"id": []}}
        self.held = None
        final = {
            "decode_time": last["decode_time"],
            "prefill_time": last["prefill_time"],
            "generated_text": done.text,
            "details": self._details(done, token_ids=False) if self.details else None,
            "token": {"id": last["token"]["id"], "text": None},
        }
        return self.event(final)

    def body(self, done: Done) -> dict:
        out: dict[str, Any] = {"generated_text": done.text}
        if self.details:
            out["details"] = self._details(done, token_ids=True)
        return out
