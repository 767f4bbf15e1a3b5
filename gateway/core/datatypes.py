"""THE dtype table: KServe V2 name ⇄ numpy ⇄ TF DataType ⇄ GRPS DataType ⇄ element size.

Every dialect looks types up here; none keeps its own table. BYTES tensors are numpy object
arrays of ``bytes``; on the KServe wire each element is a 4-byte little-endian length followed by
the bytes (``encode_bytes`` / ``decode_bytes``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = [
    "DType",
    "TABLE",
    "by_v2",
    "by_numpy",
    "by_tf",
    "by_grps",
    "by_config",
    "encode_bytes",
    "decode_bytes",
    "to_bytes_array",
]


@dataclass(frozen=True, slots=True)
class DType:
    v2: str  # KServe V2 datatype name, e.g. "FP32"
    numpy: np.dtype  # numpy dtype (object for BYTES)
    size: int  # element size in bytes on the V2 wire (0: variable, BYTES)
    tf: int | None  # tensorflow DataType enum value, None if TF has none
    tf_name: str | None  # "DT_FLOAT"
    grps: int | None  # grps.protos.v1.DataType enum value, None if GRPS cannot express it
    grps_name: str | None  # "DT_FLOAT32"
    config: str  # Triton model-config name, e.g. "TYPE_FP32"

    @property
    def is_bytes(self) -> bool:
        return self.v2 == "BYTES"

    def nbytes(self, count: int) -> int:
        """Bytes ``count`` elements take once decoded into numpy (BYTES: the object pointers alone,
        a lower bound), known before anything is allocated."""
        return count * self.numpy.itemsize


_ROWS = [
    # v2       numpy                        size tf  tf_name         grps grps_name     config
    ("BOOL", np.dtype(np.bool_), 1, 10, "DT_BOOL", None, None, "TYPE_BOOL"),
    ("UINT8", np.dtype(np.uint8), 1, 4, "DT_UINT8", 1, "DT_UINT8", "TYPE_UINT8"),
    ("UINT16", np.dtype(np.uint16), 2, 17, "DT_UINT16", None, None, "TYPE_UINT16"),
    ("UINT32", np.dtype(np.uint32), 4, 22, "DT_UINT32", None, None, "TYPE_UINT32"),
    ("UINT64", np.dtype(np.uint64), 8, 23, "DT_UINT64", None, None, "TYPE_UINT64"),
    ("INT8", np.dtype(np.int8), 1, 6, "DT_INT8", 2, "DT_INT8", "TYPE_INT8"),
    ("INT16", np.dtype(np.int16), 2, 5, "DT_INT16", 3, "DT_INT16", "TYPE_INT16"),
    ("INT32", np.dtype(np.int32), 4, 3, "DT_INT32", 4, "DT_INT32", "TYPE_INT32"),
    ("INT64", np.dtype(np.int64), 8, 9, "DT_INT64", 5, "DT_INT64", "TYPE_INT64"),
    ("FP16", np.dtype(np.float16), 2, 19, "DT_HALF", 6, "DT_FLOAT16", "TYPE_FP16"),
    ("FP32", np.dtype(np.float32), 4, 1, "DT_FLOAT", 7, "DT_FLOAT32", "TYPE_FP32"),
    ("FP64", np.dtype(np.float64), 8, 2, "DT_DOUBLE", 8, "DT_FLOAT64", "TYPE_FP64"),
    ("BF16", np.dtype(ml_dtypes.bfloat16), 2, 14, "DT_BFLOAT16", None, None, "TYPE_BF16"),
    ("BYTES", np.dtype(np.object_), 0, 7, "DT_STRING", 9, "DT_STRING", "TYPE_STRING"),
]

TABLE: tuple[DType, ...] = tuple(DType(*row) for row in _ROWS)

_BY_V2 = {d.v2: d for d in TABLE}
_BY_NUMPY = {d.numpy: d for d in TABLE}
_BY_TF = {d.tf: d for d in TABLE if d.tf is not None}
_BY_TF_NAME = {d.tf_name: d for d in TABLE if d.tf_name is not None}
_BY_GRPS = {d.grps: d for d in TABLE if d.grps is not None}
_BY_GRPS_NAME = {d.grps_name: d for d in TABLE if d.grps_name is not None}
_BY_CONFIG = {d.config: d for d in TABLE}
# numpy string kinds are BYTES too (str arrays are encoded as UTF-8 on the way out)
_BY_NUMPY_KIND = {"S": _BY_V2["BYTES"], "U": _BY_V2["BYTES"], "O": _BY_V2["BYTES"]}


def by_v2(name: str) -> DType:
    """Row for a V2 datatype name; KeyError if unknown."""
    return _BY_V2[name]


def by_numpy(dtype: np.dtype | type) -> DType:
    dt = np.dtype(dtype)
    row = _BY_NUMPY.get(dt) or _BY_NUMPY_KIND.get(dt.kind)
    if row is None:
        raise KeyError(f"numpy dtype {dt} has no KServe V2 datatype")
    return row


def by_tf(value: int | str) -> DType:
    """Row for a TF DataType given as enum number or name ("DT_FLOAT")."""
    return _BY_TF_NAME[value] if isinstance(value, str) else _BY_TF[value]


def by_grps(value: int | str) -> DType:
    """Row for a GRPS DataType given as enum number or name ("DT_FLOAT32")."""
    return _BY_GRPS_NAME[value] if isinstance(value, str) else _BY_GRPS[value]


def by_config(name: str) -> DType:
    """Row for a Triton model-config type name ("TYPE_FP32")."""
    return _BY_CONFIG[name]


_LEN = struct.Struct("<I")


def to_bytes_array(values) -> np.ndarray:
    """Any str/bytes array-like as a numpy object array of ``bytes`` (str encoded as UTF-8)."""
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.dtype.kind == "O" and all(isinstance(v, bytes) for v in arr.flat):
        return arr
    out = np.empty(arr.shape, dtype=object)
    flat_in, flat_out = arr.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat_in):
        flat_out[i] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return out


def bytes_parts(arr: np.ndarray) -> list:
    """BYTES tensor → the pieces of its KServe wire form (<uint32 LE length><bytes> per element,
    row-major), not yet joined: a caller that joins them with more pieces copies the data once.
    Elements are converted as ``to_bytes_array`` does, but a ``bytearray`` or byte ``memoryview``
    one (an HTTP body read into a buffer, gateway/edge/httpbody.py) is a piece as it is, not copied into
    ``bytes`` first."""
    flat = arr.reshape(-1) if isinstance(arr, np.ndarray) and arr.dtype.kind == "O" else to_bytes_array(arr).reshape(-1)
    parts: list = []
    pack = _LEN.pack
    for v in flat:
        if isinstance(v, bytes | bytearray):
            n = len(v)
        elif isinstance(v, memoryview) and v.c_contiguous:
            n = v.nbytes
        else:
            v = v.encode("utf-8") if isinstance(v, str) else bytes(v)
            n = len(v)
        parts += (pack(n), v)
    return parts


def encode_bytes(arr: np.ndarray) -> bytes:
    """BYTES tensor → KServe wire form: each element as <uint32 LE length><bytes>, row-major."""
    return b"".join(bytes_parts(arr))


def decode_bytes(buf: bytes | memoryview, shape: tuple[int, ...] | None = None, views: bool = False) -> np.ndarray:
    """KServe wire form → numpy object array of ``bytes`` (``views``: of memoryviews of ``buf``, not
    copies); ValueError if the buffer is malformed."""
    if not views and len(buf) >= 4 and _LEN.unpack_from(buf)[0] == len(buf) - 4:  # one element (a streamed token)
        out = np.empty(1, dtype=object)
        out[0] = bytes(buf[4:])
        if shape is not None and shape != (1,):
            if math.prod(shape) != 1:
                raise ValueError(f"1 BYTES elements do not fill shape {list(shape)}")
            out = out.reshape(shape)
        return out
    view = memoryview(buf)
    items: list = []
    pos, end = 0, len(view)
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated BYTES element length")
        (n,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > end:
            raise ValueError("BYTES element runs past the end of its buffer")
        items.append(view[pos : pos + n] if views else bytes(view[pos : pos + n]))
        pos += n
    out = np.empty(len(items), dtype=object)
    if views:  # one by one: numpy would read a list of buffers as arrays
        for i, item in enumerate(items):
            out[i] = item
    else:
        out[:] = items
    if shape is not None:
        if math.prod(shape) != len(items):  # (numpy's prod costs microseconds on a short tuple)
            raise ValueError(f"{len(items)} BYTES elements do not fill shape {list(shape)}")
        out = out.reshape(shape)
    return out
