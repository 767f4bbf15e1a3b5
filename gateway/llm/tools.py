"""Tool calls in a model's text, per model (``tool_parser``), as vLLM's parsers read them.

``hermes``       ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen 2/2.5/3);
                 text before the first block is the message's content.
``llama3_json``  the whole answer one JSON object ``{"name": ..., "parameters": {...}}`` (or several
                 joined by ``;``), optionally after ``<|python_tag|>`` (Llama 3.1/3.2/3.3).
``mistral``      ``[TOOL_CALLS]`` then a JSON array of ``{"name", "arguments"}`` (Mistral); text
                 before it is content.

``parse`` reads a whole answer: (content or None, calls). ``ToolStream`` reads a stream: text that
cannot start a call passes at once as content; from a call's opening marker on, everything is held
and read as calls at the end (a stream's tool calls come as one delta each, at the end). Text that
looked like a call but does not parse is given back as content, as vLLM does.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from gateway.core.errors import invalid


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as text (OpenAI's function.arguments)
    id: str

    def openai(self, index: int | None = None) -> dict:
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(obj) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(obj["name"], text, call_id())


PYTHON_TAG = "<|python_tag|>"
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def _hermes(text: str) -> tuple[str | None, list[ToolCall]] | None:
    blocks = _HERMES.findall(text)
    if not blocks:
        return None
    calls = []
    for block in blocks:
        try:
            call = _call(json.loads(block))
        except ValueError:
            return None
        if call is None:
            return None
        calls.append(call)
    return text[: text.index("<tool_call>")].strip() or None, calls


def _llama3(text: str) -> tuple[str | None, list[ToolCall]] | None:
    body = text.strip().removeprefix(PYTHON_TAG).strip()
    if not body.startswith("{"):
        return None
    calls = []
    for part in body.split(";"):
        try:
            call = _call(json.loads(part))
        except ValueError:
            return None
        if call is None:
            return None
        calls.append(call)
    return None, calls


def _mistral(text: str) -> tuple[str | None, list[ToolCall]] | None:
    at = text.find("[TOOL_CALLS]")
    if at < 0:
        return None
    try:
        items = json.loads(text[at + len("[TOOL_CALLS]"):].strip())
    except ValueError:
        return None
    items = items if isinstance(items, list) else [items]
    calls = [_call(i) for i in items]
    if not calls or any(c is None for c in calls):
        return None
    return text[:at].strip() or None, calls


# parser -> (reader, the marker a call opens with, whether it must open the answer)
PARSERS = {
    "hermes": (_hermes, "<tool_call>", False),
    "llama3_json": (_llama3, "{", True),
    "mistral": (_mistral, "[TOOL_CALLS]", False),
}


def check(name: str) -> str:
    if name and name not in PARSERS:
        raise invalid(f"unknown tool_parser {name!r}; known: {sorted(PARSERS)}")
    return name


def parse(parser: str, text: str) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a whole answer; no calls: the text is all content."""
    got = PARSERS[parser][0](text)
    return got if got is not None else (text, [])


class ToolStream:
    """A streamed answer: ``feed`` gives the content that may be shown now; ``end`` the rest
    (content held back that turned out not to be a call) and the calls."""

    def __init__(self, parser: str):
        self.parser = parser
        self.marker, self.at_start = PARSERS[parser][1], PARSERS[parser][2]
        self.held = ""  # text that is, or may be the start of, a call
        self.calling = False
        self.plain = False  # no call can come any more: all content

    def feed(self, text: str) -> str:
        if self.calling:
            self.held += text
            return ""
        if self.plain:
            return text
        pending, self.held = self.held + text, ""
        if self.at_start:  # a call only if the answer opens with it (after blanks, or the python tag)
            head = pending.lstrip()
            if not head or PYTHON_TAG.startswith(head):
                self.held = pending  # blanks, or maybe the python tag: wait
                return ""
            if head.startswith(self.marker) or head.startswith(PYTHON_TAG):
                self.calling, self.held = True, pending
                return ""
            self.plain = True
            return pending
        at = pending.find(self.marker)
        if at >= 0:
            self.calling, self.held = True, pending[at:]
            return pending[:at]
        keep = _partial(pending, self.marker)
        self.held = pending[len(pending) - keep:]
        return pending[: len(pending) - keep]

    def end(self) -> tuple[str, list[ToolCall]]:
        if not self.calling:
            rest, self.held = self.held, ""
            return rest, []
        got = PARSERS[self.parser][0](self.held)
        if got is None:
            return self.held, []
        return "", got[1]  # content before the call was shown already


def _partial(text: str, marker: str) -> int:
    """The length of the longest tail of ``text`` that is a proper prefix of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
