"""TF Serving REST JSON <-> neutral numpy tensors (pure functions, no I/O).

Request side: ``instances`` (row) or ``inputs`` (columnar) -> {alias: ndarray} typed by the
signature's input dtypes with TF Serving's JSON rules (integers only for int dtypes, numbers for
float, true/false for bool, strings or ``{"b64": ...}`` for DT_STRING). ``examples``/``context``
-> feature dicts. Response side: {alias: ndarray} -> ``predictions``/``outputs`` bytes;
regress/classify results -> ``results`` bytes.
"""

from __future__ import annotations

import array
import base64
import binascii
import math
import re

import numpy as np

from gateway.core import bounded, datatypes, densejson, floattext
from gateway.core.bounded import check_name, clip
from gateway.core.errors import GatewayError, invalid, unimplemented
from gateway.core.tensors import check_bytes

from . import jsonio, jsonwrite
from .examples import Feature, Features
from .mapping import Signature

_JSON_TYPE = {type(None): "Null", bool: "Bool", dict: "Object", list: "Array", str: "String",
              int: "Number", float: "Number"}

# The dtypes TF Serving's AddValueToTensor converts from JSON; any other is UNIMPLEMENTED (501).
_INT_RANGE = {"INT32": (-(2**31), 2**31 - 1), "INT16": (-(2**31), 2**31 - 1), "INT8": (-(2**31), 2**31 - 1),
              "UINT8": (-(2**31), 2**31 - 1), "INT64": (-(2**63), 2**63 - 1), "UINT32": (0, 2**32 - 1),
              "UINT64": (0, 2**64 - 1)}
_FLOATS = ("FP32", "FP64")
_FROM_JSON = jsonwrite.JSON_TYPES
MAX_RANK = 254  # TF's TensorShape::MaxDimensions(); deeper lists are refused before the recursive fill


def tf_type(v2: str) -> str:
    """TF's DataTypeString ("float", "int32", "string", ...)."""
    return datatypes.by_v2(v2).tf_name[3:].lower()


def _json_type(value) -> str:
    if value is True:
        return "True"
    if value is False:
        return "False"
    return _JSON_TYPE.get(type(value), "Object")


def _type_error(value, v2: str) -> GatewayError:
    return invalid(f"JSON Value: {jsonio.debug_string(value)} Type: {_json_type(value)} is not of expected "
                   f"type: {tf_type(v2)}")


def _is_b64(v) -> bool:
    """TF's IsValBase64Object: an object with exactly one key, "b64", holding a string."""
    return isinstance(v, dict) and len(v) == 1 and isinstance(v.get("b64"), str)


def _is_element_object(v) -> bool:
    return isinstance(v, dict) and not _is_b64(v)


def _b64(v) -> bytes:
    if not _is_b64(v):
        raise invalid(f"JSON Value: {jsonio.debug_string(v)} not formatted correctly for base64 data")
    text = v["b64"]
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise invalid("Unable to base64 decode") from None


def _status(err: GatewayError) -> str:
    """absl's Status::ToString(): "<CODE>: <message>", as TF Serving nests one error in another."""
    from .errors import TABLE  # errors imports nothing from here; local import keeps the layering flat

    return f"{TABLE[err.kind][0]}: {err.message}"


def _shape_text(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


# -- one JSON value -> one tensor, as TF Serving's FillTensorProto --------------------------------
def _dense_shape(value) -> list[int]:
    """GetDenseTensorShape: the shape the first element at every level implies."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > MAX_RANK:
            raise invalid(f"JSON Value: {jsonio.debug_string(value)} is nested more than {MAX_RANK} levels deep")
        if not value:
            break
        value = value[0]
    return shape


def _double(v) -> float:
    try:
        return float(v)
    except OverflowError:  # an integer past double range: rapidjson reads it as a double (inf)
        return float("inf") if v > 0 else float("-inf")


def _leaf(v, v2: str):
    if isinstance(v, dict):
        if v2 == "BYTES":
            return _b64(v)
        raise _type_error(v, v2)
    if v2 in _FLOATS:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _type_error(v, v2)
        return _double(v)
    if v2 in _INT_RANGE:
        lo, hi = _INT_RANGE[v2]
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise _type_error(v, v2)
        return v
    if v2 == "BOOL":
        if not isinstance(v, bool):
            raise _type_error(v, v2)
        return v
    if v2 == "BYTES":
        if not isinstance(v, str):
            raise _type_error(v, v2)
        return v.encode("utf-8")
    raise unimplemented(f"Conversion of JSON Value: {jsonio.debug_string(v)} to type: {tf_type(v2)}")


def _fill(value, level: int, shape: list[int], v2: str, out: list) -> None:
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise invalid(f"JSON Value: {jsonio.debug_string(value)} found at incorrect level: {level + 1} in the "
                          f"JSON DOM. Expected at level: {rank}")
        out.append(_leaf(value, v2))
        return
    if level >= rank:
        raise invalid(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise invalid(f"Encountered list at unexpected size: {len(value)} at level: {level} expected size: "
                      f"{shape[level]}")
    for v in value:
        _fill(v, level + 1, shape, v2, out)


def _fast(value, v2: str, bools: bool) -> np.ndarray | None:
    """numpy's own conversion when it provably gives what the exact walk below would (None: walk)."""
    if v2 not in _FLOATS and v2 not in _INT_RANGE and v2 != "BOOL" or not isinstance(value, list):
        return None
    if bools and v2 != "BOOL":  # numpy would read true/false among numbers as 1/0
        return None
    if v2 == "FP32" and 0 < len(value) <= _SHORT:
        try:  # a short flat list of numbers (the common small predict); anything else raises
            return np.frombuffer(array.array("f", value), np.float32)
        except (TypeError, OverflowError):
            pass
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError, TypeError):
        return None
    kind = arr.dtype.kind
    if v2 == "BOOL":
        return arr if kind == "b" else None
    if v2 in _FLOATS:
        if kind not in "iuf":
            return None
        if v2 == "FP64":
            return arr.astype(np.float64, copy=False)
        if kind != "f":  # each int as a double first, as rapidjson's GetFloat reads it (not int64 -> float32)
            return arr.astype(np.float64).astype(np.float32)
        with np.errstate(over="ignore"):  # a value past float32's range becomes inf, as TF's cast makes it
            return arr.astype(np.float32)
    if kind not in "iu":
        return None
    lo, hi = _INT_RANGE[v2]
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        return None
    return arr.astype(datatypes.by_v2(v2).numpy, copy=False)


# Flat float32 lists up to this length are read by array('f'): each number as a C double cast to
# float (TF Serving's rapidjson GetFloat: static_cast<float>(GetDouble())), past float32's range
# inf with no numpy warning (no numpy errstate around it), ints as doubles first: cheaper for short
# lists than numpy's reading, its range check and its cast.
_SHORT = 32


def _check_size(value, v2: str, name: str) -> None:
    """limits.max_tensor_bytes, from the shape the JSON implies and the dtype, before any array."""
    try:
        shape = _dense_shape(value)
    except GatewayError:  # nested past TF's rank: the fill below says so in TF's words
        return
    check_bytes(math.prod(shape), datatypes.by_v2(v2), name or "instances", shape)


def _converted(value, v2: str, name: str, bools: bool, within: bool) -> np.ndarray | None:
    """``_fast``'s array, limits.max_tensor_bytes checked (``_check_size``) before it is made; with
    ``within`` (a body too small to break that limit: ``within_limit``), only when ``_fast`` leaves
    it to the walk."""
    if not within:
        _check_size(value, v2, name)
    arr = _fast(value, v2, bools)
    if arr is None and within:
        _check_size(value, v2, name)
    return arr


def within_limit(size: int) -> bool:
    """Whether a JSON body of ``size`` bytes is too small for any tensor read from it to pass
    limits.max_tensor_bytes in numpy's conversion: each number takes at least two bytes (a digit and
    a separator), so at most size / 2 of them, of at most 8 bytes each. (A ragged body's shape as
    its first elements imply it can still be larger: that is checked when ``_fast`` refuses it.)"""
    return 4 * size <= bounded.LIMITS.max_tensor_bytes


def to_array(value, v2: str, name: str = "", bools: bool = True, within: bool = False) -> np.ndarray:
    """One JSON value (scalar or nested lists) as an array of the signature's dtype, judged as TF
    Serving's FillTensorProto judges it: the first element at each level sets the shape, every
    leaf must sit at the last level, every list must have its level's length, and every value must
    be of the JSON type the dtype takes (errors in TF Serving's words). ``bools``: whether the body
    may hold true/false (only then numbers are checked one by one)."""
    arr = _converted(value, v2, name, bools, within)
    if arr is not None:
        return arr
    shape = _dense_shape(value)
    flat: list = []
    try:
        _fill(value, 0, shape, v2, flat)
    except RecursionError:  # pragma: no cover - MAX_RANK bounds the depth
        raise invalid("JSON Value: nested too deeply") from None
    if v2 == "BYTES":
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        return arr.reshape(shape)
    row = datatypes.by_v2(v2)
    if v2 in _FLOATS:
        with np.errstate(over="ignore"):
            return np.array(flat, dtype=np.float64).astype(row.numpy).reshape(shape)
    if v2 in ("UINT64",):
        return np.array(flat, dtype=np.uint64).reshape(shape)
    if v2 == "BOOL":
        return np.array(flat, dtype=np.bool_).reshape(shape)
    # int8/int16/uint8 take any int32 and wrap, as TF's int_val -> Tensor cast does
    return np.array(flat, dtype=np.int64).astype(row.numpy).reshape(shape)


# -- predict requests --------------------------------------------------------------------------
def signature_name(doc: dict) -> str:
    """FillSignature: the optional ``signature_name`` ("" when absent), which must be a string."""
    sig = doc.get("signature_name", "")
    if not isinstance(sig, str):
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} not formatted correctly. 'signature_name' key "
                      "must be a string value.")
    return check_name(sig, "Signature name")


def may_hold_bools(body: bytes) -> bool:
    """Whether a body may hold a true/false token (the ``bools`` argument of ``parse_predict``):
    ``b"true" in body or b"false" in body``, by memchr in the compiled float-text extension
    (a 3 MB body of numbers in well under a millisecond)."""
    return floattext.has_bool_token(body)


def parse_predict(doc: dict, sig: Signature, bools: bool = True,
                  within: bool = False) -> tuple[dict[str, np.ndarray], bool]:
    """({alias: array}, row_format) from a predict body, with TF Serving's checks and texts.

    ``bools=False`` promises the body holds no true/false token, which lets numeric tensors take
    numpy's conversion (see ``to_array``); ``within`` that the body is ``within_limit``."""
    has_inst, has_inp = "instances" in doc, "inputs" in doc
    if has_inst and has_inp:
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} Not formatted correctly expecting only one "
                      "of 'inputs' or 'instances' keys to exist ")
    if not has_inst and not has_inp:
        raise invalid("Missing 'inputs' or 'instances' key")
    types = sig.client_types  # alias -> V2 type clients send
    if has_inst:
        return _rows(doc, types, bools, within), True
    return _columns(doc["inputs"], types, bools, within), False


# -- dense numeric bodies (an image as JSON lists) -----------------------------------------------
DENSE_MIN = 16 << 10  # bodies from this size try the dense reading first; smaller ones are orjson's
_DENSE_HEAD = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"(instances|inputs)"[ \t\n\r]*:[ \t\n\r]*(?=\[)')
_DENSE_TAIL = re.compile(rb"[ \t\n\r]*\}[ \t\n\r]*")


def dense_body(body: bytes, max_depth: int | None = None) -> tuple[np.ndarray, bool] | None:
    """(float64 values in their shape, row format) of a body that is exactly ``{"instances": A}`` or
    ``{"inputs": A}`` with A a dense array of numbers (``densejson``), else None: the general path
    (``jsonio.loads`` + ``parse_predict``) then reads it, errors included. Such a body names no
    signature and holds no true/false, so what the general path would make of it is A as numpy
    reads it; nothing is judged here that it would judge otherwise."""
    head = _DENSE_HEAD.match(body)
    if head is None:
        return None
    found = densejson.dense_array(body, head.end())
    if found is None:
        return None
    values, end = found
    if not _DENSE_TAIL.fullmatch(body, end) or max_depth is not None and values.ndim + 1 > max_depth:
        return None
    return values, head[1] == b"instances"


def dense_inputs(values: np.ndarray, sig: Signature) -> dict[str, np.ndarray] | None:
    """``parse_predict``'s answer for a ``dense_body`` when the signature takes one float tensor
    (None: any other signature, which the general path judges)."""
    if len(sig.inputs) != 1:
        return None
    alias, spec = sig.inputs[0]
    v2 = sig.client_dtype(spec)
    if v2 not in _FLOATS:
        return None
    check_bytes(values.size, datatypes.by_v2(v2), alias, list(values.shape))
    if v2 == "FP64":
        return {alias: values}
    with np.errstate(over="ignore"):
        return {alias: values.astype(np.float32)}


class _Batch:
    """AddInstanceItem's bookkeeping: every instance of one input must have the first one's size and shape."""

    def __init__(self, v2: str, bools: bool):
        self.v2, self.bools, self.items = v2, bools, []

    def add(self, value) -> None:
        arr = to_array(value, self.v2, bools=self.bools)
        if self.items:
            first = self.items[0]
            if first.size != arr.size:
                raise invalid(f"Expecting tensor size: {first.size} but got: {arr.size}")
            if first.shape != arr.shape:
                raise invalid(f"Expecting shape {_shape_text(first.shape)} but got: {_shape_text(arr.shape)}")
        self.items.append(arr)

    def stacked(self, n: int, v2: str) -> np.ndarray:
        if not self.items:
            return np.empty((n,), dtype=datatypes.by_v2(v2).numpy)
        return np.stack(self.items)


def _wrap(i: int, err: GatewayError, key: str | None = None) -> GatewayError:
    where = f"Failed to process element: {i}" + (f" key: {clip(key)}" if key is not None else "")
    return invalid(f"{where} of 'instances' list. Error: {_status(err)}")


def _rows(doc: dict, types: dict[str, str], bools: bool, within: bool = False) -> dict[str, np.ndarray]:
    inst = doc["instances"]
    if not isinstance(inst, list):
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} Expecting 'instances' to be an list/array")
    if not inst:
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} No values in 'instances' array")
    if not isinstance(inst[0], dict) and len(types) > 1:
        raise invalid("instances is a plain list, but expecting list of objects as multiple input tensors "
                      "required as per tensorinfo_map")
    if not _is_element_object(inst[0]):
        alias = next(iter(types))
        v2 = types[alias]
        whole = _converted(inst, v2, alias, bools, within)
        if whole is not None and whole.ndim >= 1:
            return {alias: whole}
        batch = _Batch(v2, bools)
        for i, elem in enumerate(inst):
            if _is_element_object(elem):
                raise invalid(f"Expecting value/list but got object at item {i} of input list")
            try:
                batch.add(elem)
            except GatewayError as e:
                raise _wrap(i, e) from None
        return {alias: batch.stacked(len(inst), v2)}
    batches = {alias: _Batch(v2, bools) for alias, v2 in types.items()}
    names = sorted(types)
    for i, elem in enumerate(inst):
        if not _is_element_object(elem):
            raise invalid(f"Expecting object but got list at item {i} of input list")
        for key, value in elem.items():
            try:
                if key not in batches:
                    raise invalid(f"JSON object: does not have named input: {clip(key)}")
                batches[key].add(value)
            except GatewayError as e:
                raise _wrap(i, e, key) from None
        if sorted(elem) != names:
            raise invalid(f"Failed to process element: {i} of 'instances' list. JSON object: "
                          f"{jsonio.debug_string(elem)} keys must be equal to: {','.join(names)}")
    return {alias: b.stacked(len(inst), types[alias]) for alias, b in batches.items()}


def _columns(inputs, types: dict[str, str], bools: bool, within: bool = False) -> dict[str, np.ndarray]:
    if _is_element_object(inputs):
        out = {}
        for alias, v2 in types.items():
            if alias not in inputs:
                raise invalid(f"Missing named input: {alias} in 'inputs' object.")
            out[alias] = to_array(inputs[alias], v2, alias, bools, within)
        return out
    if len(types) != 1:
        raise invalid("inputs is a plain value/list, but expecting an object as multiple input tensors "
                      "required as per tensorinfo_map")
    (alias, v2), = types.items()
    return {alias: to_array(inputs, v2, alias, bools, within)}


# -- predict responses -------------------------------------------------------------------------
def write_predict(outputs: dict[str, tuple[np.ndarray, str]], row: bool) -> bytes:
    """``{"predictions": ...}`` (row) or ``{"outputs": ...}`` (columnar) from {alias: (array, V2 type)},
    in TF Serving's bytes (``jsonwrite``)."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    if not row:
        return jsonwrite.predict_columnar(outputs)
    return jsonwrite.predict_row(outputs, _batch_size(outputs))


def _batch_size(outputs) -> int:
    batch = None
    for name, (arr, _) in outputs.items():
        if arr.ndim == 0:
            raise invalid(f"Tensor name: {name} has no shape information ")
        if batch is None:
            batch = arr.shape[0]
        elif arr.shape[0] != batch:
            raise invalid(f"Tensor name: {name} has inconsistent batch size: {arr.shape[0]} expecting: {batch}")
    return batch or 0


# -- classify / regress ------------------------------------------------------------------------
def parse_examples(doc: dict, method: str) -> tuple[list[Features], Features]:
    """(examples, context) in TF Serving's order: context first, then the 'examples' checks, then
    each example (FillClassifyRegressRequestFromJson). Its texts say "classify" for regress too."""
    context: Features = {}
    if "context" in doc:
        context = _example(doc["context"])
    if "examples" not in doc:
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} When method is classify, key 'examples' is "
                      "expected and was not found")
    examples = doc["examples"]
    if not isinstance(examples, list):
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} Expecting 'examples' value to be an list/array")
    if not examples:
        raise invalid(f"JSON Value: {jsonio.debug_string(doc)} 'examples' value is an empty array")
    return [_example(e) for e in examples], context


def _example(obj) -> Features:
    if not isinstance(obj, dict):
        raise invalid(f"Example must be JSON object but got JSON {_json_type(obj)}")
    out = {}
    for name, content in obj.items():
        kind, values = None, []
        for v in content if isinstance(content, list) else [content]:
            kind = _add_feature_value(name, v, kind, values)
        out[name] = Feature(kind or "float", values)
    return out


def _add_feature_value(name: str, v, kind: str | None, values: list) -> str:
    """AddValueToFeature: one JSON value appended to a feature whose kind its first value set."""
    if v is None or isinstance(v, list) or isinstance(v, dict) and not _is_b64(v):
        raise invalid(f"Feature: {clip(name)} has element with unexpected JSON type: {_json_type(v)}")
    if isinstance(v, bool):
        want, value = "int64", int(v)
    elif isinstance(v, dict):
        want, value = "bytes", None
    elif isinstance(v, str):
        want, value = "bytes", v.encode("utf-8")
    elif isinstance(v, float) or isinstance(v, int) and not -(2**63) <= v < 2**64:
        want, value = "float", _double(v)
    else:
        want, value = "int64", v
    if kind is not None and kind != want:
        raise invalid(f"Unexpected element type in feature: {clip(name)} expecting type: {kind}")
    if want == "bytes" and value is None:
        value = _b64(v)
    if want == "int64" and value > 2**63 - 1:
        raise invalid(f"Feature: {clip(name)} has uint64_t element. Only int64_t is supported.")
    values.append(value)
    return want


def write_regress(values: np.ndarray) -> bytes:
    if not values.size:
        raise invalid("Cannot convert empty RegressionResults to JSON")
    return jsonwrite.regress(values)


def write_classify(labels: list[list[str]], scores: np.ndarray) -> bytes:
    if not labels:
        raise invalid("Cannot convert empty ClassificationResults to JSON")
    return jsonwrite.classify(labels, scores)
