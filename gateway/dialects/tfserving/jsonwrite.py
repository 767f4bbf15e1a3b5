"""TF Serving REST answers, byte for byte as its rapidjson ``PrettyWriter`` writes them.

TF Serving writes every predict, classify, regress and error answer with
``rapidjson::PrettyWriter<StringBuffer>`` (tensorflow_serving/util/json_tensor.cc, ``RapidJsonWriter``;
rapidjson 1.1.0, pinned in tensorflow_serving/workspace.bzl), never calling ``SetIndent``. What that
writer does (include/rapidjson/prettywriter.h, ``PrettyPrefix``, ``EndObject``, ``EndArray``,
``WriteIndent``):

* indentation is 4 spaces times the number of open containers (``indentCharCount_`` 4, ``' '``);
* an object member starts on a new line (``\\n`` + indent; ``,\\n`` + indent after the first), its
  name is followed by ``": "``, and a non-empty object closes on a new line at its parent's indent;
* an array element starts on a new line likewise, unless ``kFormatSingleLineArray`` is on: then
  elements follow each other separated by ``", "`` and a non-empty array closes without a newline;
  the flag is read at every element and at every close, whatever it was when the array opened;
* empty objects and arrays are ``{}`` / ``[]``.

``MakeRowFormatJsonFromTensors`` switches the flag on for each row and off again before the next
one (and before ``predictions`` closes), so rows are single-line text and the closing ``]`` of
``predictions`` stands on its own line; ``MakeColumnarFormatJsonFromTensors`` never switches it on.
Values: ``WriteDecimal`` for floats (``decimal``: ``gateway.core.floattext``, style TFSERVING), rapidjson's
``Int``/``Int64``/``Uint``/``Uint64``/``Bool`` for integers and bools, ``String`` for DT_STRING
(escaping as ``Writer::WriteString``: ``"``, ``\\`` and control characters only, other bytes as they
are), ``{"b64": ...}`` objects for ``*_bytes`` outputs.

Speed: a float tensor's text, brackets, separators and indentation included, is one pass of the
compiled writer (``floattext.nested`` with the texts of each level), so the pretty form costs what
the compact form does; other dtypes join their values' text with the separators of their place.
"""

from __future__ import annotations

import base64
import math

import numpy as np
import orjson

from gateway.core import datatypes, jsonescape
from gateway.core.errors import invalid

from . import decimal

INDENT = 4  # PrettyWriter's default indentCharCount_; TF Serving never calls SetIndent
# the dtypes TF Serving converts to and from JSON (AddValueToTensor, AddSingleValueAndAdvance)
JSON_TYPES = frozenset({"INT8", "INT16", "INT32", "UINT8", "INT64", "UINT32", "UINT64", "BOOL", "FP32", "FP64",
                        "BYTES"})


def _nl(depth: int) -> str:
    """A new line at the indent of ``depth`` open containers (WriteIndent)."""
    return "\n" + " " * (INDENT * depth)


# -- strings (Writer::WriteString) ------------------------------------------------------------------
_ESCAPE = jsonescape.RAPIDJSON


def string(raw: bytes) -> str:
    """A JSON string of ``raw`` as rapidjson writes it: ``"``, ``\\`` and bytes below 0x20 escaped
    (upper-case hex), every other byte copied as it is (``TranscodeUnsafe``, no validation: bytes
    that are not UTF-8 stay so). Returned as latin-1 text, one character per byte."""
    return '"' + raw.decode("latin-1").translate(_ESCAPE) + '"'


def text_string(text: str) -> str:
    """``string`` of a Python str: its UTF-8 bytes (text decoded with surrogateescape gets its
    original bytes back; a lone surrogate is written as its surrogatepass bytes)."""
    for handler in ("strict", "surrogateescape"):
        try:
            return string(text.encode("utf-8", handler))
        except UnicodeEncodeError:
            continue
    return string(text.encode("utf-8", "surrogatepass"))


def _b64_object(raw: bytes, depth: int) -> str:
    """``{"b64": ...}`` opened with ``depth - 1`` containers around it (AddSingleValueAndAdvance)."""
    return "{" + _nl(depth) + '"b64": "' + base64.b64encode(raw).decode("ascii") + '"' + _nl(depth - 1) + "}"


# -- values ---------------------------------------------------------------------------------------------
def _check_writable(arr: np.ndarray, v2: str) -> None:
    if v2 not in JSON_TYPES and arr.size:  # AddSingleValueAndAdvance fails on the first value it cannot write
        raise invalid(f"Failed to write JSON value for tensor type: {datatypes.by_v2(v2).tf_name[3:].lower()}")


def _joined(flat: np.ndarray, v2: str, sep: str) -> str:
    """The text of every value of a 1-D numeric/bool array, joined with ``sep``."""
    if flat.dtype.kind == "f":
        return decimal.join(flat, sep)
    text = orjson.dumps(np.ascontiguousarray(flat), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode("ascii")
    return text.replace(",", sep) if sep != "," else text


def _tokens(flat: np.ndarray, v2: str, binary: bool, depth: int) -> list[str]:
    """The text of every value of a 1-D array; ``depth``: containers open around a b64 object."""
    if v2 == "BYTES":
        if binary:
            return [_b64_object(b, depth) for b in flat.tolist()]
        return [string(b) for b in flat.tolist()]
    if not flat.size:
        return []
    if flat.dtype.kind == "f":
        return decimal.tokens(flat)
    return _joined(flat, v2, ",").split(",")


def _brackets(depth: int, rank: int, single: bool) -> tuple[list[str], list[str], list[str]]:
    """(opens, separators, closes) per level of a rank-``rank`` array whose outermost level is the
    ``depth``-th open container."""
    if single:
        return ["["] * rank, [", "] * rank, ["]"] * rank
    return (["[" + _nl(depth + lv) for lv in range(rank)], ["," + _nl(depth + lv) for lv in range(rank)],
            [_nl(depth + lv - 1) + "]" for lv in range(rank)])


def _group(texts: list[str], shape: tuple[int, ...], stop: int, brackets) -> list[str]:
    """Wrap the texts of a flat run of values into the arrays of ``shape`` from its innermost level
    out to level ``stop``: the texts of the ``prod(shape[:stop])`` sub-arrays at that level."""
    opens, seps, closes = brackets
    for lv in range(len(shape) - 1, stop - 1, -1):
        step, groups = shape[lv], math.prod(shape[:lv])
        if step:
            o, s, c = opens[lv], seps[lv], closes[lv]
            texts = [o + s.join(texts[i * step:(i + 1) * step]) + c for i in range(groups)]
        else:
            texts = ["[]"] * groups
    return texts


def _layout(arr: np.ndarray, v2: str, binary: bool, depth: int, single: bool) -> str:
    """AddTensorValues: ``arr`` as nested arrays, the outermost opened with ``depth - 1`` containers
    around it (so ``depth`` counts it too); ``single``: kFormatSingleLineArray is on throughout."""
    if arr.ndim == 0:
        return _tokens(arr.reshape(1), v2, binary, depth)[0]
    brackets = _brackets(depth, arr.ndim, single)
    if arr.dtype.kind == "f":  # one pass of the compiled writer over the whole array
        return decimal.nested(arr, *brackets)
    if arr.ndim == 1 and v2 != "BYTES":
        if not arr.size:
            return "[]"
        return brackets[0][0] + _joined(arr, v2, brackets[1][0]) + brackets[2][0]
    texts = _tokens(arr.reshape(-1), v2, binary, depth + arr.ndim)
    return _group(texts, arr.shape, 0, brackets)[0]


class _RowSplit(dict):
    """(opens, separators, closes) for ``floattext.nested`` that write the rows of a rank-n array
    single-line, separated by NUL and without the outer brackets."""

    def __missing__(self, rank: int):
        levels = (["", *["["] * (rank - 1)], ["\0", *[", "] * (rank - 1)], ["", *["]"] * (rank - 1)])
        self[rank] = levels
        return levels


_ROW_SPLIT = _RowSplit()


def _rows(arr: np.ndarray, v2: str, binary: bool, depth: int) -> list[str]:
    """The single-line text of every row ``arr[i]`` (each opened with ``depth - 1`` containers
    around it), from one pass over all the values."""
    if arr.ndim > 1 and arr.dtype.kind == "f" and arr.shape[0]:
        # the rows joined by a separator no value text holds, from one compiled pass
        return decimal.nested(arr, *_ROW_SPLIT[arr.ndim]).split("\0")
    texts = _tokens(arr.reshape(-1), v2, binary, depth + arr.ndim - 1)
    if arr.ndim == 1:
        return texts
    return _group(texts, arr.shape, 1, _brackets(depth, arr.ndim, True))


# -- predict --------------------------------------------------------------------------------------------
def _binary(name: str, v2: str) -> bool:
    """IsNamedTensorBytes: a DT_STRING tensor whose name ends in ``_bytes``."""
    return v2 == "BYTES" and name.endswith("_bytes")


def _key(name: str) -> str:
    return text_string(name) + ": "


def _encode(text: str) -> bytes:
    """Every piece is ASCII or comes from ``string`` (one character per byte): back to those bytes."""
    return text.encode("latin-1")


def predict_row(outputs: dict[str, tuple[np.ndarray, str]], batch: int) -> bytes:
    """MakeRowFormatJsonFromTensors: ``{"predictions": [...]}``, each row single-line text."""
    for arr, v2 in outputs.values():
        _check_writable(arr, v2)
    if batch == 0:
        return b'{\n    "predictions": []\n}'
    if len(outputs) == 1:
        (name, (arr, v2)), = outputs.items()
        if arr.ndim == 1 and v2 != "BYTES":
            body = _joined(arr, v2, ", ")
        else:
            body = ", ".join(_rows(arr, v2, _binary(name, v2), 3))
        return _encode('{\n    "predictions": [' + body + _nl(1) + "]\n}")
    keys = {name: _nl(3) + _key(name) for name in outputs}
    columns = [(keys[name], _rows(arr, v2, _binary(name, v2), 4)) for name, (arr, v2) in outputs.items()]
    items = []
    for i in range(batch):
        items.append("{" + ",".join(key + rows[i] for key, rows in columns) + _nl(2) + "}")
    return _encode('{\n    "predictions": [' + _nl(2) + ("," + _nl(2)).join(items) + _nl(1) + "]\n}")


def predict_columnar(outputs: dict[str, tuple[np.ndarray, str]]) -> bytes:
    """MakeColumnarFormatJsonFromTensors: ``{"outputs": ...}``, one value per line."""
    for arr, v2 in outputs.values():
        _check_writable(arr, v2)
    if len(outputs) == 1:
        (name, (arr, v2)), = outputs.items()
        return _encode('{\n    "outputs": ' + _layout(arr, v2, _binary(name, v2), 2, single=False) + "\n}")
    members = [_key(name) + _layout(arr, v2, _binary(name, v2), 3, single=False)
               for name, (arr, v2) in outputs.items()]
    return _encode('{\n    "outputs": {' + _nl(2) + ("," + _nl(2)).join(members) + _nl(1) + "}\n}")


# -- classify / regress / errors ----------------------------------------------------------------------
def classify(labels: list[list[str]], scores: np.ndarray) -> bytes:
    """MakeJsonFromClassificationResult: the flag is on from each classification's ``[`` to its
    ``]`` and off before ``results`` closes: ``[[["a", 0.9], ["b", 0.1]], [...]\\n    ]``."""
    rows = []
    for labs, sc in zip(labels, scores, strict=True):
        toks = decimal.tokens(np.asarray(sc).reshape(-1))
        rows.append("[" + ", ".join(f"[{text_string(lab)}, {tok}]" for lab, tok in zip(labs, toks, strict=True)) + "]")
    return _encode('{\n    "results": [' + ", ".join(rows) + _nl(1) + "]\n}")


def regress(values: np.ndarray) -> bytes:
    """MakeJsonFromRegressionResult: the flag is on before ``results`` opens: ``[1.0, 2.0]`` on one line."""
    return _encode('{\n    "results": [' + decimal.join(values.reshape(-1), ", ") + "]\n}")


def error(message: str) -> bytes:
    """MakeJsonFromStatus: ``{"error": "<message>"}``."""
    return _encode('{\n    "error": ' + text_string(message) + "\n}")
