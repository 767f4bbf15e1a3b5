"""Write: a plain GRPS gtensors predict's answer as the JSON text the general path writes.

``write(resp, meta, pretty)`` writes the text ``codec.message_to_json`` would write for
``mapping.from_response(resp, "gtensors", ...)`` when every output is a numeric type GRPS
expresses: the text around each tensor's values is written once per output name, dtype and shape
(``layout``, kept), the values by the same float writer (``gateway.core.floattext.PROTOBUF``) or as
integers (``write_laid``: what a plan's answers, read by their learned form, are written with).
Anything else answers None and the general writer runs. tests/unit/grps/test_plain.py compares
both over generated answers. Nothing here does I/O.
"""

from __future__ import annotations

import numpy as np

from gateway.core import datatypes, floattext
from gateway.core.bounded import Plans
from gateway.core.tensors import InferResponse, ModelMetadata

from . import codec, jsonwrite, mapping

_UINT32 = 1 << 32

def _answer_rows() -> dict[str, tuple[str, str, str]]:
    """V2 datatype -> (GRPS dtype name, flat field, how its values are written), the numeric
    outputs GRPS can express."""
    out = {}
    for row in datatypes.TABLE:
        if row.grps_name is None or row.is_bytes:
            continue
        how = "float" if row.numpy.kind == "f" else "int64" if row.v2 == "INT64" else "int"
        out[row.v2] = (row.grps_name, codec.flat_field(row), how)
    return out


_ANSWER = _answer_rows()
_heads = Plans(4096)  # (pretty, name, datatype, shape) -> (head, sep, tail)


def _frame(pretty: bool) -> tuple[str, str, str]:
    """The text before the first tensor, between two tensors and after the last."""
    p = jsonwrite._Printer(pretty)
    status: list[str] = []
    p.message(codec.ok().status, 1, status)
    before = ("{" + p.pad(1) + '"status"' + p.colon + "".join(status) + "," + p.pad(1) + '"gtensors"' + p.colon
              + "{" + p.pad(2) + '"tensors"' + p.colon + "[" + p.pad(3))
    return before, "," + p.pad(3), p.pad(2) + "]" + p.pad(1) + "}" + p.pad(0) + "}" + p.nl


_FRAMES = {pretty: _frame(pretty) for pretty in (True, False)}


def _head(pretty: bool, name: str, datatype: str, shape: tuple[int, ...], empty: bool) -> tuple[str, str, str]:
    """One GenericTensor at level 3 as ``jsonwrite._Printer.message`` writes it: (the text before its
    values, between two values, after them); fields in number order, only those present."""
    key = (pretty, name, datatype, shape, empty)
    hit = _heads.get(key)
    if hit is not None:
        return hit
    p = jsonwrite._Printer(pretty)
    grps_name, field, _ = _ANSWER[datatype]
    fields = []
    if name:
        fields.append(f'"name"{p.colon}"{jsonwrite.escape(name)}"')
    fields.append(f'"dtype"{p.colon}"{grps_name}"')
    if shape:
        fields.append(f'"shape"{p.colon}[' + p.pad(5) + ("," + p.pad(5)).join(map(str, shape)) + p.pad(4) + "]")
    if not empty:
        fields.append(f'"{field}"{p.colon}[' + p.pad(5))
    head = "{" + p.pad(4) + ("," + p.pad(4)).join(fields)
    tail = (p.pad(4) + "]" if not empty else "") + p.pad(3) + "}"
    return _heads.keep(key, (head, "," + p.pad(5), tail))


def write(resp: InferResponse, meta: ModelMetadata, pretty: bool) -> bytes | None:
    """``message_to_json(from_response(resp, "gtensors", ...)[0], pretty)`` when every output is a
    numeric type GRPS expresses, else None."""
    outputs = resp.outputs
    if not outputs:
        return None
    for t in outputs:
        if not answerable(t.name, t.datatype) or type(t.data) is not np.ndarray:
            return None
    if len(outputs) > 1:
        outputs = mapping.ordered(outputs, meta)
    laid = layout([(t.name, t.datatype, t.data.shape) for t in outputs], pretty)
    return None if laid is None else write_laid(laid, [t.data for t in outputs])


def answerable(name: str, datatype: str) -> bool:
    """Whether ``write`` writes an output of this name and V2 type (a numeric type GRPS expresses)."""
    return bool(name) and datatype in _ANSWER


Layout = tuple[str, tuple[tuple[str, str, str, str], ...], str, str]


def layout(outputs: list[tuple[str, str, tuple[int, ...]]], pretty: bool) -> Layout | None:
    """The text around the values of outputs of these names, V2 types and shapes (in the metadata's
    order): (before the first, per output (its head, the separator of its values, its tail, how its
    values are written), between two, after the last); None for a shape GenericTensor cannot hold."""
    before, between, after = _FRAMES[pretty]
    each = []
    for name, datatype, shape in outputs:
        if shape and max(shape) >= _UINT32:  # GenericTensor.shape is uint32: the general path refuses it
            return None
        empty = 0 in shape
        head, sep, tail = _head(pretty, name, datatype, tuple(shape), empty)
        each.append((head, sep, tail, "" if empty else _ANSWER[datatype][2]))
    return before, tuple(each), between, after


def write_laid(laid: Layout, arrays: list[np.ndarray]) -> bytes:
    """The answer's text: ``layout``'s text around the arrays' values (one array per output)."""
    before, each, between, after = laid
    parts = [before]
    for i, ((head, sep, tail, how), data) in enumerate(zip(each, arrays, strict=True)):
        if i:
            parts.append(between)
        parts.append(head)
        if how:
            flat = data.reshape(-1)
            if how == "float":
                if flat.dtype == np.float16:
                    flat = flat.astype(np.float32)
                parts.append(floattext.join(flat, floattext.PROTOBUF, sep))
            elif how == "int":
                parts.append(sep.join(map(str, flat.tolist())))
            else:
                parts.append('"' + ('"' + sep + '"').join(map(str, flat.tolist())) + '"')
        parts.append(tail)
    parts.append(after)
    return "".join(parts).encode("utf-8")
