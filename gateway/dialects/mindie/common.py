"""What the five families share: the request plan, the encoder interface, sampling parsers.

A family module exposes ``async def plan(body, catalog, rid, path_model=None) -> Plan``; the plan
holds the neutral GenerateRequest, the resolved model and a per-request ``Encoder`` that turns
Token/Done events into the family's wire bytes (stream) or JSON body (non-stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core.errors import GatewayError, invalid
from gateway.llm.served import Resolved
from gateway.llm.types import Done, GenerateRequest, Sampling, Token
from gateway.process import offload

from . import errors
from . import validate as v


class Encoder:
    """Family wire format for one request. Subclasses override what differs."""

    content_type = "text/event-stream"
    prefix = b"data: "

    def head(self) -> bytes:
        return b""

    def token(self, tok: Token) -> bytes:
        raise NotImplementedError

    def done(self, done: Done) -> bytes:
        return b""

    def error(self, err: GatewayError) -> bytes:
        """In-band error after the first byte: framed as an event so SSE clients see it."""
        return self.prefix + errors.envelope_bytes(err) + b"\n\n"

    def body(self, done: Done) -> Any:
        raise NotImplementedError

    def body_many(self, dones: list[Done]) -> Any:
        """n > 1 sequences (the families that take n: OpenAI, vLLM)."""
        raise NotImplementedError

    def event(self, obj: Any) -> bytes:
        return self.prefix + orjson.dumps(obj) + b"\n\n"


@dataclass(slots=True)
class Plan:
    req: GenerateRequest
    model: Resolved
    encoder: Encoder


def sampling_tgi(p: Mapping[str, Any], *, top_k_zero_ok: bool = False) -> Sampling:
    """native / TGI / Triton ranges."""
    v.number(p, "typical_p", 0.0, 1.0, lo_open=True)  # validated, not forwarded (no Triton input)
    v.boolean(p, "watermark")  # validated, ignored
    return Sampling(
        temperature=v.number(p, "temperature", 0.0, v.FLT_MAX, lo_open=True),
        top_k=v.number(p, "top_k", 0, v.INT32_MAX, lo_open=not top_k_zero_ok, integer=True) or None,
        top_p=v.number(p, "top_p", 0.0, 1.0, lo_open=True),
        repetition_penalty=v.number(p, "repetition_penalty", 0.0, v.FLT_MAX, lo_open=True),
        seed=v.seed(p),
        do_sample=v.boolean(p, "do_sample"),
    )


def sampling_openai(b: Mapping[str, Any]) -> Sampling:
    """OpenAI / vLLM ranges (temperature 0 allowed, top_k -1 = off, penalties in [-2, 2])."""
    top_k = b.get("top_k")
    if top_k == -1:
        top_k = None
    else:
        top_k = v.number(b, "top_k", 0, v.INT32_MAX, lo_open=True, integer=True)
    return Sampling(
        temperature=v.number(b, "temperature", 0.0, 2.0),
        top_k=top_k,
        top_p=v.number(b, "top_p", 0.0, 1.0, lo_open=True),
        repetition_penalty=v.number(b, "repetition_penalty", 0.0, 2.0, lo_open=True),
        presence_penalty=v.number(b, "presence_penalty", -2.0, 2.0),
        frequency_penalty=v.number(b, "frequency_penalty", -2.0, 2.0),
        seed=v.seed(b),
    )


MAX_SEQUENCES = 128  # MindIE's best_of bound; n <= best_of, so at most this many Triton requests


def sequences(b: Mapping[str, Any]) -> tuple[int, int]:
    """(n, best_of), validated with MindIE's ranges and rules: best_of >= n; more than one sequence
    needs sampling (temperature > 0 where given); a stream returns every sequence it generates
    (best_of == n, as vLLM). The gateway sends one Triton request per sequence generated, so n is
    bounded by best_of's 128.

    Also validates ``stop_token_ids`` (MindIE's type check; not forwarded: no Triton input).
    """
    v.stop_token_ids(b)
    n = v.number(b, "n", 1, 8192, integer=True) or 1
    best_of = v.number(b, "best_of", 1, MAX_SEQUENCES, integer=True) or n
    if best_of < n:
        raise v.invalid(f"Parameter best_of must be greater than or equal to n, got {best_of}.")
    if best_of > 1:
        if b.get("temperature") == 0:
            raise v.invalid("Parameter temperature must be greater than 0 when n or best_of is greater than 1.")
        if b.get("stream") is True and best_of != n:
            raise v.invalid("Parameter best_of must equal n when streaming.")
    return n, best_of


async def json_body(request) -> dict:
    """The request's JSON object; a large body is parsed off the event loop (gateway.process.offload)."""
    raw = request.body or b""
    try:
        body = await offload.run(len(raw), orjson.loads, raw)
    except orjson.JSONDecodeError:
        raise invalid("Request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise invalid("Request body must be a JSON object.")
    return body
