"""Dense JSON arrays of numbers (an image as nested lists) read at compiled speed, without a Python
object per number.

``dense_array(body, start)`` reads the JSON array at ``body[start]`` when it holds only numbers in a
dense nesting (every level non-empty, every array of a level as long as the first, every number at
the last level): its structure is checked by the compiled scanner in ``gateway.core._floattext``
(``dense_array``: brackets and commas, no number parsed), its numbers are read by simdjson
(pysimdjson's ``as_buffer``: correctly rounded doubles, straight into a buffer). Anything else
(true/false/null, strings, objects, ragged or empty arrays, more than 32 levels, an integer of more
than 15 digits, a number simdjson refuses) answers None, and the caller takes its general path,
which words every error as the original server does. A 3 MB body of 150,528 floats: about a
quarter of orjson's list of floats plus ``np.asarray`` (docs/performance.md).
"""

from __future__ import annotations

import threading

import numpy as np
import simdjson

from gateway.core import _floattext

_local = threading.local()  # a simdjson parser per thread (the offload pool's threads and the loop's)


def _parser() -> simdjson.Parser:
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


def dense_array(body: bytes, start: int) -> tuple[np.ndarray, int] | None:
    """(float64 array in its shape, offset just past the array) for the array at ``body[start]``, or None."""
    found = _floattext.dense_array(body, start)
    if found is None:
        return None
    end, shape = found
    view = memoryview(body)[start:end]
    try:
        arr = _parser().parse(view)
        try:
            flat = np.frombuffer(arr.as_buffer(of_type="d"), dtype=np.float64)
        finally:
            del arr  # a simdjson parser is reused only once no proxy of its last document is left
    except (ValueError, RuntimeError, TypeError):  # a number simdjson refuses (the general path words it)
        return None
    finally:
        view.release()
    if flat.size != int(np.prod(shape, dtype=np.int64)):  # pragma: no cover - the scanner counted them
        return None
    return flat.reshape(shape), end
