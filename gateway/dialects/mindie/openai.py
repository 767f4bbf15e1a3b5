"""OpenAI-compatible ``/v1/chat/completions`` and ``/v1/completions`` (MindIE's vLLM flavour).

MindIE shapes: numeric ``id``, ``delta.role`` in every chunk, ``usage`` inline on the final chunk
(always; ``stream_options`` is not supported), then ``data: [DONE]``. Errors use the MindIE
envelope (``error`` is a string); an error after the first chunk is a ``data:`` event, so the
``openai`` SDK raises instead of silently ending (reference §7.1).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gateway.core.errors import ErrorKind, GatewayError
from gateway.llm.catalog import Catalog, Resolved
from gateway.llm.chat import content_text
from gateway.llm.types import Done, GenerateRequest, Token

from . import validate as v
from .common import Encoder, Plan, sampling_openai, single_sequence

ROLES = ("system", "user", "assistant", "tool")


async def _model(body: Mapping[str, Any], catalog: Catalog) -> Resolved:
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise v.invalid("Parameter model is required and must be a string.")
    try:
        return await catalog.resolve(name)
    except GatewayError as e:
        if e.kind is ErrorKind.NOT_FOUND:  # MindIE answers an unknown model with 422
            raise v.invalid(f"Model {name[:256]} not found.") from None
        raise


def _messages(body: Mapping[str, Any]) -> list[dict]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise v.invalid("Parameter messages is required and must be a non-empty list.")
    out, total = [], 0
    for m in msgs:
        if not isinstance(m, Mapping) or m.get("role") not in ROLES:
            raise v.invalid(f"Each message must have a role in {list(ROLES)}.")
        if m["role"] == "tool" and not m.get("tool_call_id"):
            raise v.invalid("tool_call_id is required for tool messages.")
        content = content_text(m.get("content"))
        total += len(content)
        v.prompt_length("messages", total)  # before the template renders them into one prompt
        out.append({**m, "content": content})
    return out


def _common(body: Mapping[str, Any], model: Resolved, prompt: str, rid: str) -> GenerateRequest:
    single_sequence(body)
    return GenerateRequest(
        model=model.name,
        prompt=prompt,
        max_tokens=v.positive_int(body, "max_tokens") or model.spec.max_tokens,
        sampling=sampling_openai(body),
        stop=v.stop(body),
        stream=v.boolean(body, "stream", False),
        request_id=rid,
    )


async def plan_chat(body: dict[str, Any], catalog: Catalog, rid: str, path_model: str | None = None) -> Plan:
    model = await _model(body, catalog)
    messages = _messages(body)
    kwargs = v.obj(body, "chat_template_kwargs")
    prompt = model.template.render(messages, **kwargs)
    v.prompt_length("messages", len(prompt))  # the template adds its own text
    req = _common(body, model, prompt, rid)
    return Plan(req, model, ChatEncoder(rid, model.name))


async def plan_completions(body: dict[str, Any], catalog: Catalog, rid: str, path_model: str | None = None) -> Plan:
    model = await _model(body, catalog)
    prompt = body.get("prompt")
    if isinstance(prompt, list):  # MindIE takes a string or token ids; never a list of strings
        if prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise v.invalid("Token-id prompts are not supported: the served models take text.")
        raise v.invalid("Parameter prompt must be a string or an array of token ids.")
    req = _common(body, model, v.text(body, "prompt"), rid)
    return Plan(req, model, CompletionEncoder(rid, model.name))


def usage(done: Done) -> dict:
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }


class _OpenAIEncoder(Encoder):
    object_name = ""

    def __init__(self, rid: str, model: str):
        self.rid, self.model, self.created = rid, model, int(time.time())

    def envelope(self, choice: dict, **extra) -> dict:
        return {"id": self.rid, "object": self.object_name, "created": self.created, "model": self.model,
                "choices": [choice], **extra}

    def done(self, done: Done) -> bytes:
        return self.event(self.envelope(self.final_choice(done), usage=usage(done))) + b"data: [DONE]\n\n"

    def final_choice(self, done: Done) -> dict:
        raise NotImplementedError


class ChatEncoder(_OpenAIEncoder):
    object_name = "chat.completion.chunk"

    def _choice(self, content: str, finish: str | None) -> dict:
        return {"index": 0, "delta": {"role": "assistant", "content": content}, "logprobs": None,
                "finish_reason": finish}

    def head(self) -> bytes:
        return self.event(self.envelope(self._choice("", None)))

    def token(self, tok: Token) -> bytes:
        return self.event(self.envelope(self._choice(tok.text, None)))

    def final_choice(self, done: Done) -> dict:
        return self._choice("", done.openai_reason)

    def body(self, done: Done) -> dict:
        message = {"role": "assistant", "content": done.text, "tool_calls": []}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": done.openai_reason}
        out = self.envelope(choice, usage=usage(done))
        out["object"] = "chat.completion"
        return out


class CompletionEncoder(_OpenAIEncoder):
    object_name = "text_completion"

    def _choice(self, text: str, finish: str | None) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "stop_reason": None, "finish_reason": finish}

    def token(self, tok: Token) -> bytes:
        return self.event(self.envelope(self._choice(tok.text, None)))

    def final_choice(self, done: Done) -> dict:
        return self._choice("", done.openai_reason)

    def body(self, done: Done) -> dict:
        return self.envelope(self._choice(done.text, done.openai_reason), usage=usage(done))
