"""OpenAI-compatible ``/v1/chat/completions`` and ``/v1/completions`` (MindIE's vLLM flavour).

MindIE shapes: numeric ``id``, ``delta.role`` in every chunk, ``usage`` inline on the final chunk
(always; ``stream_options`` is not supported), then ``data: [DONE]``. Errors use the MindIE
envelope (``error`` is a string); an error after the first chunk is a ``data:`` event, so the
``openai`` SDK raises instead of silently ending (reference §7.1).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from gateway.core.bounded import clip_repr
from gateway.core.errors import ErrorKind, GatewayError
from gateway.llm.chat import content_text
from gateway.llm.profiles import guided_decoding, returns_log_probs
from gateway.llm.served import Resolved, ServedModels
from gateway.llm.tools import ToolStream, parse
from gateway.llm.types import Done, GenerateRequest, Token

from . import validate as v
from .common import Encoder, Plan, sampling_openai, sequences

ROLES = ("system", "user", "assistant", "tool")


async def _model(body: Mapping[str, Any], catalog: ServedModels) -> Resolved:
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


NO_LOGPROBS = "logprobs/top_logprobs are not supported by this endpoint"
NO_TOOLS = "function/tool calls are not supported by this endpoint"
NO_STRUCTURED = "structured output (response_format) is not supported by this endpoint"
MAX_TOP_LOGPROBS = 20  # chat's top_logprobs
MAX_COMPLETION_LOGPROBS = 5  # completions' logprobs (MAX_VLLM_OPENAI_TOP_LOGPROBS)


def _honour_logprobs(top: int, model: Resolved) -> bool:
    """Log probabilities come from the model (TensorRT-LLM's return_log_probs -> output_log_probs),
    which reports the chosen token's only: alternatives (top > 0), or a model without them, are
    refused as MindIE refuses them on an endpoint without log probs."""
    if top > 0 or model.profile.name != "trtllm" or not returns_log_probs(model.meta):
        raise v.invalid(NO_LOGPROBS)
    return True


def _chat_logprobs(body: Mapping[str, Any], model: Resolved) -> bool:
    """Chat ``logprobs`` (bool) / ``top_logprobs`` ([0, 20]), checked with MindIE's texts."""
    lp = v.boolean(body, "logprobs")
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise v.invalid(f"Parameter top logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {clip_repr(top)}.")
    if lp is False and top is not None:
        raise v.invalid("Value error, when using top_logprobs, logprobs must be true or null in chat completions")
    return (lp or top is not None) and _honour_logprobs(top or 0, model)


def _completion_logprobs(body: Mapping[str, Any], model: Resolved) -> bool:
    """Completions ``logprobs`` (an int in [0, 5], the number of alternatives): MindIE's check."""
    lp = body.get("logprobs")
    if lp is None:
        return False
    if not isinstance(lp, int) or isinstance(lp, bool) or not 0 <= lp <= MAX_COMPLETION_LOGPROBS:
        raise v.invalid(f"logprobs should be in range [0, {MAX_COMPLETION_LOGPROBS}], got {clip_repr(lp)}.")
    return _honour_logprobs(lp, model)


def _tools(body: Mapping[str, Any], model: Resolved) -> list[dict] | None:
    """``tool_choice`` and ``tools`` checked as MindIE does; a non-empty ``tools`` asks for tool calls,
    which MindIE refuses where the model has no tool-call parser (``tool_parser`` unset). With one,
    the tools the model may call go to its chat template: none for ``tool_choice: none``, the named
    one for a named choice (the stand-in for forcing it: no guided decoding here), else all."""
    choice = body.get("tool_choice")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise v.invalid("Parameter tool_choice string not in [none, auto, required]")
    elif choice is not None and not isinstance(choice, Mapping):
        raise v.invalid("Parameter tool_choice not string or object")
    tools = body.get("tools")
    if tools is None or tools == [] or tools == {}:
        return None
    if not isinstance(tools, list):
        raise v.invalid("Tools not array")
    if not model.spec.tool_parser:
        raise v.invalid(NO_TOOLS)
    for t in tools:
        fn = t.get("function") if isinstance(t, Mapping) else None
        if t.get("type") != "function" or not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise v.invalid("Each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}.")
    if choice == "none":
        return None
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), Mapping) else None
        named = [t for t in tools if t["function"]["name"] == name]
        if not named:
            raise v.invalid(f"Parameter tool_choice names no tool in tools: {clip_repr(name)}")
        return named
    return list(tools)


def _response_format(body: Mapping[str, Any], model: Resolved) -> dict | None:
    """``response_format`` checked with MindIE's texts; ``text`` is no constraint; ``json_object`` /
    ``json_schema`` go to the model's guided decoding (TensorRT-LLM's guided_decoding_* inputs), or
    are refused when the model has none."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping):
        raise v.invalid("Parameter response_format must be an object")
    kind = fmt.get("type")
    if kind is None:
        raise v.invalid("Parameter response_format must contain 'type' field")
    if not isinstance(kind, str):
        raise v.invalid("Parameter response_format.type must be a string")
    if kind not in ("json_object", "json_schema", "text"):
        raise v.invalid(f"Parameter response_format.type must be 'json_object', 'json_schema' or 'text', got "
                        f"'{kind[:256]}'")
    if kind == "text":
        return None
    if kind == "json_schema":
        schema = fmt.get("json_schema")
        if schema is None:
            raise v.invalid("Parameter response_format.json_schema is required when type is 'json_schema'")
        if not isinstance(schema, Mapping):
            raise v.invalid("Parameter response_format.json_schema must be an object")
        if "name" not in schema:
            raise v.invalid("Parameter response_format.json_schema.name is required")
        if not isinstance(schema["name"], str):
            raise v.invalid("Parameter response_format.json_schema.name must be a string")
        if schema.get("schema") is None:
            raise v.invalid("Parameter response_format.json_schema.schema is required when type is 'json_schema'")
        if not isinstance(schema["schema"], Mapping):
            raise v.invalid("Parameter response_format.json_schema.schema must be an object")
    if model.profile.name != "trtllm" or not guided_decoding(model.meta):
        raise v.invalid(NO_STRUCTURED)
    return dict(fmt)


def _common(body: Mapping[str, Any], model: Resolved, prompt: str, rid: str) -> GenerateRequest:
    n, best_of = sequences(body)
    return GenerateRequest(
        model=model.name,
        prompt=prompt,
        max_tokens=v.positive_int(body, "max_tokens") or model.spec.max_tokens,
        sampling=sampling_openai(body),
        stop=v.stop(body),
        stream=v.boolean(body, "stream", False),
        request_id=rid,
        n=n,
        best_of=best_of,
        token_ids=False,  # OpenAI's events carry text only
    )


async def plan_chat(body: dict[str, Any], catalog: ServedModels, rid: str, path_model: str | None = None) -> Plan:
    model = await _model(body, catalog)
    messages = _messages(body)
    logprobs = _chat_logprobs(body, model)
    tools = _tools(body, model)
    fmt = _response_format(body, model)
    kwargs = v.obj(body, "chat_template_kwargs")
    prompt = model.template.render(messages, request_tools=tools, **kwargs)
    v.prompt_length("messages", len(prompt))  # the template adds its own text
    req = _common(body, model, prompt, rid)
    req.response_format, req.logprobs = fmt, logprobs
    return Plan(req, model, ChatEncoder(rid, model.name, logprobs, model.spec.tool_parser if tools else "", n=req.n))


async def plan_completions(body: dict[str, Any], catalog: ServedModels, rid: str, path_model: str | None = None) -> Plan:
    model = await _model(body, catalog)
    prompt = body.get("prompt")
    ids = None
    if isinstance(prompt, list):  # MindIE takes a string or token ids; never a list of strings
        if not prompt:
            raise v.invalid("Prompt array cannot be empty.")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise v.invalid("All elements of the prompt array must be integers.")
        ids = tuple(v.token_ids(prompt))
        v.token_model(model)
    elif prompt is not None and not isinstance(prompt, str):
        raise v.invalid("The type of prompt is abnormal,prompt must be str or integer list.")
    logprobs = _completion_logprobs(body, model)
    fmt = _response_format(body, model)
    req = _common(body, model, "" if ids is not None else v.text(body, "prompt"), rid)
    req.prompt_ids, req.response_format, req.logprobs = ids, fmt, logprobs
    return Plan(req, model, CompletionEncoder(rid, model.name, logprobs, n=req.n))


def usage(done: Done, *more: Done) -> dict:
    """The prompt once, the tokens of every sequence."""
    completion = done.completion_tokens + sum(d.completion_tokens for d in more)
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": done.prompt_tokens + completion,
    }


class _OpenAIEncoder(Encoder):
    object_name = ""

    def __init__(self, rid: str, model: str, logprobs: bool = False, n: int = 1):
        self.rid, self.model, self.created = rid, model, int(time.time())
        self.logprobs = logprobs
        self.offset = 0  # completions' text_offset (bytes) of the next token
        self.n = n
        self.ended: list[Done] = []  # the sequences ended so far (n > 1: usage and [DONE] after the last)

    def envelope(self, choice: dict, **extra) -> dict:
        return {"id": self.rid, "object": self.object_name, "created": self.created, "model": self.model,
                "choices": [choice], **extra}

    def done(self, done: Done) -> bytes:
        self.ended.append(done)
        if len(self.ended) < self.n:
            return self.event(self.envelope(self.final_choice(done)))
        return self.event(self.envelope(self.final_choice(done), usage=usage(*self.ended))) + b"data: [DONE]\n\n"

    def final_choice(self, done: Done) -> dict:
        raise NotImplementedError

    def choice(self, done: Done) -> dict:
        raise NotImplementedError

    def body_many(self, dones: list[Done]) -> dict:
        """n sequences: one choice each, usage over all of them (the prompt once)."""
        out = self.body(dones[0])
        out["choices"] = [self.choice(d) for d in dones]
        out["usage"] = usage(*dones)
        return out


class ChatEncoder(_OpenAIEncoder):
    """With a tool parser (the request has tools): content that cannot be a call streams as it comes;
    a call is held and sent at the end as a ``tool_calls`` delta (one entry per call, with its
    index and id), and the answer ends with ``finish_reason: "tool_calls"``. With n > 1, every
    chunk's choice carries its sequence's index."""

    object_name = "chat.completion.chunk"

    def __init__(self, rid: str, model: str, logprobs: bool = False, tool_parser: str = "", n: int = 1):
        super().__init__(rid, model, logprobs, n)
        self.tool_parser = tool_parser
        self.calls: dict[int, ToolStream] = {}  # per sequence, when the request has tools
        self.frames: dict[int, tuple[bytes, ...]] = {}  # per sequence: a text chunk's bytes around its content

    def _choice(self, content: str | None, finish: str | None, pairs=None, index: int = 0) -> dict:
        return {"index": index, "delta": {"role": "assistant", "content": content},
                "logprobs": self._logprobs(pairs), "finish_reason": finish}

    def _logprobs(self, pairs) -> dict | None:
        """MindIE's chat ``logprobs``: ``content`` entries {token, logprob, bytes, top_logprobs}."""
        if not self.logprobs or pairs is None:
            return None
        return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                            for t, lp in pairs]}

    def _reader(self, index: int) -> ToolStream | None:
        if not self.tool_parser:
            return None
        return self.calls.setdefault(index, ToolStream(self.tool_parser))

    def head(self) -> bytes:
        return self.event(self.envelope(self._choice("", None)))

    def token(self, tok: Token) -> bytes:
        if not self.tool_parser and not self.logprobs:  # plain text: the chunk's fixed bytes around it
            frame = self.frames.get(tok.index) or self._frame(tok.index)
            if frame:
                return frame[0] + orjson.dumps(tok.text) + frame[1]
        reader = self._reader(tok.index)
        text = tok.text if reader is None else reader.feed(tok.text)
        if reader is not None and not text:
            return b""
        return self.event(self.envelope(self._choice(text, None, tok.logprobs, tok.index)))

    def _frame(self, index: int) -> tuple[bytes, ...]:
        """A text chunk of sequence ``index`` rendered once with a marker for its content, cut at the
        marker: the bytes before and after the content's JSON string, the same as rendering it whole.
        Empty (each chunk rendered whole) in the odd case of an id or model name holding the marker."""
        whole = self.event(self.envelope(self._choice(_MARK, None, None, index)))
        if whole.count(_MARK_JSON) != 1:
            return ()
        before, _, after = whole.partition(_MARK_JSON)
        self.frames[index] = before, after
        return before, after

    def done(self, done: Done) -> bytes:
        reader = self._reader(done.index)
        if reader is None:
            return super().done(done)
        rest, calls = reader.end()
        out = self.event(self.envelope(self._choice(rest, None, index=done.index))) if rest else b""
        if calls:
            delta = {"role": "assistant", "content": None, "tool_calls": [c.openai(i) for i, c in enumerate(calls)]}
            out += self.event(self.envelope({"index": done.index, "delta": delta, "logprobs": None,
                                             "finish_reason": None}))
            done = replace(done, finish_reason=TOOL_CALLS)
        return out + super().done(done)

    def final_choice(self, done: Done) -> dict:
        reason = "tool_calls" if done.finish_reason == TOOL_CALLS else done.openai_reason
        return self._choice("", reason, index=done.index)

    def choice(self, done: Done) -> dict:
        content, calls = parse(self.tool_parser, done.text) if self.tool_parser else (done.text, [])
        message = {"role": "assistant", "content": content, "tool_calls": [c.openai() for c in calls]}
        return {"index": done.index, "message": message, "logprobs": self._logprobs(done.logprobs),
                "finish_reason": "tool_calls" if calls else done.openai_reason}

    def body(self, done: Done) -> dict:
        out = self.envelope(self.choice(done), usage=usage(done))
        out["object"] = "chat.completion"
        return out


_MARK = "\x00content\x00"  # a text chunk's content while its template is rendered
_MARK_JSON = orjson.dumps(_MARK)

TOOL_CALLS = "tool_calls"  # a Done's finish reason once its text was read as tool calls (chat only)


class CompletionEncoder(_OpenAIEncoder):
    object_name = "text_completion"

    def __init__(self, rid: str, model: str, logprobs: bool = False, n: int = 1):
        super().__init__(rid, model, logprobs, n)
        self.offsets: dict[int, int] = {}  # text_offset (bytes) of each sequence's next token

    def _choice(self, text: str, finish: str | None, pairs=None, index: int = 0) -> dict:
        return {"index": index, "text": text, "logprobs": self._logprobs(pairs, index), "stop_reason": None,
                "finish_reason": finish}

    def _logprobs(self, pairs, index: int = 0) -> dict | None:
        """MindIE's completions ``logprobs``: text_offset (bytes), token_logprobs, tokens, top_logprobs
        (each token's own {token: logprob}; no alternatives)."""
        if not self.logprobs or pairs is None:
            return None
        out: dict[str, list] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        for t, lp in pairs:
            offset = self.offsets.get(index, 0)
            out["text_offset"].append(offset)
            self.offsets[index] = offset + len(t.encode())
            out["token_logprobs"].append(lp)
            out["tokens"].append(t)
            out["top_logprobs"].append({t: lp})
        return out

    def token(self, tok: Token) -> bytes:
        return self.event(self.envelope(self._choice(tok.text, None, tok.logprobs, tok.index)))

    def final_choice(self, done: Done) -> dict:
        return self._choice("", done.openai_reason, index=done.index)

    def choice(self, done: Done) -> dict:
        return self._choice(done.text, done.openai_reason, done.logprobs, done.index)

    def body(self, done: Done) -> dict:
        return self.envelope(self.choice(done), usage=usage(done))
