"""vLLM-compatible ``POST /generate`` (body with ``prompt``), MindIE flavour.

Non-stream: ``{"text": ["<prompt> <generated>"]}`` (prompt, one space, completion). Stream:
``{"text": ["<delta>"]}`` followed by one NUL byte per chunk, ``Content-Type: text/event-stream``;
an error after the first chunk is the MindIE envelope followed by NUL.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.core.errors import GatewayError, not_found
from gateway.llm.served import ServedModels
from gateway.llm.types import Done, GenerateRequest, Token

from . import errors
from . import validate as v
from .common import Encoder, Plan, sampling_openai, sequences


async def plan(body: dict[str, Any], catalog: ServedModels, rid: str, path_model: str | None = None) -> Plan:
    prompt = v.text(body, "prompt")
    stream = v.boolean(body, "stream", False)
    n, best_of = sequences(body)
    for flag in ("include_stop_str_in_output", "ignore_eos", "skip_special_tokens", "use_beam_search"):
        v.boolean(body, flag)
    name = body.get("model")
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 256):
        raise v.invalid("Parameter model must be a string of 1 to 256 characters.")
    model = await _resolve(catalog, name)
    req = GenerateRequest(
        model=model.name,
        prompt=prompt,
        max_tokens=v.positive_int(body, "max_tokens") or model.spec.max_tokens,
        sampling=sampling_openai(body),
        stop=v.stop(body),
        stream=stream,
        request_id=rid,
        n=n,
        best_of=best_of,
    )
    return Plan(req, model, VllmEncoder(prompt, n))


async def _resolve(catalog: ServedModels, name: str | None):
    """``model`` names a LoRA adapter in MindIE; a served model/alias name selects that model."""
    if name:
        try:
            return await catalog.resolve(name)
        except GatewayError as e:
            if e.kind is not not_found("").kind:
                raise
    return await catalog.resolve(None)


class VllmEncoder(Encoder):
    prefix = b""

    def __init__(self, prompt: str, n: int = 1):
        self.prompt, self.n = prompt, n

    def token(self, tok: Token) -> bytes:
        """The new text of the sequence that moved; "" for the others (MindIE: one entry per sequence)."""
        texts = [""] * self.n
        texts[tok.index] = tok.text
        return orjson.dumps({"text": texts}) + b"\0"

    def error(self, err: GatewayError) -> bytes:
        return errors.envelope_bytes(err) + b"\0"

    def body(self, done: Done) -> dict:
        return {"text": [f"{self.prompt} {done.text}"]}

    def body_many(self, dones: list[Done]) -> dict:
        return {"text": [f"{self.prompt} {d.text}" for d in dones]}
