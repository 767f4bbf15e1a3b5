"""A KServe V2 REST body parsed as Triton's HTTP front end parses it (rapidjson, iterative, NaN/Inf).

orjson reads valid bodies; a body orjson refuses is re-read by the stdlib parser (which takes
``NaN``/``Infinity``, and keeps bytes that are not UTF-8), and a body neither reads is refused
with rapidjson's words and offset (``failed to parse the request JSON buffer: <what> at <n>``).
Triton answers that with 500; the gateway with 400 (the client's mistake), same words.
"""

from __future__ import annotations

import json
import re

import orjson

from gateway.core.errors import invalid
from gateway.core.jsonwords import STDLIB_TO_RAPIDJSON

_BARE_INF = re.compile(r"(?<![A-Za-z\"])(-?)Inf(?!inity)(?![A-Za-z\"])")


def loads(body: bytes):
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    text = bytes(body).decode("utf-8", "surrogateescape")  # a large body is a memoryview (Edge.route buffered)
    try:
        return json.loads(_BARE_INF.sub(r"\1Infinity", text) if "Inf" in text else text)
    except json.JSONDecodeError as e:
        raise invalid(f"failed to parse the request JSON buffer: {_worded(text, e)}") from None
    except RecursionError:
        raise invalid("failed to parse the request JSON buffer: nesting too deep") from None


def _worded(text: str, e: json.JSONDecodeError) -> str:
    pos = e.pos
    if not text.strip():
        return f"The document is empty. at {len(text.encode('utf-8', 'surrogateescape'))}"
    what = STDLIB_TO_RAPIDJSON.get(e.msg)
    if e.msg == "Expecting ',' delimiter":
        what = ("Missing a comma or '}' after an object member." if _inner(text, pos) == "{"
                else "Missing a comma or ']' after an array element.")
    elif e.msg.startswith("Unterminated string"):
        pos = len(text)
    elif what is None:
        what = "Invalid value."
    if what == "Invalid value.":  # rapidjson stops where a literal stops matching, not where it began
        pos += max(_matched(text, pos, lit) for lit in _LITERALS)
    return f"{what} at {len(text[:pos].encode('utf-8', 'surrogateescape'))}"


_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


def _matched(text: str, pos: int, literal: str) -> int:
    n = 0
    while n < len(literal) and pos + n < len(text) and text[pos + n] == literal[n]:
        n += 1
    return n if n < len(literal) else 0


def _inner(text: str, pos: int) -> str:
    """The innermost container open at ``pos``: ``{`` or ``[``."""
    stack: list[str] = []
    in_str = esc = False
    for ch in text[:pos]:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def utf8(s: str) -> bytes:
    """A parsed JSON string as the bytes rapidjson would hold (bytes that were not UTF-8 kept)."""
    try:
        return s.encode()
    except UnicodeEncodeError:
        try:
            return s.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return s.encode("utf-8", "surrogatepass")
