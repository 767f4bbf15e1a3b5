"""The common V2 REST infer request written straight into ``ModelInfer`` wire bytes.

Most bodies are plain: ``inputs`` with ``name``, ``datatype``, ``shape`` and either flat JSON
``data`` of a numeric or BOOL tensor or ``parameters: {binary_data_size}``, maybe an ``id``, maybe
``outputs`` asking only ``binary_data``, maybe ``parameters: {binary_data_output}``. For those,
``request`` writes the bytes ``jsontensor.serialize(jsontensor.parse(...))`` would write without
building a protobuf message: the fields but ``id`` and the raw contents come from a header
serialized once per model, version, inputs' names, dtypes and shapes and outputs, the ``id``
between its two halves (protobuf writes fields in number order), then each tensor's bytes as its
own ``raw_input_contents`` (``wire.around_id``, ``wire.with_id``). JSON values are converted with ``array`` (a C cast per value, as the
general path's numpy cast and Triton's ``static_cast`` do).

Anything else, or anything the general path would refuse, answers None: the general path then
parses the body and gives the answer or Triton's words for the mistake. Same bytes, the same
``Parsed`` for the answer: tests/unit/test_v2_plain.py compares both over generated requests.
"""

from __future__ import annotations

import math
from array import array

from gateway.core import datatypes
from gateway.core.bounded import LIMITS
from gateway.upstream import wire

from .jsontensor import INT64_MAX, UINT64_MAX, Output, Parsed

_JSON_KINDS = {"f": frozenset((float, int)), "i": frozenset((int,)), "u": frozenset((int,)), "b": frozenset((bool,))}


def _packing() -> dict[str, tuple[str, int, frozenset]]:
    """V2 datatype -> (array typecode, element size, the JSON value types Triton reads for it), from
    the dtype table: every numeric type ``array`` holds at its V2 size (FP16/BF16: the general path);
    BOOL packs as bytes. A value the C type cannot hold raises OverflowError and the general path
    answers (it wraps or refuses)."""
    out = {}
    for row in datatypes.TABLE:
        kinds = _JSON_KINDS.get(row.numpy.kind)
        if kinds is None:
            continue
        code = "" if row.numpy.kind == "b" else row.numpy.char
        try:
            if code and array(code).itemsize != row.size:
                continue
        except ValueError:  # a typecode array does not have (float16's 'e')
            continue
        out[row.v2] = (code, row.size, kinds)
    return out


_PACK = _packing()
_DOC_KEYS = frozenset(("id", "inputs", "outputs", "parameters"))
_OUTPUT_KEYS = (frozenset(("name",)), frozenset(("name", "parameters")))
_BINARY_OUTPUT = frozenset(("binary_data",))
_BINARY_DEFAULT = frozenset(("binary_data_output",))

# how to answer a request that names no outputs (shared: render only reads them)
_JSON_ANSWER, _BINARY_ANSWER = Parsed(None), Parsed(None, binary_default=True)

def _shape(dims) -> tuple | None:
    if type(dims) is not list:
        return None
    for d in dims:
        if type(d) is not int or not 0 <= d <= INT64_MAX:
            return None
    return tuple(dims)


def _json_raw(datatype: str, data, shape: tuple) -> bytes | None:
    """The tensor's bytes from flat JSON ``data``, or None where the general path decides."""
    pack = _PACK.get(datatype)
    if pack is None or type(data) is not list:
        return None
    count = math.prod(shape)
    code, size, kinds = pack
    if count != len(data) or not count or count * size > LIMITS.max_tensor_bytes or not kinds.issuperset(map(type, data)):
        return None
    if not code:
        return bytes(data)  # BOOL: True/False as 1/0
    try:
        return array(code, data).tobytes()
    except OverflowError:
        return None


def _flag(obj: dict, allowed: frozenset, key: str) -> bool | None:
    """The bool ``parameters[key]`` of a request object (False when it has no parameters); None when
    its parameters hold anything but ``allowed`` keys or the value is not a bool: not plain."""
    if "parameters" not in obj:
        return False
    params = obj["parameters"]
    if type(params) is not dict or not allowed.issuperset(params):
        return None
    value = params.get(key, False)
    return value if type(value) is bool else None


def request(doc, model: str, version: str, binary: memoryview) -> tuple[bytes, Parsed] | None:
    """``(jsontensor.serialize(parsed), parsed)`` for a plain request, else None."""
    if type(doc) is not dict or not _DOC_KEYS.issuperset(doc):
        return None
    binary_default = _flag(doc, _BINARY_DEFAULT, "binary_data_output")
    if binary_default is None:
        return None
    rid = doc.get("id", "")
    if type(rid) is not str:
        return None
    inputs = doc.get("inputs")
    if type(inputs) is not list:
        return None
    specs, raws, offset = [], [], 0
    for inp in inputs:
        if type(inp) is not dict:
            return None
        name, datatype, shape = inp.get("name"), inp.get("datatype"), _shape(inp.get("shape"))
        if type(name) is not str or type(datatype) is not str or shape is None:
            return None
        if len(inp) != 4:  # name, datatype, shape, and data or parameters
            return None
        if "data" in inp:
            raw = _json_raw(datatype, inp["data"], shape)
            if raw is None:
                return None
        elif "parameters" in inp:
            params = inp["parameters"]
            if type(params) is not dict or len(params) != 1:
                return None
            size = params.get("binary_data_size")
            if type(size) is not int or not 0 <= size <= UINT64_MAX or offset + size > len(binary):
                return None
            raw = binary[offset:offset + size]
            offset += size
        else:
            return None
        specs.append((name, datatype, shape))
        raws.append(raw)
    if offset != len(binary):
        return None
    outputs: dict[str, Output] = {}
    names: tuple = ()
    if "outputs" in doc:
        wanted = doc["outputs"]
        if type(wanted) is not list:
            return None
        listed = []
        for out in wanted:
            if type(out) is not dict or out.keys() not in _OUTPUT_KEYS or type(out["name"]) is not str:
                return None
            binary_out = _flag(out, _BINARY_OUTPUT, "binary_data")
            if binary_out is None:
                return None
            listed.append(out["name"])
            outputs[out["name"]] = Output(binary_out)
        names = tuple(listed)
    try:
        head, tail = wire.around_id(model, version, tuple(specs), names)
        rid_bytes = rid.encode() if rid else b""
    except (ValueError, UnicodeEncodeError):  # names protobuf refuses (not UTF-8): the general path's error
        return None
    data = wire.with_id(head, rid_bytes, tail, raws)
    if outputs:
        return data, Parsed(None, outputs=outputs, binary_default=binary_default)
    return data, _BINARY_ANSWER if binary_default else _JSON_ANSWER
