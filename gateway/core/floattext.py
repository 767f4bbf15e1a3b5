"""printf-style float text ("%g, then more digits when that does not round-trip") for whole arrays.

Two C++ writers print floats this way and dialects must match them byte for byte:

* TF Serving REST, ``WriteDecimal`` (tensorflow_serving/util/json_tensor.cc): ``%g``, else
  ``%.9g`` (float32) / ``%.17g`` (float64); ``.0`` appended when the text has neither ``.`` nor
  ``e``; bare ``NaN`` / ``Infinity`` / ``-Infinity``.  → :data:`TFSERVING`
* protobuf C++ ``SimpleFtoa`` / ``SimpleDtoa`` (src/google/protobuf/stubs/strutil.cc, 3.x), used by
  ``MessageToJsonString``: ``%.6g`` (FLT_DIG) else ``%.9g`` for float, ``%.15g`` (DBL_DIG) else
  ``%.17g`` for double; nothing appended; non-finite values quoted (``"NaN"``, ``"Infinity"``,
  ``"-Infinity"``, from ``FloatAsString``/``DoubleAsString`` in util/internal/utility.cc). Its
  float round-trip test is ``safe_strtof``, which also fails when ``strtof`` sets ``errno``: glibc
  sets ERANGE for every (inexact) subnormal result, so subnormal floats always get 9 digits.
  → :data:`PROTOBUF`

Each value is formatted in its own precision (float32 as float32). The work is done for the whole
array by a small C extension, ``gateway.core._floattext`` (gateway/core/_floattext.c, built by
``pip install -e .`` / ``make install``): it computes the correctly rounded digits and the
"reads back as the same value" test with exact integer arithmetic, and asks the C library itself
(``snprintf`` + ``strtof``/``strtod``) for the values outside that arithmetic's range. The numpy
writer it replaced is the property-test oracle (tests/unit/core/floattext_reference.py).

A third C++ writer is not printf-style: rapidjson's ``Writer::Double`` (Triton's HTTP/REST JSON,
through TritonJson), rapidjson 1.1.0's Grisu2 digits in its own layout (``1.0``, ``1e21``,
``0.000001``, ``1e-7``, ``-0.0``, bare ``NaN`` / ``Infinity``). The same extension writes it:
:func:`rapidjson_array`, :func:`rapidjson_double`; its oracle is rapidjson's algorithm in Python
(tests/unit/core/rapidjson_reference.py), and Triton's own answers (tests/contract/test_v2_floats.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

try:
    from gateway.core import _floattext
except ImportError as e:  # pragma: no cover - a checkout without its build
    raise ImportError(
        "gateway.core._floattext (the compiled float writer, gateway/core/_floattext.c) is not built: "
        "run `make install` (pip install -e .), or build it in place with "
        "`python -c 'from setuptools import setup; setup()' build_ext --inplace`; it needs a C compiler (gcc)"
    ) from e


@dataclass(frozen=True)
class Style:
    """How one C++ writer prints floats."""

    f32_digits: tuple[int, int]  # (first try, fallback) significant digits for float32
    f64_digits: tuple[int, int]  # the same for float64
    whole_suffix: str  # appended when the text has neither '.' nor 'e'
    nan: str
    inf: str
    ninf: str
    f32_subnormal_long: bool = False  # subnormal float32 always takes the fallback

    @cached_property
    def _args(self) -> dict[bool, tuple]:
        """The extension's style arguments, for float32 (True) and float64 (False)."""
        return {f32: (f32, *(self.f32_digits if f32 else self.f64_digits), self.whole_suffix, self.nan, self.inf,
                      self.ninf, f32 and self.f32_subnormal_long) for f32 in (True, False)}


TFSERVING = Style((6, 9), (6, 17), ".0", "NaN", "Infinity", "-Infinity")
PROTOBUF = Style((6, 9), (15, 17), "", '"NaN"', '"Infinity"', '"-Infinity"', f32_subnormal_long=True)


def _native(flat: np.ndarray) -> tuple[np.ndarray, bool]:
    """The values as a contiguous native float32 (float32 input) or float64 (any other) array."""
    f32 = flat.dtype.kind == "f" and flat.dtype.itemsize == 4
    return np.ascontiguousarray(flat, dtype=np.float32 if f32 else np.float64), f32


def join(flat: np.ndarray, style: Style, sep: str = ",") -> str:
    """The text of every element of a 1-D float32/float64 array, joined with ``sep`` (ASCII)."""
    x, f32 = _native(flat)
    return _floattext.join(x, *style._args[f32], sep)


def tokens(flat: np.ndarray, style: Style) -> list[str]:
    """The text of every element of a 1-D float32/float64 array."""
    x, f32 = _native(flat)
    return _floattext.tokens(x, *style._args[f32])


Levels = str | Sequence[str]  # one text for every level, or one per level (outermost first)


def nested(arr: np.ndarray, style: Style, opens: Levels = "[", seps: Levels = ",", closes: Levels = "]") -> str:
    """A float32/float64 array of any rank as nested arrays, in one pass: level ``i`` (0 outermost)
    opens with ``opens[i]``, separates its items with ``seps[i]`` and closes with ``closes[i]``;
    an empty level is ``[]``. ``nested(a, s)`` is compact JSON (``[[1.0,2.0],[3.0,4.0]]``); pretty
    forms pass the newline-and-indent texts of each level. A 0-d array is its value's text."""
    if arr.ndim == 0:
        return tokens(arr.reshape(1), style)[0]
    per_level = [(text,) * arr.ndim if isinstance(text, str) else tuple(text) for text in (opens, seps, closes)]
    if arr.size == 0:
        return _empty(arr.shape, *per_level)
    x, f32 = _native(arr)
    return _floattext.nested(x, *style._args[f32], tuple(map(int, arr.shape)), *per_level)


def _empty(shape: tuple[int, ...], opens, seps, closes) -> str:
    if shape[0] == 0:
        return "[]"
    inner = _empty(shape[1:], opens[1:], seps[1:], closes[1:])
    return opens[0] + seps[0].join([inner] * shape[0]) + closes[0]


# rapidjson_array(raw, f32) -> bytes: ``[v,...]``, every value of a buffer of native float32 (``f32``)
# or float64 values (bytes, a memoryview, an array) as rapidjson's ``Writer::Double`` writes it,
# float32 widened to double. rapidjson_double(x) -> str: the text of one double. (The C functions
# themselves: each is one call on the V2 REST answer's path.)
rapidjson_array = _floattext.rapidjson_array
rapidjson_double = _floattext.rapidjson_double


def has_bool_token(body: bytes) -> bool:
    """Whether ``body`` holds ``true`` or ``false`` (``b"true" in body or b"false" in body``), at memchr speed."""
    return _floattext.has_bool_token(body)
