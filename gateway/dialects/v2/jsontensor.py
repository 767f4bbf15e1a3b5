"""KServe V2 REST infer bodies ⇄ ``ModelInferRequest`` / ``ModelInferResponse``, as Triton's HTTP
front end reads and writes them (server ``src/http_server.cc``: ``ParseJsonTritonParams``,
``ParseJsonTritonIO``, ``ReadDataFromJson``, ``FinalizeResponse``, ``WriteDataToJson``).

JSON ``data`` and binary tensors (``binary_data_size`` after an ``Inference-Header-Content-Length``
JSON header) both become ``raw_input_contents``; each output comes back as JSON ``data`` or as
binary after the JSON (``binary_data`` per output, ``binary_data_output`` for all), so tensor
bytes are copied once each way. The checks the front end makes before Triton's core sees the
request are made here with its words (and its order: id, parameters, inputs, outputs); Triton
makes the rest. Where the front end answers 500 for a client's malformed body (a TritonJson access
error), this answers 400 with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tritonclient.grpc import service_pb2

from gateway.core import datatypes
from gateway.core.bounded import Plans
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.core.tensors import check_bytes
from gateway.upstream.wire import serialize_message

from . import rjson
from .jsonbody import utf8

INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
_NON_STRING = "attempt to access JSON non-string as string"
_NON_ARRAY = "attempt to access JSON non-array as array"
_NON_BOOL = "attempt to access JSON non-boolean as boolean"
_NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NON_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NON_NUMBER = "attempt to access JSON non-number as double"
_KIND_CHECK = {"b": _NON_BOOL, "u": _NON_UINT, "i": _NON_INT, "f": _NON_NUMBER}


def _missing(name: str) -> str:
    return f"attempt to access non-existing object member '{name}'"


def _is_uint(v) -> bool:
    return type(v) is int and 0 <= v <= UINT64_MAX


def _is_int(v) -> bool:
    return type(v) is int and -INT64_MAX - 1 <= v <= INT64_MAX


def _is_number(v) -> bool:
    return type(v) in (int, float)


# JSON values are read as Triton reads them (uint64, int64, double), then cast as C casts them
_WIDE = {"u": np.uint64, "i": np.int64, "f": np.float64, "b": np.bool_}
_VALID = {"b": lambda v: type(v) is bool, "u": _is_uint, "i": _is_int, "f": _is_number}


def _member(obj, name: str, want: type, what: str | None = None):
    """``MemberAsString`` / ``MemberAsArray``: ``Unable to parse '<name>': ...``."""
    label = what or name
    if not isinstance(obj, dict) or name not in obj:
        raise invalid(f"Unable to parse '{label}': {_missing(name)}")
    value = obj[name]
    if type(value) is not want:
        raise invalid(f"Unable to parse '{label}': {_NON_STRING if want is str else _NON_ARRAY}")
    return value


@dataclass(slots=True)
class Output:
    binary: bool
    classes: int = 0


@dataclass(slots=True)
class Parsed:
    """The request for Triton (its raw contents apart: appended on the wire) and how to answer."""

    msg: service_pb2.ModelInferRequest
    raws: list = field(default_factory=list)
    outputs: dict[str, Output] = field(default_factory=dict)
    binary_default: bool = False


def serialize(parsed: Parsed) -> bytes:
    """The request with each tensor's bytes appended as its own ``raw_input_contents`` field (copied once)."""
    return serialize_message(parsed.msg, parsed.raws)


def param(msg_params, key: str, value) -> None:
    """``SetTritonParameterFromJsonParameter``: string, int64, bool, else any number as a double."""
    p = msg_params[key]
    if type(value) is str:
        p.string_param = value
    elif type(value) is bool:
        p.bool_param = value
    elif _is_int(value):
        p.int64_param = value
    elif _is_number(value):
        p.double_param = float(value)
    else:
        raise invalid(f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'.")


def _uint_param(p, value) -> None:
    if value > INT64_MAX:
        p.uint64_param = value
    else:
        p.int64_param = value


def _parameters(doc, msg: service_pb2.ModelInferRequest) -> bool:
    """Request parameters (Triton's reserved ones checked as it does); the binary_data_output default."""
    binary = False
    if not isinstance(doc, dict) or "parameters" not in doc:
        return binary
    params = doc["parameters"]
    if not isinstance(params, dict):  # null included: Triton finds the member and asks for its members
        raise invalid("failed to get request params.: attempt to get members for non-object")
    for key, value in params.items():
        if key == "sequence_id":
            if _is_uint(value):
                _uint_param(msg.parameters[key], value)
            elif type(value) is str:
                msg.parameters[key].string_param = value
            else:
                raise invalid(f"Unable to parse 'sequence_id': {_NON_STRING}")
        elif key in ("sequence_start", "sequence_end"):
            if type(value) is not bool:
                raise invalid(f"Unable to parse '{key}': {_NON_BOOL}")
            msg.parameters[key].bool_param = value
        elif key in ("priority", "timeout"):
            if not _is_uint(value):
                raise invalid(f"Unable to parse '{key}': {_NON_UINT}")
            _uint_param(msg.parameters[key], value)
        elif key == "binary_data_output":
            if type(value) is not bool:
                raise invalid(f"Unable to parse 'binary_data_output': {_NON_BOOL}")
            binary = value
        elif key.startswith("triton_"):
            raise invalid("parameter keys starting with 'triton_' are reserved for Triton usage and should not be "
                          "specified.")
        else:
            param(msg.parameters, key, value)
    return binary


def _flatten(data: list) -> list:
    """Every scalar of a nested list, depth first (Triton counts elements, not the nesting)."""
    if not any(type(v) is list for v in data):
        return data
    out: list = []
    stack = [iter(data)]
    while stack:
        for v in stack[-1]:
            if type(v) is list:
                stack.append(iter(v))
                break
            out.append(v)
        else:
            stack.pop()
    return out


def _content_check(inp) -> None:
    """``ValidateInputContentType``: exactly one of data, binary_data_size, shared_memory_region."""
    has_data = isinstance(inp, dict) and "data" in inp
    params = inp.get("parameters") if isinstance(inp, dict) else None
    has_binary = isinstance(params, dict) and "binary_data_size" in params
    has_shm = isinstance(params, dict) and "shared_memory_region" in params
    count = has_data + has_binary + has_shm
    if count != 1:
        text = ("Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
                "'shared_memory_region' in 'parameters'. But")
        if count == 0:
            text += " no field is set"
        else:
            text += " set" + (" 'data'" if has_data else "") + (" 'binary_data_size'" if has_binary else "") + (
                " 'shared_memory_region'" if has_shm else "")
        raise invalid(text)


def _shape(inp) -> list[int]:
    dims = _member(inp, "shape", list)
    for d in dims:
        if not _is_uint(d):
            raise invalid(f"Unable to parse 'shape': {_NON_UINT}")
    return dims


def int64(d: int) -> int:
    """A shape dimension (read as uint64) as Triton holds it: an int64, two's complement."""
    return d - (1 << 64) if d > INT64_MAX else d


def _count(dims: list[int]) -> int:
    """``GetElementCount`` (server ``src/common.cc``) of the shape as Triton holds it: each dimension
    an int64, a ``-1`` answers -1, the product wraps as int64 arithmetic does, no dimension is 0
    elements. Nothing is refused here: what the client sent reaches the checks that name it."""
    cnt = 0
    for i, d in enumerate(dims):
        d = int64(d)
        if d == -1:
            return -1
        cnt = d if i == 0 else ((cnt * d + (1 << 63)) & UINT64_MAX) - (1 << 63)
    return cnt


def _json_data(name: str, dtype_name: str, inp, count: int, dims: list[int]) -> bytes:
    return values(name, dtype_name, _member(inp, "data", list), count, dims)


def bytes_values(flat: list, name: str) -> bytes:
    """``JsonBytesArrayByteSize`` then ``ReadDataFromJson`` of a BYTES tensor: length-prefixed UTF-8."""
    for v in flat:
        if type(v) is not str:
            raise invalid(f"Unable to parse JSON bytes array: {_NON_STRING}")
    check_bytes(len(flat), datatypes.by_v2("BYTES"), name)
    return datatypes.encode_bytes(np.array([utf8(v) for v in flat] + [b""], dtype=object)[:-1])


def values(name: str, dtype_name: str, data: list, count: int, dims: list[int] | None = None) -> bytes:
    """``ReadDataFromJson``: JSON values (nested lists are read depth first) as the tensor's raw bytes.
    Triton's checks first (each value's type, then their count against the shape's), then this
    gateway's limit on a tensor's bytes (``limits.max_tensor_bytes``), naming the shape the client
    sent (``dims``)."""
    flat = _flatten(data)
    if dtype_name == "BYTES":
        return bytes_values(flat, name)
    if dtype_name in ("FP16", "BF16"):
        raise invalid(f"receiving {dtype_name} data via JSON is not supported. Please use the binary data format "
                      f"for input {name}")
    try:
        row = datatypes.by_v2(dtype_name)
    except KeyError:
        raise invalid(f"invalid datatype for input {name}") from None
    kind = row.numpy.kind
    valid = _VALID[kind]
    head = flat[:max(count, 0)]  # Triton reads values while it has room for them (a negative count: none)
    if not all(map(valid, head)):
        raise invalid(f"Unable to parse 'data': {_KIND_CHECK[kind]}")
    if len(flat) != count:  # Triton 2.51 words both ways alike
        raise invalid("Unable to parse 'data': Shape does not match true shape of 'data' field")
    check_bytes(count, row, name, dims)
    return np.array(flat, dtype=_WIDE[kind]).astype(row.numpy, copy=False).tobytes()


def parse(doc, model: str, version: str, binary: memoryview) -> Parsed:
    """The parsed JSON header (``doc``) and the binary part after it, as Triton reads them."""
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    if isinstance(doc, dict) and "id" in doc:
        if type(doc["id"]) is not str:
            raise invalid(f"Unable to parse 'id': {_NON_STRING}")
        msg.id = doc["id"]
    parsed = Parsed(msg, binary_default=_parameters(doc, msg))
    inputs = _member(doc, "inputs", list)
    offset = 0
    for inp in inputs:
        _content_check(inp)
        name = _member(inp, "name", str)
        dtype_name = _member(inp, "datatype", str)
        dims = _shape(inp)
        msg.inputs.add(name=name, datatype=dtype_name, shape=[int64(d) for d in dims])
        params = inp.get("parameters")
        if isinstance(params, dict) and "binary_data_size" in params:
            size = params["binary_data_size"]
            if not _is_uint(size):
                raise invalid(f"Unable to parse 'binary_data_size': {_NON_UINT}")
            piece = binary[offset:offset + size]
            offset += len(piece)
            if len(piece) < size:
                raise invalid(f"unexpected size for input '{name}', expecting {size - len(piece)} additional bytes "
                              f"for model '{model}'")
            parsed.raws.append(piece)
        elif isinstance(params, dict) and "shared_memory_region" in params:
            raise GatewayError(ErrorKind.UNIMPLEMENTED, "shared memory is not available through this gateway")
        else:
            count = _count(dims)
            parsed.raws.append(b"" if count == 0 else _json_data(name, dtype_name, inp, count, dims))
    if offset != len(binary):
        raise invalid(f"unexpected additional input data for model '{model}'")
    if isinstance(doc, dict) and "outputs" in doc:
        for out in _member(doc, "outputs", list):
            parsed.outputs.update([_output(out, msg)])
    return parsed


def _output(out, msg: service_pb2.ModelInferRequest) -> tuple[str, Output]:
    params = out.get("parameters") if isinstance(out, dict) else None
    params = params if isinstance(params, dict) else {}
    if "shared_memory_region" in params:
        if "classification" in params:
            raise invalid("Output can't set both 'shared_memory_region' and 'classification'")
        raise GatewayError(ErrorKind.UNIMPLEMENTED, "shared memory is not available through this gateway")
    name = _member(out, "name", str)
    requested = msg.outputs.add(name=name)
    classes = params.get("classification", 0)
    if not _is_uint(classes):
        raise invalid(f"Unable to set 'classification': {_NON_UINT}")
    if classes:
        requested.parameters["classification"].int64_param = classes
    binary = params.get("binary_data", False)
    if type(binary) is not bool:
        raise invalid(f"Unable to parse 'binary_data': {_NON_BOOL}")
    return name, Output(binary, classes)


# -- answers ---------------------------------------------------------------------------------
def param_text(p) -> bytes:
    which = p.WhichOneof("parameter_choice")
    value = getattr(p, which) if which else ""
    if which == "bool_param":
        return b"true" if value else b"false"
    if which in ("int64_param", "uint64_param"):
        return str(value).encode()
    if which == "double_param":
        return rjson.double(value).encode()
    return rjson.string(value)


def data_text(name: str, dtype_name: str, raw: bytes, count: int) -> bytes:
    """``WriteDataToJson``."""
    if dtype_name == "BYTES":
        items = datatypes.decode_bytes(raw) if raw else ()
        return rjson.strings(items)
    if dtype_name in ("FP16", "BF16"):
        raise invalid(f"sending {dtype_name} data via JSON is not supported. Please use the binary data format for "
                      "output")
    row = datatypes.by_v2(dtype_name)
    if len(raw) != row.size * count:
        raise GatewayError(ErrorKind.UPSTREAM_FAILED, "Failed to write 'data' field: output tensor shape does not "
                                                      f"match size of output for '{name}'")
    if dtype_name == "FP32" or dtype_name == "FP64":  # straight from the raw bytes, in C
        return rjson.float_raw(raw, dtype_name == "FP32")
    arr = np.frombuffer(raw, dtype=row.numpy)
    if row.numpy.kind == "b":
        return rjson.bools(arr)
    return rjson.ints(arr)


_model_heads = Plans(4096)  # (model_name, model_version) -> their members, as written
_output_heads = Plans(4096)  # (name, datatype, shape) -> '{"name":..,"datatype":..,"shape":[..]'


def _model_head(name: str, version: str) -> bytes:
    return b'"model_name":' + rjson.string(name) + b',"model_version":' + rjson.string(version)


def _output_head(name: str, datatype: str, shape: tuple) -> bytes:
    return (b'{"name":' + rjson.string(name) + b',"datatype":' + rjson.string(datatype) + b',"shape":['
            + ",".join(map(str, shape)).encode() + b"]")


def _head(plans: Plans, key: tuple, write) -> bytes:
    """A piece of the answer written once per key (the models and shapes Triton answers)."""
    hit = plans.get(key)
    return hit if hit is not None else plans.keep(key, write(*key))


def render(resp: service_pb2.ModelInferResponse, parsed: Parsed, raws=None) -> tuple[list, int | None]:
    """``FinalizeResponse``: the body's pieces, and the JSON header's length when binary follows
    (``raws``: the raw contents, e.g. views from ``wire.parse_response``; None: the answer's)."""
    rid = resp.id
    head = [b'{"id":' + rjson.string(rid) + b"," if rid else b"{",
            _head(_model_heads, (resp.model_name, resp.model_version), _model_head)]
    if resp.parameters:
        head.append(b',"parameters":{')
        head.append(b",".join(rjson.string(k) + b":" + param_text(p) for k, p in resp.parameters.items()))
        head.append(b"}")
    head.append(b',"outputs":[')
    buffers: list = []
    if raws is None:
        raws = resp.raw_output_contents
    wanted, binary_default = parsed.outputs, parsed.binary_default
    outs = resp.outputs  # indexed, and shapes sliced: iterating protobuf repeated fields is slower (upb)
    for i in range(len(outs)):
        out = outs[i]
        name, datatype, shape = out.name, out.datatype, tuple(out.shape[:])
        want = wanted.get(name) if wanted else None
        raw = raws[i] if i < len(raws) else b""
        if i:
            head.append(b",")
        head.append(_head(_output_heads, (name, datatype, shape), _output_head))
        if want.binary if want is not None else binary_default:
            head.append(b',"parameters":{"binary_data_size":%d}}' % len(raw))
            if raw:
                buffers.append(raw)
        else:
            count = 1
            for d in shape:
                count *= d
            head += (b',"data":', data_text(name, datatype, raw, count), b"}")
    head.append(b"]}")
    if not buffers:
        return head, None
    header = b"".join(head)
    return [header, *buffers], len(header)
