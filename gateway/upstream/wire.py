"""The KServe V2 ModelInfer wire: every ModelInfer request writer and answer reader of the gateway.

Requests carry tensor bytes in ``raw_input_contents`` (ndarray.tobytes: memcpy speed; the typed
``contents`` fields are ~500x slower for large arrays), written from neutral tensors
(``serialize_request``, ``encode_request``), from a message the caller holds (``serialize_message``)
or from a request planned once per shape (``header``, ``raw_entry``, ``Planned``). Answers are read
with ``np.frombuffer`` over ``raw_output_contents`` (zero copy; ``parse_response``,
``decode_response``, ``numeric_outputs``, ``AnswerForm``), falling back to typed ``contents`` when
Triton used them. The protobuf primitives are gateway/core/protowire.py's; parameters, metadata,
config and index are gateway/upstream/codec.py's.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from gateway.core import datatypes
from gateway.core.bounded import Plans
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.parts import nbytes, part_size
from gateway.core.protowire import delimited, fields, read_varint, varint
from gateway.core.tensors import InferRequest, InferResponse, Tensor

from .codec import get_params, set_params

FINAL_PARAM = "triton_final_response"
ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response"


RAW_NUMPY = {row.v2: row.numpy for row in datatypes.TABLE if not row.is_bytes}  # V2 name -> numpy, fixed size
SMALL_RAW = 1 << 16  # raw contents up to this size are copied once into bytes (cheaper than a view's steps)


def _numeric(t: Tensor) -> np.ndarray:
    """A fixed-size tensor's data in its V2 datatype's numpy type (KeyError: not a V2 type)."""
    want = RAW_NUMPY[t.datatype]
    return t.data if t.data.dtype == want else t.data.astype(want)


def _raw(t: Tensor) -> bytes:
    if t.datatype == "BYTES":
        return datatypes.encode_bytes(t.data)
    return _numeric(t).tobytes()  # C order, whatever the array's strides


RAW_INPUT_TAG = bytes([service_pb2.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number << 3 | 2])


def _raw_parts(t: Tensor) -> list:
    """The tensor's raw contents as bytes-like pieces: a small numeric tensor as one copy, a large
    one as a view (not a copy), BYTES as its length-prefixed elements."""
    if t.datatype == "BYTES":
        return datatypes.bytes_parts(t.data)
    return [contents(_numeric(t))]


def contents(arr: np.ndarray) -> bytes | memoryview:
    """A numeric array's raw contents in C order: a small one copied once into bytes, a large one
    as a view of its (contiguous) data, not a copy."""
    if arr.nbytes <= SMALL_RAW:
        return arr.tobytes()
    # as bytes of a uint8 view: extension dtypes (ml_dtypes' bfloat16) export no buffer of their own
    return memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def _header(req: InferRequest) -> bytes:
    """The request's fields but ``id`` and the raw contents, written as protobuf writes them;
    only for requests without parameters (``serialize_request`` checks)."""
    return header(req.model, req.version, [(t.name, t.datatype, t.shape) for t in req.inputs], req.outputs or ())


def header(model: str, version: str, inputs, outputs=()) -> bytes:
    """A ModelInferRequest without parameters, ``id`` and raw contents, as protobuf writes it
    (model_name 1, model_version 2, inputs 5 {name 1, datatype 2, shape 3 packed}, outputs 6 {name 1}):
    ``inputs`` as (name, datatype, shape), ``outputs`` as names. ``wire_request`` completes it."""
    out = [delimited(1, model.encode())] if model else []
    if version:
        out.append(delimited(2, version.encode()))
    for name, datatype, shape in inputs:
        dims = b"".join(varint(int(d) & 0xFFFFFFFFFFFFFFFF) for d in shape)  # int64: negatives as 10 bytes
        body = delimited(1, name.encode()) + delimited(2, datatype.encode()) + (delimited(3, dims) if dims else b"")
        out.append(delimited(5, body))
    for name in outputs:
        out.append(delimited(6, delimited(1, name.encode())))
    return b"".join(out)


def wire_request(head: bytes, request_id: str, arrays, tail: bytes = b"") -> bytes:
    """The ModelInferRequest of ``header(...)`` with ``id`` and each array (already of its input's
    numpy type) as a raw contents entry, then ``tail`` (entries written once: ``raw_entry``): what
    ``serialize_request`` writes for the same request, the contents copied once."""
    pieces = [head, delimited(3, request_id.encode()) if request_id else b""]
    for arr in arrays:
        raw = contents(arr)
        pieces += (RAW_INPUT_TAG, varint(raw.nbytes if type(raw) is memoryview else len(raw)), raw)
    pieces.append(tail)
    return b"".join(pieces)


class Planned:
    """A ModelInfer request planned once per shape: ``head`` (``header(...)``), this request's
    ``arrays`` (each already of its input's numpy type) and ``tail`` (entries written once:
    ``raw_entry``). The byte road (``Upstream.infer_bytes``) writes it with the call's request id,
    as ``infer`` stamps a neutral request's (``write``: ``wire_request``)."""

    __slots__ = ("head", "arrays", "tail")

    def __init__(self, head: bytes, arrays, tail: bytes = b""):
        self.head, self.arrays, self.tail = head, arrays, tail

    def write(self, request_id: str) -> bytes:
        return wire_request(self.head, request_id, self.arrays, self.tail)


def raw_entry(t: Tensor) -> bytes:
    """The ``raw_input_contents`` entry ``serialize_request`` writes for ``t`` (tag, length, contents)."""
    parts = _raw_parts(t)
    data = b"".join(parts)
    return RAW_INPUT_TAG + varint(len(data)) + data


_headers = Plans(4096)  # per model, version, inputs' names, dtypes and shapes, outputs


def _cached_header(req: InferRequest) -> bytes:
    key = (req.model, req.version, tuple([(t.name, t.datatype, t.data.shape) for t in req.inputs]),
           tuple(req.outputs) if req.outputs else ())
    hit = _headers.get(key)
    return hit if hit is not None else _headers.keep(key, _header(req))


_ID_FIELD = b"\x1a"  # ModelInferRequest.id: field 3, length-delimited
_around_id = Plans(4096)  # (model, version, inputs, outputs) -> (model and version, inputs and outputs)


def around_id(model: str, version: str, inputs: tuple, outputs: tuple) -> tuple[bytes, bytes]:
    """A ModelInferRequest without ``id``, parameters and raw contents, as protobuf writes it, cut
    where its ``id`` goes: (model name and version, inputs and outputs); ``inputs`` as (name,
    datatype, shape), ``outputs`` as names. ``with_id`` completes it. ValueError or
    UnicodeEncodeError: a name protobuf refuses."""
    key = (model, version, inputs, outputs)
    hit = _around_id.get(key)
    if hit is None:
        msg = service_pb2.ModelInferRequest()
        for name, datatype, shape in inputs:
            msg.inputs.add(name=name, datatype=datatype, shape=shape)
        for name in outputs:
            msg.outputs.add(name=name)
        hit = _around_id.keep(key, (service_pb2.ModelInferRequest(model_name=model, model_version=version)
                                    .SerializeToString(), msg.SerializeToString()))
    return hit


def with_id(head: bytes, request_id: bytes, tail: bytes, raws) -> bytes:
    """``around_id``'s halves with the ``id`` (UTF-8; empty: none) between them and each raw as a
    raw contents entry after them: what protobuf writes for the message, then its raws appended."""
    pieces = [head, _ID_FIELD, varint(len(request_id)), request_id, tail] if request_id else [head, tail]
    for raw in raws:
        pieces += (RAW_INPUT_TAG, varint(len(raw)), raw)
    return b"".join(pieces)


def _placed(parts: list, size: int, arena, leases: list | None) -> int | None:
    """The offset of an input's bytes placed in the ``arena`` (gateway/upstream/shm.py), or None:
    no arena, smaller than its ``min_bytes``, or no room (the input goes on the wire)."""
    if arena is None or size < arena.min_bytes:
        return None
    return arena.place(parts, size, leases)


def _name_region(params, arena, offset: int, size: int) -> None:
    """An input's parameters naming its bytes in the region (Triton's shared-memory extension)."""
    set_params(params, {"shared_memory_region": arena.name, "shared_memory_offset": offset,
                        "shared_memory_byte_size": size})


def serialize_request(req: InferRequest, arena=None, leases: list | None = None) -> bytes:
    """``encode_request(req)`` as wire bytes, with every tensor's data copied exactly once.

    With an ``arena`` (gateway/upstream/shm.py), each input of at least ``arena.min_bytes`` that
    finds room in it is copied there instead, and named by its shared-memory parameters; its
    slice is appended to ``leases`` for the caller to give back once the call is over.

    The fields but the raw contents are written first: for a request without parameters (every
    TF Serving and GRPS predict), from a header written by hand once per model, version, inputs'
    names, dtypes and shapes, and outputs, then the ``id``; else through a protobuf message. Each
    ``raw_input_contents`` entry follows as its own field (protobuf lets a repeated field's entries
    follow the other fields on the wire), so large tensors are not copied into the message and out
    again. Parsed, it is ``encode_request(req)`` (tests/unit/test_upstream_codec.py).
    """
    pieces: list = [b""]
    plain = not req.parameters
    shared: dict[int, tuple[int, int]] = {}  # input index: (offset, size) in the arena
    for i, t in enumerate(req.inputs):
        if t.parameters:
            plain = False
        parts = _raw_parts(t)
        size = len(parts[0]) if len(parts) == 1 and type(parts[0]) is bytes else part_size(parts)
        offset = _placed(parts, size, arena, leases)
        if offset is not None:  # Triton reads it from the region: no raw contents entry
            shared[i] = (offset, size)
            plain = False
            continue
        pieces += (RAW_INPUT_TAG, varint(size), *parts)
    if plain:
        head = _cached_header(req)
        pieces[0] = head + delimited(3, req.id.encode()) if req.id else head
        return b"".join(pieces)
    msg = service_pb2.ModelInferRequest(model_name=req.model, model_version=req.version, id=req.id)
    for i, t in enumerate(req.inputs):
        inp = msg.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        if t.parameters:
            set_params(inp.parameters, t.parameters)
        if i in shared:
            _name_region(inp.parameters, arena, *shared[i])
    for name in req.outputs or ():
        msg.outputs.add(name=name)
    if req.parameters:
        set_params(msg.parameters, req.parameters)
    pieces[0] = msg.SerializeToString()
    return b"".join(pieces)


def serialize_message(msg: service_pb2.ModelInferRequest, raws: list, arena=None, leases: list | None = None) -> bytes:
    """``msg`` (no raw contents of its own) and input i's bytes ``raws[i]`` as ModelInfer wire bytes,
    each input of at least ``arena.min_bytes`` that finds room in the ``arena`` (gateway/upstream/shm.py)
    placed there instead and named by its shared-memory parameters, its slice appended to ``leases``
    (given back by the caller once the call is over). A view of an HTTP body read into the region
    (``Arena.body``) is not copied again. What ``serialize_request`` does for a neutral request, for a
    caller holding the message already (V2 REST); without an arena, ``msg`` then every raw appended."""
    pieces: list = [b""]
    shared: dict[int, tuple[int, int]] = {}
    for i, raw in enumerate(raws):
        size = nbytes(raw)
        offset = _placed([raw], size, arena, leases)
        if offset is not None:  # Triton reads it from the region: no raw contents entry
            shared[i] = (offset, size)
            continue
        pieces += (RAW_INPUT_TAG, varint(size), raw)
    if shared:
        named = service_pb2.ModelInferRequest()
        named.CopyFrom(msg)  # the caller's message unchanged: it may be sent again over the wire
        for i, (offset, size) in shared.items():
            _name_region(named.inputs[i].parameters, arena, offset, size)
        msg = named
    pieces[0] = msg.SerializeToString()
    return b"".join(pieces)


def encode_request(req: InferRequest, *, stream: bool = False) -> service_pb2.ModelInferRequest:
    msg = service_pb2.ModelInferRequest(model_name=req.model, model_version=req.version, id=req.id)
    for t in req.inputs:
        inp = msg.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        if t.parameters:
            set_params(inp.parameters, t.parameters)
        msg.raw_input_contents.append(_raw(t))
    for name in req.outputs or ():
        msg.outputs.add(name=name)
    if req.parameters:
        set_params(msg.parameters, req.parameters)
    if stream:
        msg.parameters[ENABLE_EMPTY_FINAL].bool_param = True
    return msg


_TYPED_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _decode_output(out, raw: bytes | None, views: bool = False) -> Tensor:
    datatype = out.datatype
    params = get_params(out.parameters) if out.parameters else {}
    shape = tuple(out.shape[:])  # a repeated field sliced to a list: a third of iterating it (upb)
    if raw is not None:
        numeric = RAW_NUMPY.get(datatype)
        if numeric is not None:  # the common case: a view over the answer's bytes
            return Tensor(out.name, np.frombuffer(raw, dtype=numeric).reshape(shape), datatype, params)
    row = datatypes.by_v2(datatype)
    if raw is not None:
        data = datatypes.decode_bytes(raw, shape, views)  # (a fixed-size type took the branch above)
    else:
        field = _TYPED_FIELD.get(datatype)
        if field is None:
            raise GatewayError(ErrorKind.UPSTREAM_FAILED, f"output '{out.name}' has no data")
        values = getattr(out.contents, field)
        data = (
            datatypes.to_bytes_array(list(values)) if row.is_bytes else np.array(values, dtype=row.numpy)
        ).reshape(shape)
    return Tensor(out.name, data, datatype, params)


def numeric_outputs(msg: service_pb2.ModelInferResponse, raws, wanted) -> list[np.ndarray] | None:
    """The answer's outputs as arrays over its raw contents when they are exactly ``wanted``
    ((name, V2 datatype, numpy dtype) of fixed-size types, in order, each with its raw contents);
    else None, and ``decode_response`` decodes it (or says what is wrong with it). Each array is
    ``decode_response``'s for that output."""
    outs = msg.outputs
    if raws is None:
        raws = msg.raw_output_contents
    if len(outs) != len(wanted) or len(raws) < len(outs):
        return None
    arrays = []
    try:
        for i, (name, datatype, dtype) in enumerate(wanted):  # indexed: see decode_response
            out = outs[i]
            if out.name != name or out.datatype != datatype:
                return None
            arrays.append(np.frombuffer(raws[i], dtype=dtype).reshape(out.shape[:]))
    except ValueError:  # contents and shape disagree: decode_response raises it
        return None
    return arrays


_ID_TAG = service_pb2.ModelInferResponse.DESCRIPTOR.fields_by_name["id"].number << 3 | 2


class AnswerForm:
    """The form of one answer of fixed-size numeric outputs, learned from its bytes: everything but
    its ``id`` and its raw contents (model name and version, the outputs' names, types, shapes and
    parameters, the answer's parameters), and each raw entry's size, numpy type and shape.

    ``read(data)`` gives the arrays of an answer of exactly that form (the bytes around ``id`` and
    the raw contents the same, the entries the same sizes): ``decode_response``'s arrays for it,
    without parsing the message (a plan's answers, which are one form request after request);
    any other answer is None, and the caller decodes it as before. tests/unit/test_upstream_codec.py
    holds the two to each other."""

    __slots__ = ("prefix", "middle", "entries", "version", "rest")

    def __init__(self, prefix: bytes, middle: bytes, entries: tuple, version: str):
        self.prefix = prefix  # the fields before ``id`` (or before where it would be: name and version)
        self.middle = middle  # the fields between ``id`` and the first raw entry
        self.entries = entries  # per raw entry: (its tag and length, its size, numpy type, shape or None: 1-D)
        self.version = version  # the answer's model_version
        self.rest = len(middle) + sum(len(head) + size for head, size, _, _ in entries)  # bytes after the id

    @classmethod
    def learn(cls, data: bytes, arrays: list[np.ndarray], version: str) -> AnswerForm | None:
        """The form of ``data``, whose raw entries ``arrays`` are (as ``numeric_outputs`` or
        ``decode_response`` read them), else None: an answer laid out otherwise (a field after the
        raw contents, several ids, an id after them, not one raw entry per array of its size)."""
        try:
            top = fields(data)
        except DecodeError:
            return None
        ids = [i for i, f in enumerate(top) if f[0] == _ID_TAG]
        raws = [i for i, f in enumerate(top) if f[0] == RAW_OUTPUT_TAG]
        first = raws[0] if raws else len(top)
        # where the id is, or would be (protobuf writes fields in number order: name, version, id, ...)
        cut = next((i for i, f in enumerate(top) if f[0] >> 3 >= _ID_TAG >> 3), len(top))
        if ids not in ([], [cut]) or raws != list(range(first, len(top))) or len(raws) != len(arrays):
            return None
        start = top[first][1] if raws else len(data)
        at = top[cut][1] if cut < len(top) else len(data)
        prefix = data[:at]
        middle = data[top[cut][3] if ids else at:start]
        entries = []
        for i, arr in zip(raws, arrays, strict=True):
            _, begin, payload, end = top[i]
            if end - payload != arr.nbytes:
                return None
            # a 1-D output is read as frombuffer gives it (its reshape cost a third of the read)
            entries.append((bytes(data[begin:payload]), arr.nbytes, arr.dtype, arr.shape if arr.ndim != 1 else None))
        return cls(bytes(prefix), bytes(middle), tuple(entries), version)

    def read(self, data: bytes) -> list[np.ndarray] | None:
        if not data.startswith(self.prefix):
            return None
        pos = len(self.prefix)
        if pos < len(data) and data[pos] == _ID_TAG:
            try:
                n, pos = read_varint(data, pos + 1)
                str(data[pos:pos + n], "utf-8")  # a string field: protobuf refuses an answer whose id is not UTF-8
            except (DecodeError, UnicodeDecodeError):
                return None
            pos += n
        if len(data) - pos != self.rest or not data.startswith(self.middle, pos):
            return None
        pos += len(self.middle)
        view = memoryview(data) if len(data) >= SPLIT_MIN else data  # as parse_response: views of a large one
        arrays = []
        for head, size, dtype, shape in self.entries:
            if not data.startswith(head, pos):
                return None
            pos += len(head)
            arr = np.frombuffer(view[pos:pos + size], dtype)
            arrays.append(arr if shape is None else arr.reshape(shape))
            pos += size
        return arrays


def decode_response(msg: service_pb2.ModelInferResponse, raws=None, views: bool = False) -> InferResponse:
    """``raws``: the raw contents as ``parse_response`` cut them out of the wire (else the message's).
    ``views`` (with ``raws``): BYTES elements as memoryviews of those raw contents, not copied into
    ``bytes``, for a caller that writes them out as they are (GRPS's octet-stream answer)."""
    views = views and raws is not None
    if raws is None:
        raws = msg.raw_output_contents
    n = len(raws)
    outs = msg.outputs  # indexed, not iterated: iterating a repeated message field costs more (upb)
    outputs = [_decode_output(outs[i], raws[i] if i < n else None, views) for i in range(len(outs))]
    if msg.parameters:
        params = get_params(msg.parameters)
        final = bool(params.pop(FINAL_PARAM, True))
    else:
        params, final = {}, True
    return InferResponse(msg.model_name, msg.model_version, outputs, params, msg.id, final)


RAW_OUTPUT_TAG = service_pb2.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number << 3 | 2
SPLIT_MIN = 1 << 16  # smaller answers are parsed by protobuf as they are (faster than the scan below)


def parse_response(data: bytes) -> tuple[service_pb2.ModelInferResponse, list[memoryview] | None]:
    """ModelInfer's response deserializer: (the message, its raw contents or None: the message's).

    A large answer's ``raw_output_contents`` stay where gRPC put them: the top-level fields are
    scanned (a few per answer, not per byte), each raw entry is taken as a view of ``data``, and
    protobuf parses the other fields only, so the tensor bytes are not copied into protobuf's
    arena and out again (two copies of every output). ``decode_response(*parse_response(b))`` is
    ``decode_response(FromString(b))`` (tests/unit/test_upstream_codec.py).
    """
    if len(data) < SPLIT_MIN:
        return service_pb2.ModelInferResponse.FromString(data), None
    view = memoryview(data)
    kept: list = []
    raws: list[memoryview] = []
    start = 0
    for tag, begin, payload, end in fields(data):
        if tag == RAW_OUTPUT_TAG:
            kept.append(view[start:begin])
            raws.append(view[payload:end])
            start = end
    kept.append(view[start:])
    return service_pb2.ModelInferResponse.FromString(b"".join(kept)), raws


def parse_answer(data: bytes) -> tuple[service_pb2.ModelInferResponse, list[memoryview] | None]:
    """``parse_response`` of an answer taken as its bytes (``Upstream.infer_bytes``): a malformed one
    is UPSTREAM_FAILED, as when gRPC's own deserializer fails on it (an INTERNAL call)."""
    try:
        return parse_response(data)
    except DecodeError:
        raise GatewayError(ErrorKind.UPSTREAM_FAILED, "Exception deserializing response!") from None
