"""The numpy writer gateway.core.floattext used before its compiled extension: the property-test oracle.

printf-style float text ("%g, then more digits when that does not round-trip"), vectorised: one
C-level ``%`` over a per-element format string, no Python loop per value. float32 decides "six
digits round-trip" arithmetically (exact: a 6-digit decimal is never within double-rounding
distance of a float32 midpoint); float64 parses the short text back. Arrays up to ``SMALL``
values take a per-value path (``_small``). The styles are gateway.core.floattext's.
"""

from __future__ import annotations

import math
import struct
from functools import lru_cache

import numpy as np

from gateway.core.floattext import Style

_F32_TINY = float(np.finfo(np.float32).tiny)
SMALL = 32  # arrays up to this size take the per-value path (numpy's fixed cost dominates below it)
_F32 = struct.Struct("f")


def _style_codes(style: Style, f32: bool) -> np.ndarray:
    short, long = style.f32_digits if f32 else style.f64_digits
    s, x = style.whole_suffix, "%.0s"  # "%.0s" consumes the value and prints nothing
    return np.array(
        [f"%.{short}g", f"%.{short}g{s}", f"%.{long}g", f"%.{long}g{s}", x + style.nan, x + style.inf, x + style.ninf],
        dtype=object,
    )


@lru_cache(maxsize=16)
def _codes(style: Style, f32: bool) -> np.ndarray:
    return _style_codes(style, f32)


def _short_round_trips_f32(x: np.ndarray) -> np.ndarray:
    """Where ``%.6g`` of a float32 parses back (as float32) to the same value."""
    a = np.abs(x.astype(np.float64))
    ok = np.zeros(x.shape, dtype=bool)
    usable = (a >= 1e-17) & (a < 1e6)  # where 10**(5 - e) is an exact double
    with np.errstate(all="ignore"):
        e = np.floor(np.log10(np.where(usable, a, 1.0)))
        scale = 10.0 ** (5 - e)
        r = np.round(x.astype(np.float64) * scale) / scale
        ok[usable] = r[usable].astype(np.float32) == x[usable]
    ok |= x == 0
    rest = ~usable & np.isfinite(x) & (x != 0)  # elsewhere: check by parsing the text back
    if rest.any():
        idx = np.flatnonzero(rest)
        texts = [f"{v:g}" for v in x[idx].astype(np.float64).tolist()]
        ok[idx] = np.array(texts, dtype=np.float32) == x[idx]
    return ok


def _short_round_trips_f64(x: np.ndarray, digits: int) -> np.ndarray:
    """Where ``%.<digits>g`` of a float64 parses back to the same value."""
    finite = np.isfinite(x)
    vals = x[finite].tolist()
    texts = (f"%.{digits}g\0" * len(vals) % tuple(vals)).split("\0")[:-1]
    ok = np.zeros(x.shape, dtype=bool)
    ok[finite] = np.array(texts, dtype=np.float64) == x[finite]
    return ok


def _small(values: list[float], f32: bool, style: Style) -> list[str]:
    """The same texts as the vectorised path, one value at a time (for a handful of values).

    float32 values arrive as the doubles they widen to; "round-trips" is decided by parsing the
    short text as a double and rounding it to float32, which is exact for six digits (see above).
    """
    short_fmt, long_fmt = (f"%.{d}g" for d in (style.f32_digits if f32 else style.f64_digits))
    out = []
    for v in values:
        if v != v:
            out.append(style.nan)
            continue
        if math.isinf(v):
            out.append(style.inf if v > 0 else style.ninf)
            continue
        text = short_fmt % v
        if f32:
            ok = _F32.unpack(_F32.pack(float(text)))[0] == v
            if ok and style.f32_subnormal_long and v != 0 and abs(v) < _F32_TINY:
                ok = False
        else:
            ok = float(text) == v
        if not ok:
            text = long_fmt % v
        if style.whole_suffix and "." not in text and "e" not in text:
            text += style.whole_suffix
        out.append(text)
    return out


def join(flat: np.ndarray, style: Style, sep: str = ",") -> str:
    """The text of every element of a 1-D float32/float64 array, joined with ``sep``."""
    with np.errstate(all="ignore"):  # NaN payloads, signalling NaNs
        return _join(flat, style, sep)


def _join(flat: np.ndarray, style: Style, sep: str) -> str:
    if flat.size == 0:
        return ""
    f32 = flat.dtype == np.float32
    if flat.size <= SMALL:
        return sep.join(_small(flat.tolist(), bool(f32), style))
    return _vector(flat, style, sep, bool(f32))


def _vector(flat: np.ndarray, style: Style, sep: str, f32: bool) -> str:
    x = flat if f32 else flat.astype(np.float64)
    short_digits, long_digits = style.f32_digits if f32 else style.f64_digits
    if f32:
        short = _short_round_trips_f32(x)
        if style.f32_subnormal_long:
            short &= ~((x != 0) & (np.abs(x) < _F32_TINY))
    else:
        short = _short_round_trips_f64(x, short_digits)
    kind = np.where(short, 0, 2)
    if style.whole_suffix:
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(x) & (x == np.floor(x))
            # %.Ng prints whole numbers below 10**N without '.' or 'e'
            plain = np.abs(x) < np.where(short, 10.0**short_digits, 10.0**long_digits)
        kind = kind + (whole & plain)
    kind = np.where(np.isnan(x), 4, kind)
    kind = np.where(np.isposinf(x), 5, kind)
    kind = np.where(np.isneginf(x), 6, kind)
    fmt = sep.join(_codes(style, bool(f32))[kind].tolist())
    return fmt % tuple(x.astype(np.float64).tolist())


def tokens(flat: np.ndarray, style: Style) -> list[str]:
    """The text of every element of a 1-D float32/float64 array."""
    with np.errstate(all="ignore"):
        return _tokens(flat, style)


def _tokens(flat: np.ndarray, style: Style) -> list[str]:
    if flat.size == 0:
        return []
    if flat.size <= SMALL:
        return _small(flat.tolist(), flat.dtype == np.float32, style)
    return _vector(flat, style, "\0", flat.dtype == np.float32).split("\0")
