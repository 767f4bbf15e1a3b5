"""JSON text as Triton's HTTP front end writes it: rapidjson's compact ``Writer`` (TritonJson, with
``kWriteNanAndInfFlag``), byte for byte.

    strings   raw bytes, only ``"``, ``\\`` and control characters escaped (``\\n``, ``\\u001F``):
              non-ASCII and even invalid UTF-8 pass unchanged
    doubles   rapidjson 1.1.0's ``internal::dtoa``: Grisu2 digits (not always the shortest:
              ``0.30000001192092898`` for float32 0.3) in ``Prettify``'s layout: ``3.0``,
              ``0.000001``, ``1e-7``, ``100000000000000000000.0``, ``1e21``, ``-0.0``; ``NaN``,
              ``Infinity``, ``-Infinity``. Written by the compiled writer
              (gateway/core/_floattext.c, ``rapidjson_array`` / ``rapidjson_double``), FP32 values
              widened to double as Triton's ``AppendDouble`` widens them.
"""

from __future__ import annotations

import re

import numpy as np
import orjson

from gateway.core import floattext, jsonescape

_ESC = {cp: text.encode() for cp, text in jsonescape.RAPIDJSON.items()}  # byte -> its escape
_NEEDS = re.compile(rb'["\\\x00-\x1f]')


def _sub(m: re.Match) -> bytes:
    return _ESC[m.group()[0]]


def string(value: bytes | str) -> bytes:
    """A JSON string of ``value`` (str: its UTF-8 bytes)."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    return b'"' + (_NEEDS.sub(_sub, raw) if _NEEDS.search(raw) else raw) + b'"'


double = floattext.rapidjson_double  # rapidjson's ``Writer::Double`` text of a float
# ``[v,...]`` of a tensor's raw FP32 (``float_raw(raw, True)``) or FP64 bytes, each value as a double
float_raw = floattext.rapidjson_array


def floats(arr: np.ndarray) -> bytes:
    """``[v,...]`` of a flat float array (float32 as float32, any other as float64)."""
    f32 = arr.dtype == np.float32
    return floattext.rapidjson_array(np.ascontiguousarray(arr, dtype=np.float32 if f32 else np.float64), f32)


def ints(arr: np.ndarray) -> bytes:
    return orjson.dumps(arr.reshape(-1), option=orjson.OPT_SERIALIZE_NUMPY)


def bools(arr: np.ndarray) -> bytes:
    return orjson.dumps(arr.reshape(-1).astype(bool, copy=False), option=orjson.OPT_SERIALIZE_NUMPY)


def strings(items) -> bytes:
    return b"[" + b",".join(string(v) for v in items) + b"]"


def error(message: str) -> bytes:
    """Triton's error envelope ``{"error":"..."}``."""
    return b'{"error":' + string(message) + b"}"
