"""Pure functions between GRPS's wire forms and the neutral tensors of ``gateway.core``.

    HTTP JSON body ──message_from_json──▶ GrpsMessage (+ the ndarray, which protobuf cannot hold)
    GrpsMessage.gtensors ──tensor_from_generic──▶ core Tensor ──tensor_to_generic──▶ GenericTensor
    GrpsMessage.gmap     ──gmap_values──▶ {name: numpy value}  ──gmap_from_tensors──▶ GenericMapData
    GrpsMessage ──message_to_json──▶ bytes (the C++ GRPS server's exact text: ``jsonwrite.py``)

JSON is read with orjson + protobuf's ``json_format`` (snake_case and lowerCamelCase keys, enum
names or numbers, unknown keys ignored) and written by ``jsonwrite`` byte for byte as GRPS's
protobuf C++ printer writes it. Nothing here does I/O.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import orjson
from google.protobuf import json_format

from gateway._proto import grps_pb2
from gateway.core import datatypes
from gateway.core.bounded import LIMITS, check_name, clip, dims_text, json_deeper
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.core.tensors import Tensor, element_count

from . import jsonwrite

GrpsMessage = grps_pb2.GrpsMessage
SUCCESS = grps_pb2.Status.SUCCESS
FAILURE = grps_pb2.Status.FAILURE

ORJSON_DEPTH = 1024  # orjson refuses deeper documents itself
_PARSED_KEYS = ("str_data", "strData", "gtensors", "gmap")
_FLOAT64_KEYS = ("flat_float64", "flatFloat64")
_DOUBLE_KEYS = ("flat_double", "flatDouble")
_FLAT_FIELDS = tuple(f.name for f in grps_pb2.GenericTensor.DESCRIPTOR.fields if f.name.startswith("flat_"))

# gmap field -> the V2 datatype of its values
GMAP_TYPES = {"s_s": "BYTES", "s_b": "BYTES", "s_i32": "INT32", "s_i64": "INT64", "s_f": "FP32", "s_d": "FP64"}


# -- status ---------------------------------------------------------------------------------------
def ok(msg: GrpsMessage | None = None) -> GrpsMessage:
    msg = msg if msg is not None else GrpsMessage()
    msg.status.code, msg.status.msg, msg.status.status = 200, "OK", SUCCESS
    return msg


def failure(code: int, text: str) -> GrpsMessage:
    msg = GrpsMessage()
    msg.status.code, msg.status.msg, msg.status.status = code, text, FAILURE
    return msg


# -- JSON -----------------------------------------------------------------------------------------
def load_json(body: bytes, empty: bytes = b"{}") -> dict:
    """A JSON body → its top-level object (400 when it is not JSON or not an object, or nests
    deeper than limits.max_json_depth); an empty body reads as ``empty`` (b"": not JSON)."""
    try:
        doc = orjson.loads(body or empty)
    except orjson.JSONDecodeError:
        raise invalid("Parse json failed.") from None
    if not isinstance(doc, dict):
        raise invalid("Parse json failed: the body must be a JSON object.")
    depth = LIMITS.max_json_depth
    if depth < ORJSON_DEPTH and json_deeper(doc, depth):
        raise invalid(f"Parse json failed: nested more than {depth} levels deep.")
    return doc


def decode_predict(body: bytes) -> tuple[dict, GrpsMessage, np.ndarray | None]:
    """A predict JSON body → (its object, GrpsMessage, ndarray or None): one call, for the thread pool."""
    doc = load_json(body, b"")  # GRPS parses the body with rapidjson: an empty one is no JSON
    msg, ndarray = message_from_json(doc, body)
    return doc, msg, ndarray


def message_from_json(doc: dict, body: bytes | memoryview | None = None) -> tuple[GrpsMessage, np.ndarray | None]:
    """A predict JSON object → (GrpsMessage, ndarray or None), dispatched on its keys as GRPS does;
    ``body``: its JSON text, when known (an ndarray body without a ``t`` or ``f`` has no bool in it)."""
    if any(k in doc for k in _PARSED_KEYS):
        return parse_message(doc), None
    if "ndarray" in doc:
        msg = parse_message({k: v for k, v in doc.items() if k in ("model", "status")})
        maybe_bool = body is None or _has_bool_token(body)
        return msg, ndarray_from_json(doc["ndarray"], maybe_bool)
    if "bin_data" in doc or "binData" in doc:
        raise invalid("bin_data should use application/octet-stream format.")
    raise invalid("Have no legal member in json body.")


def parse_message(doc: dict) -> GrpsMessage:
    """A JSON object → GrpsMessage (``flat_double`` accepted as an alias of ``flat_float64``).

    ``json_format`` converts and checks values one by one in Python (~0.75 s per million floats),
    so a numeric ``flat_*`` list that provably passes its checks (numbers only, in the field's
    range) is taken out first and added to the parsed message in one ``extend``; anything else
    (strings, bools, ``"NaN"``, out of range) stays for ``json_format`` and its own error text."""
    _alias_flat_double(doc)
    pulled = _take_numeric_flats(doc)
    msg = _plain_gtensors(doc)
    if msg is None:
        try:
            msg = json_format.ParseDict(doc, GrpsMessage(), ignore_unknown_fields=True)
        except json_format.ParseError as e:
            raise invalid(clip(str(e))) from None
    for index, field, values in pulled:
        getattr(msg.gtensors.tensors[index], field).extend(values)
    return msg


_NUMERIC = {}  # JSON key (proto or lowerCamel name) -> (field name, numpy dtype whose range it takes)
for _f in grps_pb2.GenericTensor.DESCRIPTOR.fields:
    if _f.name.startswith("flat_") and _f.type != _f.TYPE_STRING:
        _range = {_f.CPPTYPE_INT32: np.int32, _f.CPPTYPE_INT64: np.int64, _f.CPPTYPE_UINT32: np.uint32,
                  _f.CPPTYPE_FLOAT: np.float32, _f.CPPTYPE_DOUBLE: np.float64}[_f.cpp_type]
        _NUMERIC[_f.name] = _NUMERIC[_f.json_name] = (_f.name, np.dtype(_range))
FLT_MAX = float(np.finfo(np.float32).max)


_MESSAGE_KEYS = frozenset(k for f in GrpsMessage.DESCRIPTOR.fields for k in (f.name, f.json_name))
_DATA_KEYS = frozenset(k for f in grps_pb2.GenericTensorData.DESCRIPTOR.fields for k in (f.name, f.json_name))
_DTYPES = grps_pb2.DataType.DESCRIPTOR.values_by_name
_UINT32 = 1 << 32


def _plain_gtensors(doc: dict) -> GrpsMessage | None:
    """The message ``json_format.ParseDict(doc, ..., ignore_unknown_fields=True)`` makes, built
    directly when ``doc`` is a plain gtensors request (its numeric flats already taken out): at most
    ``model`` and ``gtensors`` among the message's fields, tensors of only ``name`` (a string),
    ``dtype`` (a DataType name) and ``shape`` (uint32s). Anything else: None, and json_format
    decides (and words its errors). tests/unit/grps/test_codec_mapping.py compares the two."""
    gt = doc.get("gtensors")
    model = doc.get("model", "")
    if not isinstance(gt, dict) or type(model) is not str or any(k in _MESSAGE_KEYS for k in doc
                                                                 if k not in ("model", "gtensors")):
        return None
    tensors = gt.get("tensors", [])
    if not isinstance(tensors, list) or any(k in _DATA_KEYS for k in gt if k != "tensors"):
        return None
    msg = GrpsMessage(model=model)
    data = msg.gtensors
    data.SetInParent()
    for t in tensors:
        if not isinstance(t, dict) or not t.keys() <= {"name", "dtype", "shape"}:
            return None
        name, dtype, shape = t.get("name", ""), t.get("dtype", "DT_INVALID"), t.get("shape", [])
        if type(name) is not str or type(dtype) is not str or dtype not in _DTYPES or type(shape) is not list:
            return None
        if not all(type(d) is int and 0 <= d < _UINT32 for d in shape):
            return None
        data.tensors.add(name=name, dtype=_DTYPES[dtype].number, shape=shape)
    return msg


def _take_numeric_flats(doc: dict) -> list[tuple[int, str, list]]:
    """Pop from ``doc`` the numeric flat lists json_format would accept as they are."""
    gt = doc.get("gtensors")
    tensors = gt.get("tensors") if isinstance(gt, dict) else None
    pulled = []
    for index, t in enumerate(tensors if isinstance(tensors, list) else ()):
        if not isinstance(t, dict):
            continue
        for key in [k for k in t if k in _NUMERIC]:
            field, dtype = _NUMERIC[key]
            spellings = sum(1 for k in t if _NUMERIC.get(k, (None,))[0] == field)
            values = t[key]
            if spellings == 1 and isinstance(values, list) and _plain_numbers(values, dtype):
                del t[key]
                pulled.append((index, field, values))
    return pulled


def _plain_numbers(values: list, dtype: np.dtype) -> bool:
    """Whether json_format would take every value as it is: ints (integer fields, in range) or
    ints and finite floats (float fields, float32's range for float32). Short lists are checked
    value by value (numpy's fixed cost is larger there), long ones with numpy."""
    return short_values_fit(values, dtype) if len(values) <= SHORT else _plain_long(values, dtype)


def _plain_long(values: list, dtype: np.dtype) -> bool:
    types = set(map(type, values))
    try:
        if dtype.kind == "f":
            if not types <= {int, float}:
                return False
            arr = np.asarray(values, dtype=np.float64)
            if not np.isfinite(arr).all():
                return False
            return dtype != np.float32 or not arr.size or float(np.abs(arr).max()) <= FLT_MAX
        if not types <= {int}:
            return False
        info = np.iinfo(dtype)
        arr = np.asarray(values, dtype=np.int64 if info.min < 0 else np.uint64)
        return not arr.size or (int(arr.min()) >= info.min and int(arr.max()) <= info.max)
    except (OverflowError, ValueError, TypeError):
        return False


SHORT = 32  # number lists up to this long are checked value by value, longer ones with numpy
_LIMITS = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int32, np.int64, np.uint32)}


def short_values_fit(values: list, dtype: np.dtype) -> bool:
    """Whether every value of a short list is a JSON number the ``dtype`` field takes as it is
    (floats: a finite double within the field's range; integers: within the type's range)."""
    if dtype.kind == "f":
        top = FLT_MAX if dtype == np.float32 else sys.float_info.max
        for v in values:
            t = type(v)
            if t is float:
                if not -top <= v <= top:  # NaN, infinities, out of float32's range
                    return False
            elif t is int:
                try:
                    if not -top <= float(v) <= top:
                        return False
                except OverflowError:  # past double's range: numpy refuses it too
                    return False
            else:
                return False
        return True
    lo, hi = _LIMITS[dtype]
    return all(type(v) is int and lo <= v <= hi for v in values)


def _alias_flat_double(doc: dict) -> None:
    gt = doc.get("gtensors")
    tensors = gt.get("tensors") if isinstance(gt, dict) else None
    for t in tensors if isinstance(tensors, list) else ():
        if not isinstance(t, dict) or any(k in t for k in _FLOAT64_KEYS):
            continue
        for key in _DOUBLE_KEYS:
            if key in t:
                t["flat_float64"] = t.pop(key)


# GRPS's C++ texts for an ``ndarray`` it cannot read (server/cpp_server/src/handler/grps_handler.cc)
NDARRAY_NOT_NUMBER_OR_ARRAY = "NDArray is not number or array."
NDARRAY_EMPTY = "Parse NDArray failed: NDArray some array size <= 0."
NDARRAY_RAGGED = "Parse NDArray failed: NDArray some array size not match."
NDARRAY_NOT_NUMBER = "Parse NDArray failed: NDArray some array is not a number or array."


def ndarray_from_json(value, maybe_bool: bool = True) -> np.ndarray:
    """An ``ndarray`` value → one FP32 array, refused as GRPS's C++ handler refuses it.

    GRPS takes a bare number as a scalar and an array through ``ParseNDArray``; anything else is
    ``NDArray is not number or array.``. ``ParseNDArrayShapeAndVal`` walks the array depth first and
    stops at the first empty array (``size <= 0``), array whose length differs from the first one
    seen at its depth (``size not match``) or element that is neither a number nor an array (a bool,
    a string, null, an object). numpy reads a well-formed array at C speed; only one it refuses, or
    one with a bool or an empty dimension in it, is walked here to find GRPS's words (numpy reads a
    bool among numbers as a number: ``maybe_bool`` False, when the body has no ``t`` or ``f``,
    spares looking for one)."""
    if isinstance(value, bool) or not isinstance(value, int | float | list):
        raise invalid(NDARRAY_NOT_NUMBER_OR_ARRAY)
    with np.errstate(over="ignore"):  # past FP32's range: inf, as the C++ GetFloat gives
        if not isinstance(value, list):
            return np.asarray(value, dtype=np.float64).astype(np.float32)
        try:
            arr = np.asarray(value)
        except (ValueError, OverflowError):  # ragged
            arr = None
        if arr is None or arr.dtype.kind not in "iuf" or arr.size == 0 or maybe_bool and _holds_bool(value):
            shape, flat = _walk_ndarray(value)
            if len(flat) != math.prod(shape):  # arrays and numbers side by side: GRPS
                raise invalid(  # takes them (its converter then refuses the tensor); Triton needs a shape
                    f"NDArray mixes numbers and arrays at one depth: {len(flat)} values do not fill shape "
                    f"{dims_text(shape)}")
            arr = np.asarray(flat, dtype=np.float64).reshape(shape)
        return arr.astype(np.float32, copy=False)


def _has_bool_token(body: bytes | memoryview) -> bool:
    """Whether the text may hold ``true``/``false``: a ``t`` or an ``f`` anywhere (one byte, found at
    memchr speed; no number has one, and ``{"ndarray": …}`` neither)."""
    text = body if isinstance(body, bytes) else bytes(body)
    return b"t" in text or b"f" in text


def _holds_bool(value: list) -> bool:
    """Whether a nested list that numpy read as numbers has a JSON true/false in it (numpy reads them
    as 1 and 0; GRPS refuses them): orjson writes them as ``true``/``false``, numbers never."""
    text = orjson.dumps(value)
    return b"t" in text or b"f" in text


def _walk_ndarray(value: list) -> tuple[list[int], list]:
    """GRPS's ``ParseNDArrayShapeAndVal``: (shape, values), depth first, its first refusal raised."""
    shape: list[int] = []
    flat: list = []
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, list):
            if not node:
                raise invalid(NDARRAY_EMPTY)
            if len(shape) <= depth:
                shape.append(len(node))
            elif shape[depth] != len(node):
                raise invalid(NDARRAY_RAGGED)
            stack.extend((v, depth + 1) for v in reversed(node))
        elif isinstance(node, int | float) and not isinstance(node, bool):
            flat.append(node)
        else:
            raise invalid(NDARRAY_NOT_NUMBER)
    return shape, flat


def message_to_json(msg: GrpsMessage, pretty: bool = True) -> bytes:
    """GrpsMessage → the C++ GRPS server's JSON text (``pretty=False``: the same, compact)."""
    return jsonwrite.message_json(msg, pretty)


def ndarray_to_json(msg: GrpsMessage, arr: np.ndarray, pretty: bool = True) -> bytes:
    """The ``return-ndarray=true`` answer: the message's status and the array as nested lists."""
    return jsonwrite.ndarray_answer(msg.status, arr, pretty)


# -- gtensors -------------------------------------------------------------------------------------
def flat_field(dtype: datatypes.DType) -> str:
    """DT_FLOAT32 → "flat_float32"."""
    return "flat_" + dtype.grps_name[3:].lower()


def tensor_from_generic(gt: grps_pb2.GenericTensor) -> Tensor:
    """GenericTensor → Tensor, with the value checks a client needs to see (range, fill); the
    declared shape is checked against limits.max_tensor_bytes before any array is made."""
    name = check_name(gt.name, "Tensor name") or "<unnamed>"
    dtype = _generic_dtype(gt, name)
    values = getattr(gt, flat_field(dtype))
    shape = list(gt.shape) if len(gt.shape) else [len(values)]
    expected = element_count(shape, name, dtype)
    if len(values) != expected:
        raise invalid(
            f"tensor '{clip(name)}': {len(values)} values in {flat_field(dtype)} do not fill shape "
            f"{dims_text(shape)} ({expected} expected)"
        )
    if dtype.is_bytes:
        data = list(values)
    elif dtype.numpy.kind in "iu":
        data = _checked_ints(values, dtype, name)
    else:
        data = np.fromiter(values, np.float64 if dtype.v2 == "FP64" else np.float32, len(values))  # 2x asarray
    with np.errstate(over="ignore"):  # flat_float16 past FP16's range: inf, as the C++ cast gives
        return Tensor.from_flat(gt.name, dtype.v2, shape, data)


def _generic_dtype(gt: grps_pb2.GenericTensor, name: str) -> datatypes.DType:
    if gt.dtype == grps_pb2.DT_INVALID:  # no dtype: take it from the one flat field that has data
        filled = [f for f in _FLAT_FIELDS if len(getattr(gt, f))]
        if len(filled) != 1:
            raise invalid(f"tensor '{clip(name)}': dtype is missing")
        return datatypes.by_grps("DT_" + filled[0][5:].upper())
    try:
        return datatypes.by_grps(int(gt.dtype))
    except KeyError:
        raise invalid(f"tensor '{clip(name)}': unknown dtype {gt.dtype}") from None


def _checked_ints(values, dtype: datatypes.DType, name: str) -> np.ndarray:
    wide = np.fromiter(values, np.int64, len(values))
    info = np.iinfo(dtype.numpy)
    if wide.size and (wide.min() < info.min or wide.max() > info.max):
        raise invalid(f"tensor '{clip(name)}': a value is out of range for {dtype.grps_name}")
    return wide.astype(dtype.numpy)


def tensor_to_generic(t: Tensor, out: grps_pb2.GenericTensor) -> grps_pb2.GenericTensor:
    """Tensor → GenericTensor (filled in place); Triton types GRPS cannot express are an error."""
    dtype = datatypes.by_v2(t.datatype)
    if dtype.grps is None:
        raise GatewayError(
            ErrorKind.UNIMPLEMENTED, f"output '{t.name}' has datatype {t.datatype}, which GRPS cannot express"
        )
    out.name, out.dtype = t.name, dtype.grps
    out.shape.extend(t.shape)
    flat = t.data.reshape(-1)
    if dtype.is_bytes:
        flat = [_utf8(v, t.name) for v in flat]
    else:
        flat = flat.astype(np.float32).tolist() if dtype.v2 == "FP16" else flat.tolist()
    getattr(out, flat_field(dtype)).extend(flat)
    return out


def _utf8(value: bytes | memoryview, name: str) -> str:
    try:
        return str(value, "utf-8")  # bytes, or a view of an answer decoded with views
    except UnicodeDecodeError:
        raise GatewayError(
            ErrorKind.UNIMPLEMENTED, f"output '{name}' holds bytes that are not UTF-8 (flat_string is UTF-8)"
        ) from None


# -- gmap -----------------------------------------------------------------------------------------
def gmap_values(gmap: grps_pb2.GenericMapData) -> dict[str, tuple[str, object]]:
    """GenericMapData → {key: (V2 datatype, value)}; a key in two maps is an error."""
    out: dict[str, tuple[str, object]] = {}
    for field, v2 in GMAP_TYPES.items():
        for key, value in getattr(gmap, field).items():
            if key in out:
                raise invalid(f"gmap key '{clip(key)}' appears in more than one map")
            out[key] = (v2, value.encode("utf-8") if field == "s_s" else value)
    return out


def gmap_from_tensors(tensors: list[Tensor], out: grps_pb2.GenericMapData,
                      bytes_map: str | None = None) -> grps_pb2.GenericMapData:
    """Single-value outputs → GenericMapData. BYTES outputs go to ``bytes_map`` ("s_b" or "s_s",
    the map the request used, see ``request_bytes_map``); without one, to s_s when they are UTF-8,
    else to s_b. s_s is a proto3 ``string``, so bytes that are not UTF-8 always go to s_b."""
    for t in tensors:
        if t.data.size != 1:
            raise GatewayError(
                ErrorKind.UNIMPLEMENTED, f"output '{t.name}' has shape {list(t.shape)}; gmap holds single values"
            )
        value = t.data.reshape(-1)[0]
        _gmap_put(out, t, value, bytes_map)
    return out


def request_bytes_map(msg: grps_pb2.GrpsMessage) -> str | None:
    """The map a gmap request carried its strings in: "s_b" or "s_s" when it used exactly one of
    them, else None (neither, or both)."""
    if msg.WhichOneof("data_oneof") != "gmap":
        return None
    used = [name for name in ("s_s", "s_b") if len(getattr(msg.gmap, name))]
    return used[0] if len(used) == 1 else None


def _gmap_put(out: grps_pb2.GenericMapData, t: Tensor, value, bytes_map: str | None) -> None:
    kind = t.datatype
    if kind == "BYTES":
        if bytes_map == "s_b":
            out.s_b[t.name] = value
            return
        try:
            out.s_s[t.name] = value.decode("utf-8")
        except UnicodeDecodeError:
            out.s_b[t.name] = value
    elif kind in ("INT8", "INT16", "INT32", "UINT8", "UINT16"):
        out.s_i32[t.name] = int(value)
    elif kind in ("INT64", "UINT32"):
        out.s_i64[t.name] = int(value)
    elif kind in ("FP16", "FP32", "BF16"):
        out.s_f[t.name] = float(value)
    elif kind == "FP64":
        out.s_d[t.name] = float(value)
    else:
        raise GatewayError(ErrorKind.UNIMPLEMENTED, f"output '{t.name}' has datatype {kind}, which gmap cannot hold")
