"""TGI-compatible: ``POST /generate`` (body with ``inputs``), ``/generate_stream``, ``POST /``.

MindIE's shapes, except where they break TGI's official ``text-generation`` client (reference
§7.1): tokens carry their decoded ``text`` and a boolean ``special`` instead of ``null``, and an
error after the stream started is an SSE ``data:`` event. ``logprob`` is ``null`` (no log probs
from the backend; accepted by client 0.7). As MindIE, the stream has one event per generated token
and the last token's event is the final one, with the full ``generated_text`` and the details: each
token is written when the next one (or the end) arrives, since only then is it known not to be the
last. A generation that produced no token ends on a special end token with empty text.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.llm.served import ServedModels
from gateway.llm.types import Done, GenerateRequest, Token

from . import validate as v
from .common import Encoder, Plan, sampling_tgi

_ADAPTER = re.compile(r"^[a-zA-Z0-9_./-]{1,256}$")


async def plan(body: dict[str, Any], catalog: ServedModels, rid: str, *, stream: bool | None = None,
               compat: bool = False) -> Plan:
    prompt = v.text(body, "inputs")
    p = v.obj(body, "parameters")
    stream = v.boolean(body, "stream", False) if stream is None else stream
    details = v.boolean(p, "details", False)
    if v.boolean(p, "decoder_input_details", False) and stream:
        raise v.invalid("decoder_input_details == true is not supported when streaming tokens")
    best_of = v.positive_int(p, "best_of")
    if best_of is not None and best_of > 1:
        raise v.invalid("Only best_of=1 is supported by this gateway.")
    adapter = p.get("adapter_id")
    if adapter is not None and (not isinstance(adapter, str) or not _ADAPTER.match(adapter)):
        raise v.invalid("Parameter adapter_id must match ^[a-zA-Z0-9_./-]{1,256}$.")
    truncate = v.positive_int(p, "truncate")
    model = await catalog.resolve(None)
    req = GenerateRequest(
        model=model.name,
        prompt=_keep_last_words(prompt, truncate) if truncate else prompt,
        max_tokens=v.positive_int(p, "max_new_tokens") or model.spec.max_new_tokens,
        sampling=sampling_tgi(p),
        stop=v.stop(p),
        stream=stream,
        request_id=rid,
    )
    full = v.boolean(p, "return_full_text", False)  # TGI prepends the inputs as sent, before truncation
    prefill = _prefill(model, req.prompt) if details and v.boolean(p, "decoder_input_details", False) else []
    return Plan(req, model, TgiEncoder(details, prompt if full else "", compat, prefill))


def _prefill(model, prompt: str) -> list[dict]:
    """``decoder_input_details``: the prompt tokens (the profile tokenizer's pieces), no log probs."""
    texts = re.findall(r"\s*\S+", prompt)
    ids = model.tokenizer.ids(prompt)
    return [_detail_token(i, t) for i, t in zip(ids, texts, strict=False)]


def _keep_last_words(prompt: str, n: int) -> str:
    """TGI ``truncate``: keep the last n prompt tokens (word tokens here)."""
    words = prompt.split(" ")
    return " ".join(words[-n:]) if len(words) > n else prompt


def _token(tok_id: int, text: str, special: bool = False) -> dict:
    """A stream event's token, in MindIE's key order (id, text, logprob, special)."""
    return {"id": tok_id, "text": text, "logprob": None, "special": special}


def _detail_token(tok_id: int, text: str) -> dict:
    """A ``details.tokens``/``prefill`` entry, in MindIE's key order (id, logprob, special, text)."""
    return {"id": tok_id, "logprob": None, "special": False, "text": text}


class TgiEncoder(Encoder):
    def __init__(self, details: bool, prefix_text: str, compat: bool, prefill: list[dict] | None = None):
        self.details = details
        self.prefix_text = prefix_text
        self.compat = compat
        self.prefill = prefill or []
        self.held: str | None = None  # the latest token (JSON), written with the next event; a PD hand-off carries it

    def token(self, tok: Token) -> bytes:
        first = tok.ids[0] if tok.ids else 0
        # event({"token": loads(held), "generated_text": None, "details": None}), without parsing held again
        out = b"" if self.held is None else (
            self.prefix + b'{"token":' + self.held.encode() + b',"generated_text":null,"details":null}\n\n')
        self.held = orjson.dumps(_token(first, tok.text)).decode()
        return out

    def done(self, done: Done) -> bytes:
        details = None
        if self.details:
            details = {
                "prompt_tokens": done.prompt_tokens,
                "finish_reason": done.finish_reason,
                "generated_tokens": done.completion_tokens,
                "seed": done.seed,
            }
        last = orjson.loads(self.held) if self.held is not None else _token(0, "", special=True)
        self.held = None
        return self.event({"token": last, "generated_text": self.prefix_text + done.text, "details": details})

    def body(self, done: Done) -> Any:
        out: dict[str, Any] = {}
        if self.details:
            pieces = _pieces(done)
            out["details"] = {
                "prompt_tokens": done.prompt_tokens,
                "finish_reason": done.finish_reason,
                "generated_tokens": done.completion_tokens,
                "prefill": self.prefill,
                "seed": done.seed,
                "tokens": [_detail_token(i, t) for i, t in pieces],
            }
        out["generated_text"] = self.prefix_text + done.text
        return [out] if self.compat else out


def _pieces(done: Done) -> list[tuple[int, str]]:
    """Per-token (id, text) of the whole answer: word pieces with their leading space."""
    texts = re.findall(r"\s*\S+", done.text)
    ids = list(done.token_ids) + [0] * max(0, len(texts) - len(done.token_ids))
    return list(zip(ids, texts, strict=False))
