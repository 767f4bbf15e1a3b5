"""TF Serving's float text, byte for byte (``WriteDecimal`` in tensorflow_serving/util/json_tensor.cc).

For each value, in its own precision (float32 as float32):
  1. ``%g`` (six significant digits); if that text parses back to the same value, it is used;
  2. otherwise ``%.9g`` (float32) or ``%.17g`` (float64);
  3. ``.0`` is appended when the text has neither ``.`` nor ``e`` (``3`` → ``3.0``);
  4. non-finite values are the bare tokens ``NaN``, ``Infinity``, ``-Infinity``.
A client that parses into float64 therefore sees exactly the numbers TF Serving would have sent
(``0.1f`` → ``0.1``, ``1.2345678f`` → ``1.23456776``), not the shortest float32 text.

The vectorised formatting itself is shared with other dialects: ``gateway.core.floattext``
(style ``TFSERVING``); ``jsonwrite`` lays the values out as TF Serving's PrettyWriter does.
"""

from __future__ import annotations

import numpy as np

from gateway.core import floattext


def tokens(flat: np.ndarray) -> list[str]:
    """The TF Serving text of every element of a 1-D float32/float64 array."""
    return floattext.tokens(flat, floattext.TFSERVING)


def join(flat: np.ndarray, sep: str) -> str:
    """The TF Serving text of every element of a 1-D float32/float64 array, joined with ``sep``."""
    return floattext.join(flat, floattext.TFSERVING, sep)


def nested(arr: np.ndarray, opens, seps, closes) -> str:
    """A float array of any rank as nested arrays, level ``i`` (outermost first) opened, separated
    and closed with ``opens[i]``, ``seps[i]``, ``closes[i]``: one pass of the compiled writer
    (``floattext.nested``)."""
    return floattext.nested(arr, floattext.TFSERVING, opens, seps, closes)
