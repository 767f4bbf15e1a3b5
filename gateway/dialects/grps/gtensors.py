"""Parse: a plain GRPS gtensors predict's JSON body read into core Tensors, without a GrpsMessage.

Most JSON predicts are plain: ``{"model"?: str, "gtensors": {"tensors": [...]}}`` whose tensors
each have a ``name``, a ``dtype`` name of a numeric GRPS type, maybe a ``shape`` and the one numeric
``flat_*`` list of that dtype. ``tensors(doc)`` builds the core Tensors ``mapping.to_request`` would
build from ``codec.message_from_json(doc)`` (values converted as protobuf stores them: a ``float``
field rounds each double to float32), without the protobuf message and its per-value conversions.
The request then goes on through its plan (plan.py) and its answer is written by answer.py.

Anything else, or anything the general path would refuse or word an error for, answers None and the
general path runs from the start: same bytes, same errors (tests/unit/grps/test_plain.py compares
both over generated requests and answers). Nothing here does I/O.
"""

from __future__ import annotations

import numpy as np

from gateway.core import datatypes
from gateway.core.bounded import LIMITS
from gateway.core.tensors import MAX_ELEMENTS, Tensor, too_large

from . import codec

_DBL_MAX = float(np.finfo(np.float64).max)
_UINT32 = 1 << 32


def _request_rows() -> dict[str, tuple[datatypes.DType, str]]:
    """GRPS dtype name -> (its row, the JSON key of its flat list), numeric GRPS types only."""
    out = {}
    for row in datatypes.TABLE:
        if row.grps_name is None or row.is_bytes:
            continue
        out[row.grps_name] = (row, codec.flat_field(row))
    return out


_ROWS = _request_rows()
_INT_RANGE = {row.v2: (int(np.iinfo(row.numpy).min), int(np.iinfo(row.numpy).max))
              for row, _ in _ROWS.values() if row.numpy.kind in "iu"}
_DOC_KEYS = frozenset(("model", "gtensors"))
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)


def tensors(doc: dict) -> tuple[str, list[Tensor]] | None:
    """(the model named in the body, the inputs) of a plain gtensors body, else None.

    ``doc`` is not changed (the general path may still need it as it came)."""
    if not doc.keys() <= _DOC_KEYS:
        return None
    model = doc.get("model", "")
    gt = doc.get("gtensors")
    if type(model) is not str or type(gt) is not dict or gt.keys() != {"tensors"}:
        return None
    items = gt["tensors"]
    if type(items) is not list or not items:
        return None
    out = []
    for t in items:
        tensor = _tensor(t)
        if tensor is None:
            return None
        out.append(tensor)
    return model, out


def _tensor(t) -> Tensor | None:
    if type(t) is not dict:
        return None
    keys = len(t)
    if keys != 3 and keys != 4:
        return None
    name, dtype = t.get("name"), t.get("dtype")
    if type(name) is not str or not name or len(name) > LIMITS.max_name_chars or type(dtype) is not str:
        return None
    found = _ROWS.get(dtype)
    if found is None:
        return None
    row, field = found
    values = t.get(field)
    if values is None and field == "flat_float64":
        values = t.get("flat_double")  # GRPS's alias (codec._alias_flat_double)
    shape = t.get("shape")
    if type(values) is not list or keys != (3 if shape is None else 4):
        return None
    count = len(values)
    if shape is None or shape == []:
        dims = None  # one dimension: the array as it is read
    elif type(shape) is list:
        expected = 1
        for d in shape:  # GenericTensor.shape is uint32
            if type(d) is not int or not 0 <= d < _UINT32:
                return None
            expected *= d
        if expected != count:
            return None
        dims = shape
    else:
        return None
    if count > MAX_ELEMENTS or too_large(count, row, dims or (count,)) is not None:
        return None
    data = _ints(values, row) if row.v2 in _INT_RANGE else _floats(values, row)
    if data is None:
        return None
    return Tensor(name, data if dims is None else data.reshape(dims), row.v2, {})


def _ints(values: list, row: datatypes.DType) -> np.ndarray | None:
    lo, hi = _INT_RANGE[row.v2]
    if len(values) <= codec.SHORT:
        for v in values:
            if type(v) is not int or not lo <= v <= hi:
                return None
        return np.array(values, dtype=row.numpy)
    if not set(map(type, values)) <= {int}:
        return None
    try:
        wide = np.array(values, dtype=np.int64 if lo < 0 else np.uint64)
    except OverflowError:
        return None
    if int(wide.min()) < lo or int(wide.max()) > hi:
        return None
    return wide.astype(row.numpy)


def _floats(values: list, row: datatypes.DType) -> np.ndarray | None:
    """As protobuf stores them: each value as a double (ints correctly rounded), then a ``float``
    field's cast to float32 (flat_float32, flat_float16); FP16 then from that float32."""
    top = _DBL_MAX if row.v2 == "FP64" else codec.FLT_MAX
    if len(values) <= codec.SHORT:
        if not codec.short_values_fit(values, _F64 if row.v2 == "FP64" else _F32):
            return None
        wide = np.array(values, dtype=np.float64)  # an int as float(v): correctly rounded
    else:
        if not set(map(type, values)) <= {int, float}:
            return None
        try:
            wide = np.array(values, dtype=np.float64)
        except OverflowError:  # an int past double's range
            return None
        if wide.size and not (np.isfinite(wide).all() and float(np.abs(wide).max()) <= top):
            return None
    if row.v2 == "FP64":
        return wide
    narrow = wide.astype(np.float32)
    if row.v2 == "FP32":
        return narrow
    with np.errstate(over="ignore"):  # past FP16's range: inf, as the general path's cast gives
        return narrow.astype(row.numpy)
