"""GrpsMessage → the exact JSON text the C++ GRPS server writes.

The C++ server prints with protobuf 3.9.2 (the version GRPS's deps/protobuf/build.sh installs)
``MessageToJsonString(preserve_proto_field_names, add_whitespace)``, i.e. ``JsonObjectWriter`` with
a one-space indent (src/google/protobuf/util/json_util.cc, util/internal/json_objectwriter.{h,cc}):

* fields in field-number order (the binary serialisation is re-read), only those present on the
  wire: non-default scalars, set oneof members (even empty), present sub-messages, non-empty
  repeated fields and maps; proto field names; enum names (numbers when unknown);
* ``"name": value`` (``": "``); each field and each list element on its own line, indented one
  space per level; ``{}`` / ``[]`` when empty; a newline after the closing brace of the document;
* int32/uint32 as numbers, int64/uint64 as strings; float/double as ``SimpleFtoa``/``SimpleDtoa``
  (``gateway.core.floattext.PROTOBUF``), non-finite ones as ``"NaN"``/``"Infinity"``/``"-Infinity"``;
  bytes as standard base64 with padding; strings escaped by ``JsonEscaping`` (see ``escape``).

Map order: C++ writes a map in the hash-table order of its ``Map`` (randomly seeded, so not
reproducible); keys are written here in sorted order, as deterministic serialisation would.

The ``?return-ndarray=true`` answer is written by GRPS with rapidjson's ``PrettyWriter`` (indent
one space, no final newline; server/cpp_server/src/handler/grps_handler.cc): see ``ndarray_answer``.
"""

from __future__ import annotations

import base64
import re

import numpy as np
from google.protobuf.descriptor import FieldDescriptor as FD

from gateway.core import floattext, jsonescape

# -- string escaping: protobuf's (gateway/core/jsonescape.py) ------------------------------------
escape = jsonescape.escape

# -- the printer ----------------------------------------------------------------------------------
_INT64 = (FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_SINT64, FD.TYPE_FIXED64, FD.TYPE_SFIXED64)


class _Printer:
    def __init__(self, pretty: bool):
        self.nl, self.ind, self.colon = ("\n", " ", ": ") if pretty else ("", "", ":")

    def pad(self, level: int) -> str:
        return self.nl + self.ind * level

    def message(self, msg, level: int, out: list[str]) -> None:
        fields = msg.ListFields()
        if not fields:
            out.append("{}")
            return
        pad = self.pad(level + 1)
        out.append("{")
        for i, (fd, value) in enumerate(fields):
            out.append(pad if i == 0 else "," + pad)
            out.append(f'"{fd.name}"{self.colon}')
            self.field(fd, value, level + 1, out)
        out.append(self.pad(level) + "}")

    def field(self, fd, value, level: int, out: list[str]) -> None:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            self.map(fd.message_type.fields_by_name["value"], value, level, out)
        elif fd.label == FD.LABEL_REPEATED:
            pad = self.pad(level + 1)
            out.append("[" + pad)
            if fd.type == FD.TYPE_MESSAGE:
                for i, item in enumerate(value):
                    if i:
                        out.append("," + pad)
                    self.message(item, level + 1, out)
            else:
                out.append(scalars(fd, value, "," + pad))
            out.append(self.pad(level) + "]")
        elif fd.type == FD.TYPE_MESSAGE:
            self.message(value, level, out)
        else:
            out.append(scalars(fd, (value,), ""))

    def map(self, value_fd, mapping, level: int, out: list[str]) -> None:
        pad = self.pad(level + 1)
        out.append("{")
        for i, key in enumerate(sorted(mapping)):
            out.append((pad if i == 0 else "," + pad) + f'"{escape(key)}"{self.colon}')
            if value_fd.type == FD.TYPE_MESSAGE:
                self.message(mapping[key], level + 1, out)
            else:
                out.append(scalars(value_fd, (mapping[key],), ""))
        out.append(self.pad(level) + "}")


def scalars(fd, values, sep: str) -> str:
    """The JSON text of scalar values of one field's type, joined with ``sep``."""
    t = fd.type
    if t == FD.TYPE_FLOAT:
        return floattext.join(np.asarray(values, dtype=np.float32), floattext.PROTOBUF, sep)
    if t == FD.TYPE_DOUBLE:
        return floattext.join(np.asarray(values, dtype=np.float64), floattext.PROTOBUF, sep)
    if t in _INT64:
        return '"' + ('"' + sep + '"').join(map(str, values)) + '"'
    if t == FD.TYPE_STRING:
        return '"' + ('"' + sep + '"').join(map(escape, values)) + '"'
    if t == FD.TYPE_BYTES:
        return '"' + ('"' + sep + '"').join(base64.b64encode(v).decode("ascii") for v in values) + '"'
    if t == FD.TYPE_BOOL:
        return sep.join("true" if v else "false" for v in values)
    if t == FD.TYPE_ENUM:
        names = fd.enum_type.values_by_number
        return sep.join(f'"{names[v].name}"' if v in names else str(v) for v in values)
    return sep.join(map(str, values))  # 32-bit integers


def message_json(msg, pretty: bool = True) -> bytes:
    """A message as MessageToJsonString prints it (``pretty``: add_whitespace, the GRPS setting)."""
    out: list[str] = []
    printer = _Printer(pretty)
    printer.message(msg, 0, out)
    out.append(printer.nl)
    return "".join(out).encode("utf-8")


# -- return-ndarray (rapidjson PrettyWriter) ------------------------------------------------------
_LONG_EXP = re.compile(r"(-?)(\d)(?:\.(\d+))?e(-0[56]|\+1[6-9]|\+20)")
_EXP = re.compile(r"e\+?(-?)0*(?=\d)")
_NONFINITE = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}


def _fixed(m: re.Match) -> str:
    """A repr exponent form that rapidjson writes positionally (decimal exponent -6..-5, 16..20)."""
    sign, digits, exp = m[1], m[2] + (m[3] or ""), int(m[4])
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if len(digits) <= exp + 1:
        return f"{sign}{digits}{'0' * (exp + 1 - len(digits))}.0"
    return f"{sign}{digits[:exp + 1]}.{digits[exp + 1:]}"


def rapidjson_doubles(flat: np.ndarray, sep: str, stop: bool = False) -> str:
    """rapidjson ``Writer::Double`` text of each value (the float widened to double): the shortest
    round-trip digits (Python's repr; rapidjson's Grisu2 agrees but for rare longer outputs), a
    positional form for decimal exponents -6..20 (``.0`` on whole numbers), else ``1.5e-7``.
    Non-finite values: ``"NaN"``-style strings, or with ``stop`` a marker (see ``ndarray_answer``)."""
    vals = flat.astype(np.float64).tolist()
    text = ("%r" + sep) * len(vals) % tuple(vals)
    text = text[: len(text) - len(sep)] if vals else ""
    text = _EXP.sub(r"e\1", _LONG_EXP.sub(_fixed, text))
    if not np.isfinite(flat).all():  # ``stop``: a marker where Writer::Double refuses the value
        text = sep.join((_STOP if stop else _NONFINITE[tok]) if tok in _NONFINITE else tok
                        for tok in (text.split(sep) if sep else [text]))  # sep "": one scalar
    return text


_STOP = "\0"  # where rapidjson's Writer::Double refuses a value


def ndarray_answer(status, arr: np.ndarray, pretty: bool = True) -> bytes:
    """``{"status": {...}, "ndarray": [[...]]}`` as GRPS's rapidjson PrettyWriter(indent ' ', 1) writes it.

    A NaN or infinite value ends the text where it would start: rapidjson 1.1.0's ``Writer::Double``
    refuses it (no kWriteNanAndInfFlag) after the separator is written, ``Document::Accept`` stops,
    and GRPS sends the buffer as it is (grps_handler.cc: ``res_doc.Accept(writer)``, then
    ``buffer.GetString()``): a truncated document, byte for byte what GRPS sends."""
    if not np.isfinite(arr).all():
        text = _ndarray_text(status, arr, pretty, stop=True)
        return text[: text.index(_STOP)].encode("utf-8")
    return _ndarray_text(status, arr, pretty).encode("utf-8")


def _ndarray_text(status, arr: np.ndarray, pretty: bool, stop: bool = False) -> str:
    p = _Printer(pretty)
    flag = status.DESCRIPTOR.fields_by_name["status"].enum_type.values_by_number[status.status].name
    head = (f"{{{p.pad(1)}\"status\"{p.colon}{{{p.pad(2)}\"code\"{p.colon}{status.code},{p.pad(2)}"
            f"\"msg\"{p.colon}\"{_rapidjson_escape(status.msg)}\",{p.pad(2)}\"status\"{p.colon}\"{flag}\""
            f"{p.pad(1)}}},{p.pad(1)}\"ndarray\"{p.colon}")
    return head + _nested(p, arr, 1, stop) + p.pad(0) + "}"


def _nested(p: _Printer, arr: np.ndarray, level: int, stop: bool = False) -> str:
    if arr.ndim == 0:
        return rapidjson_doubles(arr.reshape(1), "", stop)
    if arr.shape[0] == 0:
        return "[]"
    pad = p.pad(level + 1)
    if arr.ndim == 1:
        body = rapidjson_doubles(arr, "," + pad, stop)
    else:
        body = ("," + pad).join(_nested(p, sub, level + 1, stop) for sub in arr)
    return "[" + pad + body + p.pad(level) + "]"


_RJ_ESCAPES = jsonescape.RAPIDJSON


def _rapidjson_escape(text: str) -> str:
    """rapidjson Writer::WriteString: controls (upper-case hex), ``"`` and ``\\``; UTF-8 as is."""
    return text.translate(_RJ_ESCAPES)
