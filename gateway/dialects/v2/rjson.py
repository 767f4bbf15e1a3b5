"""JSON text as Triton's HTTP front end writes it: rapidjson's compact ``Writer`` (TritonJson, with
``kWriteNanAndInfFlag``), byte for byte.

    strings   raw bytes, only ``"``, ``\\`` and control characters escaped (``\\n``, ``\\u001F``):
              non-ASCII and even invalid UTF-8 pass unchanged
    doubles   Grisu2 digits in rapidjson's ``Prettify`` layout: ``3.0``, ``0.000001``, ``1e-7``,
              ``100000000000000000000.0``, ``1e21``; ``NaN``, ``Infinity``, ``-Infinity``
    arrays    FP32 / FP64 tensors take orjson's C writer where its text is rapidjson's
              (finite values, 0 or 1e-5 <= |x| < 1e16), the exact per-value writer otherwise

Digits are Python's shortest round-trip digits; Grisu2 gives the same except in rare cases where
it is not shortest (docs/v2.md, "Differences").
"""

from __future__ import annotations

import math
import re

import numpy as np
import orjson

from gateway.core import jsonescape

_ESC = {cp: text.encode() for cp, text in jsonescape.RAPIDJSON.items()}  # byte -> its escape
_NEEDS = re.compile(rb'["\\\x00-\x1f]')


def _sub(m: re.Match) -> bytes:
    return _ESC[m.group()[0]]


def string(value: bytes | str) -> bytes:
    """A JSON string of ``value`` (str: its UTF-8 bytes)."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    return b'"' + (_NEEDS.sub(_sub, raw) if _NEEDS.search(raw) else raw) + b'"'


def double(x: float) -> str:
    """rapidjson's ``Writer::Double`` text of ``x``."""
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    text = repr(abs(x))
    mant, _, exp = text.partition("e")
    whole, _, frac = mant.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole.lstrip("0")) if whole.strip("0") else -(len(frac) - len(frac.lstrip("0")))
    point += int(exp) if exp else 0
    digits = digits.rstrip("0") or "0"
    n, kk = len(digits), point  # kk: position of the decimal point after the first digit's place
    k = kk - n
    if 0 <= k and kk <= 21:
        out = digits + "0" * k + ".0"
    elif 0 < kk <= 21:
        out = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        out = "0." + "0" * -kk + digits
    elif kk < -324:
        out = "0.0"
    elif n == 1:
        out = digits + "e" + str(kk - 1)
    else:
        out = digits[0] + "." + digits[1:] + "e" + str(kk - 1)
    return sign + out


SMALL = 64


def float_list(values: list[float]) -> bytes:
    """``[v,...]`` of a few doubles."""
    if all(1e-5 <= abs(v) < 1e16 or v == 0 for v in values):
        return orjson.dumps(values)
    return ("[" + ",".join(map(double, values)) + "]").encode()


def floats(arr: np.ndarray) -> bytes:
    """``[v,...]`` of a flat float array, each value widened to double as Triton does."""
    wide = arr.astype(np.float64, copy=False).reshape(-1)
    if wide.size <= SMALL:  # a few values: Python's own loop beats numpy's per-call cost
        return float_list(wide.tolist())
    mag = np.abs(wide)
    if bool(np.all(((mag >= 1e-5) & (mag < 1e16)) | (wide == 0))):
        return orjson.dumps(wide, option=orjson.OPT_SERIALIZE_NUMPY)
    return ("[" + ",".join(double(float(v)) for v in wide) + "]").encode()


def ints(arr: np.ndarray) -> bytes:
    return orjson.dumps(arr.reshape(-1), option=orjson.OPT_SERIALIZE_NUMPY)


def bools(arr: np.ndarray) -> bytes:
    return orjson.dumps(arr.reshape(-1).astype(bool, copy=False), option=orjson.OPT_SERIALIZE_NUMPY)


def strings(items) -> bytes:
    return b"[" + b",".join(string(v) for v in items) + b"]"


def error(message: str) -> bytes:
    """Triton's error envelope ``{"error":"..."}``."""
    return b'{"error":' + string(message) + b"}"
