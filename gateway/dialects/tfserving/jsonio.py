"""JSON in and out for TF Serving REST, with TF Serving's NaN/Infinity tokens.

Parsing: orjson first (fast, strict); only when orjson rejects a body, the stdlib parser, which
accepts ``NaN``, ``Infinity`` and ``-Infinity`` as rapidjson's ``kParseNanAndInfFlag`` does
(rapidjson also takes a bare ``Inf``: it is rewritten to ``Infinity`` before the fallback).

Answers are written by ``jsonwrite`` (predict, classify, regress, errors) and ``protojson``
(status, metadata).
"""

from __future__ import annotations

import json
import re

import orjson

from gateway.core.bounded import json_deeper
from gateway.core.errors import invalid
from gateway.core.jsonwords import STDLIB_TO_RAPIDJSON

_BARE_INF = re.compile(rb"(?<![A-Za-z\"])(-?)Inf(?!inity)(?![A-Za-z\"])")




SMALL = 64 << 10  # bodies up to this size that orjson refuses are re-read by the stdlib parser
#                   (exact rapidjson offsets); larger ones are worded from orjson's error alone
ORJSON_DEPTH = 1024  # orjson refuses deeper documents itself: no walk is needed up to this limit
_EXTENSION = re.compile(rb"-?(?:NaN|Inf)")  # the tokens only the tolerant parser takes


def loads(body: bytes, max_depth: int | None = None):
    """Parse a request body; 400 ``JSON Parse error: ...`` as TF Serving words it.

    As rapidjson with ``kParseStopWhenDoneFlag``, whatever follows the first complete value is
    ignored; as with ``kParseIterativeFlag``, nesting has no depth limit (documents deeper than the
    stdlib parser goes are read by ``_deep_loads``, without recursion) unless ``max_depth`` (the
    gateway's limits.max_json_depth) is given: past it the document is refused, at once when
    orjson stops at its own 1024 levels, else by a walk over its lists and objects (only when the
    limit is below 1024).

    Bounded work on a bad body: orjson reads it once; the stdlib parser reads it a second time
    only when it may be valid after all (a NaN/Infinity token where orjson stopped, a number past
    double range) or when it is small (``SMALL``); otherwise orjson's error position is worded as
    rapidjson words it (``_worded``), without a second pass over the document."""
    if not body or body.isspace():  # (strip() would copy the body)
        raise invalid("JSON Parse error: The document is empty")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        doc = _refused(body, e, max_depth)
    if max_depth is not None and max_depth < ORJSON_DEPTH and json_deeper(doc, max_depth):
        raise _too_deep(max_depth)
    return doc


def _refused(body: bytes, e: orjson.JSONDecodeError, max_depth: int | None):
    if e.msg == "unexpected content after document":  # kParseStopWhenDoneFlag: the rest is ignored
        return loads(body[: e.pos], max_depth)
    if e.msg == "depth limit exceeded" and max_depth is not None and max_depth <= ORJSON_DEPTH:
        raise _too_deep(max_depth)
    if (len(body) <= SMALL or e.msg in ("depth limit exceeded", "number is infinity when parsed as double")
            or _EXTENSION.match(body, _byte_offset(body, e.pos))):
        return _tolerant(body, max_depth)
    raise invalid(_worded(body, e))


def _byte_offset(body: bytes, pos: int) -> int:
    """orjson's error position counts characters; the byte offset of that character."""
    if body.isascii():
        return pos
    return len(body.decode("utf-8", "replace")[:pos].encode("utf-8", "surrogatepass"))


def _too_deep(max_depth: int):
    return invalid(f"JSON Parse error: The document is nested more than {max_depth} levels deep")


# orjson's error (message prefix) -> rapidjson's (GetParseError_En)
_ORJSON = (
    ("unexpected character, expected ',' or ']'", "Missing a comma or ']' after an array element."),
    ("unexpected character, expected ',' or '}'", "Missing a comma or '}' after an object member."),
    ("unexpected character, expected ':'", "Missing a colon after a name of object member."),
    ("unexpected character, expected a string key", "Missing a name for object member."),
    ("invalid escaped sequence", "Invalid escape character in string."),
    ("unexpected control character", "Invalid encoding in string."),
    ("no digit after decimal point", "Miss fraction part in number."),
    ("no digit after exponent", "Miss exponent in number."),
    ("no low surrogate", "The surrogate pair in string is invalid."),
    ("no high surrogate", "The surrogate pair in string is invalid."),
    ("str is not valid UTF-8", "Invalid encoding in string."),
)


def _worded(body: bytes, e: orjson.JSONDecodeError) -> str:
    """rapidjson's text for orjson's error, from a bounded look at the body after its position."""
    pos = e.pos
    if e.msg == "trailing comma is not allowed":  # rapidjson reads on: a value (array) or a name (object)
        at = _next_token(body, _byte_offset(body, pos) + 1)
        closer = body[at:at + 1]
        pos += at - _byte_offset(body, pos)
        text = "Missing a name for object member." if closer == b"}" else "Invalid value."
        return f"JSON Parse error: {text} at offset: {pos}"
    text = next((words for prefix, words in _ORJSON if e.msg.startswith(prefix)), "Invalid value.")
    return f"JSON Parse error: {text} at offset: {pos}"


def _next_token(body: bytes, pos: int) -> int:
    """The offset of the first non-blank byte from ``pos`` (a bounded scan)."""
    window = body[pos:pos + 4096]
    return pos + len(window) - len(window.lstrip(b" \t\n\r"))


def _tolerant(body: bytes, max_depth: int | None):
    """The stdlib parser, which takes NaN/Infinity (and a bare Inf, rewritten) as rapidjson's
    ``kParseNanAndInfFlag`` does; its errors in rapidjson's words."""
    text = body
    if b"Inf" in body and body.count(b"Inf") != body.count(b"Infinity"):  # a bare Inf somewhere
        text = _BARE_INF.sub(rb"\1Infinity", body)
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("JSON Parse error: Invalid encoding in string. at offset: 0") from None
    try:
        doc = _DECODER.raw_decode(decoded, len(decoded) - len(decoded.lstrip()))[0]
    except RecursionError:
        doc = _deep_loads(decoded, max_depth)
    except json.JSONDecodeError as e:
        msg = STDLIB_TO_RAPIDJSON.get(e.msg, e.msg)
        raise invalid(f"JSON Parse error: {msg} at offset: {e.pos}") from None
    if "\\u" in decoded and _lone_surrogate(doc):  # orjson refuses them; the stdlib parser does not
        at = _SURROGATE_ESCAPE.search(decoded)
        raise invalid(f"JSON Parse error: The surrogate pair in string is invalid. at offset: {at.start() if at else 0}")
    return doc


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(doc) -> bool:
    """Whether any string (key or value) holds a surrogate code point: an escape of half a pair
    (whole pairs were joined by the parser), which rapidjson refuses."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return True
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return False


_DECODER = json.JSONDecoder()
_TOKEN = re.compile(r"""[ \t\n\r]*(?:(\[+)|(\]+)|([{}:,])|("(?:[^"\\\x00-\x1f]|\\.)*")|"""
                    r"""(-?(?:Infinity|NaN)|NaN|true|false|null)|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?))""")
_WORDS = {"true": True, "false": False, "null": None, "NaN": float("nan"), "-NaN": float("nan"),
          "Infinity": float("inf"), "-Infinity": float("-inf")}


def _deep_loads(text: str, max_depth: int | None = None):
    """An iterative JSON reader (explicit stack) for documents nested deeper than recursion allows
    (``max_depth``: refused past that many levels)."""
    stack: list[list] = []  # [container, pending key]
    pos, state, root = 0, "value", None  # state: value | first (value or ]) | key | firstkey | colon | sep | done

    def bad():
        return invalid(f"JSON Parse error: Invalid value. at offset: {pos}")

    def put(v):
        nonlocal root
        if not stack:
            root = v
            return "done"
        top = stack[-1]
        if isinstance(top[0], list):
            top[0].append(v)
        else:
            top[0][top[1]] = v
        return "sep"

    while state != "done":
        m = _TOKEN.match(text, pos)
        if m is None:
            raise bad()
        opens, closes, punct, string, word, number = m.groups()
        if opens:
            if state not in ("value", "first"):
                raise bad()
            for _ in range(len(opens) - 1):
                stack.append([[], None])
            stack.append([[], None])
            if max_depth is not None and len(stack) > max_depth:
                raise _too_deep(max_depth)
            state = "first"
        elif closes:
            for _ in closes:
                if not stack or not isinstance(stack[-1][0], list) or state not in ("sep", "first"):
                    raise bad()
                state = put(stack.pop()[0])
        elif punct == "{":
            if state not in ("value", "first"):
                raise bad()
            stack.append([{}, None])
            if max_depth is not None and len(stack) > max_depth:
                raise _too_deep(max_depth)
            state = "firstkey"
        elif punct == "}":
            if not stack or not isinstance(stack[-1][0], dict) or state not in ("sep", "firstkey"):
                raise bad()
            state = put(stack.pop()[0])
        elif punct == ":":
            if state != "colon":
                raise bad()
            state = "value"
        elif punct == ",":
            if state != "sep":
                raise bad()
            state = "key" if isinstance(stack[-1][0], dict) else "value"
        elif string is not None:
            try:
                value = json.loads(string)
            except json.JSONDecodeError:
                raise invalid(f"JSON Parse error: Invalid escape character in string. at offset: {pos}") from None
            if state in ("key", "firstkey"):
                stack[-1][1] = value
                state = "colon"
            elif state in ("value", "first"):
                state = put(value)
            else:
                raise bad()
        else:
            if state not in ("value", "first"):
                raise bad()
            if word is not None:
                value = _WORDS[word]
            elif "." in number or "e" in number or "E" in number:
                value = float(number)
            else:
                value = int(number)
            state = put(value)
        pos = m.end()
    return root


def debug_string(value, limit: int = 256) -> str:
    """JsonValueToDebugString (json_tensor.cc): the value written by rapidjson's PrettyWriter with
    kFormatSingleLineArray through JsonWriterWithLimit, which lets each writer call through only
    while fewer than ``limit`` bytes are written, and stops the walk at the first one refused (the
    last token may go past the limit; nothing is closed). A NaN or infinite number stops it too:
    rapidjson's ``Writer::Double`` refuses them (no kWriteNanAndInfFlag) after the separator.

    Written without recursion and only as far as the limit, so any depth or size is cheap."""
    out: list[str] = []
    size = 0
    levels: list[list] = []  # [in_array, values written] per open container (PrettyWriter's Level)

    def prefix() -> str:
        if not levels:
            return ""
        level = levels[-1]
        level[1] += 1
        if level[0]:
            return ", " if level[1] > 1 else ""
        if level[1] % 2 == 0:  # a value after its name
            return ": "
        return ("\n" if level[1] == 1 else ",\n") + "    " * len(levels)

    stack: list = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if size >= limit:
            break
        if item is _END:
            stack.pop()
            if not stack:
                break
            in_array, count = levels.pop()
            text = "]" if in_array else ("\n" + "    " * len(levels) + "}" if count else "}")
        elif isinstance(item, _Key):
            text = prefix() + _rj_string(item.name)
        elif isinstance(item, dict):
            text = prefix() + "{"
            levels.append([False, 0])
            stack.append(_members(item))
        elif isinstance(item, list):
            text = prefix() + "["
            levels.append([True, 0])
            stack.append(iter(item))
        else:
            text = prefix()
            token = _rj_scalar(item)
            if token is None:  # Writer::Double refuses NaN/Inf: the walk ends after the separator
                out.append(text)
                break
            text += token
        out.append(text)
        size += len(text.encode("utf-8", "surrogatepass"))
    text = "".join(out)
    return text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT]


# The one place the gateway departs from JsonValueToDebugString: its last token may be as long as the
# client made it (a 16 MB string would be quoted whole); errors never echo more than this
ECHO_LIMIT = 1024


class _Key:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


_END = object()


def _members(obj: dict):
    for k, v in obj.items():
        yield _Key(k)
        yield v


_RJ_ESCAPE = {c: f"\\u{c:04X}" for c in range(0x20)} | {
    0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}


def _rj_string(text: str) -> str:
    """Writer::WriteString: ``"``, ``\\`` and control characters escaped, the rest as it is."""
    return '"' + text.translate(_RJ_ESCAPE) + '"'


def _rj_scalar(v) -> str | None:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _rj_string(v)
    if isinstance(v, int) and -(2**63) <= v < 2**64:  # Int/Uint/Int64/Uint64
        return str(v)
    return rj_double(float(v) if not isinstance(v, float) else v)


def rj_double(d: float) -> str | None:
    """rapidjson 1.1.0 ``Writer::Double`` (internal/dtoa.h ``dtoa`` + ``Prettify``): shortest digits,
    positional for decimal exponents up to 21 and down to -6 (``.0`` on whole numbers), else
    ``1.5e-7`` / ``1e30``; None for NaN and infinities (refused)."""
    if d != d or d in (float("inf"), float("-inf")):
        return None
    if d == 0:
        return "-0.0" if str(d).startswith("-") else "0.0"
    sign = "-" if d < 0 else ""
    mant, _, exp = f"{abs(d)!r}".partition("e")
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0")
    k = int(exp or 0) - len(frac)
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    kk = length + k  # 10^(kk-1) <= d < 10^kk
    if 0 <= k and kk <= 21:
        return sign + digits + "0" * k + ".0"
    if 0 < kk <= 21:
        return sign + digits[:kk] + "." + digits[kk:]
    if -6 < kk <= 0:
        return sign + "0." + "0" * -kk + digits
    if length == 1:
        return sign + digits + "e" + str(kk - 1)
    return sign + digits[0] + "." + digits[1:] + "e" + str(kk - 1)
