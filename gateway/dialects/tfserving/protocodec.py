"""TF Serving protobufs <-> neutral values (pure functions): TensorProto, Example, ModelSpec,
SignatureDefMap, GetModelStatusResponse.

TensorProto in: ``tensor_content`` (np.frombuffer, zero copy) or the typed ``*_val`` field of its
dtype; fewer typed values than the shape holds are filled with the last value, so one value is
broadcast to the shape as ``tf.make_tensor_proto(1.0, shape=[2, 3])`` sends it (TF's version-0 rule);
none at all means zeros. DT_HALF/DT_BFLOAT16 come as 16-bit patterns in ``half_val``.
TensorProto out: the typed fields, as TF Serving answers by default (``tensor_content`` on request).
"""

from __future__ import annotations

import numpy as np

from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2
from gateway._proto.tensorflow.core.protobuf import error_codes_pb2, meta_graph_pb2
from gateway._proto.tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    predict_pb2,
)
from gateway.core import datatypes
from gateway.core.bounded import Plans, check_name, clip, dims_text, keep
from gateway.core.errors import invalid
from gateway.core.protowire import delimited
from gateway.core.tensors import TensorSpec, element_count, too_large

from .examples import Feature, Features
from .mapping import ServableRef, Signature

_FIELD = {
    "FP32": "float_val", "FP64": "double_val", "INT32": "int_val", "INT16": "int_val", "INT8": "int_val",
    "UINT8": "int_val", "UINT16": "int_val", "INT64": "int64_val", "UINT32": "uint32_val",
    "UINT64": "uint64_val", "BOOL": "bool_val", "BYTES": "string_val", "FP16": "half_val", "BF16": "half_val",
}
# the types whose typed field holds their values as they are (no bytes, no 16-bit patterns, no
# narrowing of int_val): ``np.fromiter`` of the field is the array
_DIRECT = frozenset(v2 for v2, f in _FIELD.items()
                    if v2 not in ("BYTES", "FP16", "BF16")
                    and not (f == "int_val" and datatypes.by_v2(v2).numpy.itemsize < 4))
MAX_KEPT = 1024  # model specs, tensor layouts and answer parts kept, each
_specs: dict[bytes, ServableRef] = {}
_layouts = Plans(MAX_KEPT)  # (dtype, shape bytes) -> (row, shape, size, direct)


def spec_from_proto(ms: model_pb2.ModelSpec) -> ServableRef:
    """The ModelSpec as a ServableRef, its names checked (limits.max_name_chars). Clients send the
    same few specs again and again: one that passed is kept by its serialized bytes (at most
    MAX_KEPT), so a request costs one serialization and a lookup."""
    key = ms.SerializeToString()
    ref = _specs.get(key)
    return ref if ref is not None else keep(_specs, key, _spec_from_proto(ms), MAX_KEPT)


def _spec_from_proto(ms: model_pb2.ModelSpec) -> ServableRef:
    check_name(ms.name, "Model name")
    check_name(ms.signature_name, "Signature name")
    check_name(ms.version_label, "Version label")
    which = ms.WhichOneof("version_choice")
    version = ms.version.value if which == "version" else None
    label = ms.version_label if which == "version_label" else None  # "" set is a label (TF looks it up)
    return ServableRef(ms.name, version, label, ms.signature_name)


def model_spec(name: str, version: int | str | None, signature: str | None = None,
               into: model_pb2.ModelSpec | None = None) -> model_pb2.ModelSpec:
    """A ModelSpec, written into ``into`` (an empty one, e.g. a response's ``model_spec``) when given."""
    ms = into if into is not None else model_pb2.ModelSpec()
    ms.name = name
    if version not in (None, ""):
        ms.version.value = int(version)
    if signature is not None:
        ms.signature_name = signature
    return ms


def tensor_from_proto(tp: tensor_pb2.TensorProto, name: str) -> tuple[np.ndarray, str]:
    """One TensorProto as an array. Its shape and dtype are checked against limits.max_tensor_bytes
    before anything is allocated: TF's fill rule would expand an 18-byte proto declaring
    ``[268435456]`` floats with one ``float_val`` into 1 GiB (TF Serving answers a tensor it cannot
    build ``tensor parsing error: <alias>``, INVALID_ARGUMENT).

    What the dtype and the shape give (the type's row, the shape, its element count, checked) is
    kept by the dtype and the shape's serialized bytes (at most MAX_KEPT layouts), so a request of a
    layout seen before is its values read."""
    check_name(name, "Input alias")
    key = (tp.dtype, tp.tensor_shape.SerializeToString())
    layout = _layouts.get(key)
    if layout is None:
        layout = _layouts.keep(key, _layout(tp, name))  # a refusal raises, every time (never kept)
    row, shape, size, direct = layout
    if tp.tensor_content:
        shown = clip(name)
        if row.is_bytes:
            raise invalid(f"Input '{shown}': DT_STRING tensors cannot use tensor_content")
        if len(tp.tensor_content) % row.numpy.itemsize:
            raise invalid(f"tensor parsing error: {shown}")
        flat = np.frombuffer(tp.tensor_content, dtype=row.numpy)
        if flat.size != size:
            raise invalid(f"Input '{shown}': tensor_content holds {flat.size} values for shape {dims_text(shape)}")
        return flat.reshape(shape), row.v2
    return _typed(tp, row, shape, size, name, direct), row.v2


def _layout(tp: tensor_pb2.TensorProto, name: str) -> tuple[datatypes.DType, tuple[int, ...], int, bool]:
    """(the dtype's row, the shape, its element count, whether its typed field holds the values as
    they are), checked as TF Serving checks them."""
    try:
        row = datatypes.by_tf(tp.dtype)
    except KeyError:
        raise invalid(f"Input '{clip(name)}': unsupported tensor dtype {tp.dtype}") from None
    dims = tp.tensor_shape.dim  # indexed, not iterated: iterating a repeated message field is slow in upb
    shape = tuple(int(dims[i].size) for i in range(len(dims)))
    if any(d < 0 for d in shape):
        raise invalid(f"Input '{clip(name)}': shape {dims_text(shape)} has a negative dimension")
    size = element_count(shape, name)
    why = too_large(size, row, shape)
    if why is not None:
        raise invalid(f"tensor parsing error: {clip(name)}: {why}")
    return row, shape, size, row.v2 in _DIRECT


def _typed(tp, row, shape, size: int, name: str, direct: bool) -> np.ndarray:
    values = getattr(tp, _FIELD[row.v2])
    n = len(values)
    if direct and n == size:  # every value given, as it is: nothing to convert or fill
        return np.fromiter(values, row.numpy, n).reshape(shape)
    if n > size:
        raise invalid(f"Input '{clip(name)}': {n} values do not fit shape {dims_text(shape)}")
    if row.is_bytes:
        flat = np.empty(n, dtype=object)
        flat[:] = list(values)
    elif row.v2 in ("FP16", "BF16"):
        flat = np.asarray(values, dtype=np.int32).astype(np.uint16).view(row.numpy)
    elif _FIELD[row.v2] == "int_val" and row.numpy.itemsize < 4:  # int32 on the wire, cast as C++ casts (wraps)
        flat = np.fromiter(values, np.int32, n).astype(row.numpy)
    else:
        flat = np.fromiter(values, row.numpy, n)  # twice as fast as np.asarray over a repeated field
    if n < size:
        fill = flat[-1] if n else (b"" if row.is_bytes else row.numpy.type(0))
        flat = np.concatenate([flat, np.full(size - n, fill, dtype=flat.dtype)])
    return flat.reshape(shape)


def tensor_to_proto(arr: np.ndarray, v2: str, content: bool = False,
                    into: tensor_pb2.TensorProto | None = None) -> tensor_pb2.TensorProto:
    """``arr`` as a TensorProto: typed ``*_val`` values, or ``tensor_content`` when ``content``;
    written into ``into`` (an empty TensorProto, e.g. a response map's entry) when given."""
    row = datatypes.by_v2(v2)
    tp = into if into is not None else tensor_pb2.TensorProto()
    tp.dtype = row.tf
    shape_proto(arr.shape, into=tp.tensor_shape)
    if content and not row.is_bytes:
        tp.tensor_content = np.ascontiguousarray(arr, dtype=row.numpy).tobytes()
        return tp
    flat = arr.reshape(-1)
    field = getattr(tp, _FIELD[v2])
    if row.is_bytes:
        field.extend(flat.tolist())
    elif v2 in ("FP16", "BF16"):
        field.extend(flat.view(np.uint16).astype(np.int32).tolist())
    else:
        field.extend(flat.tolist())
    return tp


def shape_proto(shape, unknown_rank: bool = False,
                into: tensor_shape_pb2.TensorShapeProto | None = None) -> tensor_shape_pb2.TensorShapeProto:
    """``shape`` as a TensorShapeProto, written into ``into`` (an empty one, e.g. a TensorProto's
    ``tensor_shape``, then present even for a scalar) when given."""
    sp = into if into is not None else tensor_shape_pb2.TensorShapeProto()
    sp.unknown_rank = unknown_rank  # sets the field, so the message is present in its parent
    dims = sp.dim
    for d in shape:
        dims.add(size=int(d))
    return sp


# -- a predict's answer as bytes ---------------------------------------------------------------
_TENSOR_FIELD = tensor_pb2.TensorProto.DESCRIPTOR.fields_by_name
# the V2 types whose values a TensorProto holds packed: (its field, the little-endian numpy type);
# predictform.py reads requests by the same table
PACKED = {"FP32": (_TENSOR_FIELD["float_val"].number, np.dtype("<f4")),
          "FP64": (_TENSOR_FIELD["double_val"].number, np.dtype("<f8"))}
_answer_parts = Plans(MAX_KEPT)  # by alias, type, shape and spec


def predict_answer(alias: str, arr: np.ndarray, v2: str, spec: tuple[str, int | str | None, str]) -> bytes | None:
    """The PredictResponse of one FP32 or FP64 output ``arr`` named ``alias``, under the model spec
    ``spec`` (``model_spec``'s name, version, signature), as the bytes protobuf writes for the message
    Predict builds (``tensor_to_proto`` into ``outputs[alias]``, ``model_spec`` into ``model_spec``),
    without building it: the parts that depend on the alias, the shape and the spec are serialized by
    protobuf once and kept, and each answer only adds its values, packed as protobuf packs them.
    None for any other output (the caller builds the message). The values are the array's bytes:
    a signalling NaN stays one, as in TF Serving's own float_val copy (a Python float would quiet it)."""
    packed = PACKED.get(v2)
    if packed is None or not arr.size:
        return None
    key = (alias, v2, arr.shape, spec)
    parts = _answer_parts.get(key)
    if parts is None:
        tp = tensor_pb2.TensorProto()
        tp.dtype = datatypes.by_v2(v2).tf
        shape_proto(arr.shape, into=tp.tensor_shape)
        resp = predict_pb2.PredictResponse()
        model_spec(*spec, into=resp.model_spec)
        parts = _answer_parts.keep(key, (delimited(1, alias.encode()), tp.SerializeToString(),
                                         resp.SerializeToString()))
    key_field, head, spec_field = parts
    field, little = packed
    tensor = head + delimited(field, arr.astype(little, copy=False).tobytes())
    # outputs (field 1: a map entry, key then value), then model_spec (field 2)
    return delimited(1, key_field + delimited(2, tensor)) + spec_field


# -- examples ----------------------------------------------------------------------------------
def _feature(f) -> Feature | None:
    kind = f.WhichOneof("kind")
    if kind == "float_list":
        return Feature("float", list(f.float_list.value))
    if kind == "int64_list":
        return Feature("int64", list(f.int64_list.value))
    if kind == "bytes_list":
        return Feature("bytes", list(f.bytes_list.value))
    return None


def _features(example) -> Features:
    out = {}
    for name, f in example.features.feature.items():
        feat = _feature(f)
        if feat is not None:
            out[name] = feat
    return out


def examples_from_input(inp) -> tuple[list[Features], Features]:
    kind = inp.WhichOneof("kind")
    if kind == "example_list":
        return [_features(e) for e in inp.example_list.examples], {}
    if kind == "example_list_with_context":
        lst = inp.example_list_with_context
        return [_features(e) for e in lst.examples], _features(lst.context)
    raise invalid("Input is empty.")


# -- metadata and status ----------------------------------------------------------------------
def _info(spec: TensorSpec, sig: Signature | None = None) -> meta_graph_pb2.TensorInfo:
    shape = shape_proto((), True) if sig is not None and sig.elementwise else shape_proto(spec.shape)
    v2 = sig.client_dtype(spec) if sig is not None else spec.datatype
    return meta_graph_pb2.TensorInfo(name=spec.name, dtype=datatypes.by_v2(v2).tf, tensor_shape=shape)


def signature_def(sig: Signature) -> meta_graph_pb2.SignatureDef:
    """An element-wise signature reports every tensor as TF reports a shape it does not know:
    ``{"dim": [], "unknown_rank": true}``."""
    sd = meta_graph_pb2.SignatureDef(method_name=sig.method_name)
    if sig.method == "predict":
        for alias, spec in sig.inputs:
            sd.inputs[alias].CopyFrom(_info(spec, sig))
    else:  # classify/regress take serialized tf.Examples, as TF's signatures declare
        sd.inputs["inputs"].CopyFrom(meta_graph_pb2.TensorInfo(
            name="tf_example:0", dtype=datatypes.by_v2("BYTES").tf, tensor_shape=shape_proto((), True)))
    for alias, spec in sig.outputs:
        sd.outputs[alias].CopyFrom(_info(spec, sig))
    return sd


def signature_def_map(sigs: dict[str, Signature]) -> get_model_metadata_pb2.SignatureDefMap:
    m = get_model_metadata_pb2.SignatureDefMap()
    for name, sig in sigs.items():
        m.signature_def[name].CopyFrom(signature_def(sig))
    return m


def status_response(rows) -> get_model_status_pb2.GetModelStatusResponse:
    resp = get_model_status_pb2.GetModelStatusResponse()
    for r in rows:
        mvs = resp.model_version_status.add(version=r.version)
        mvs.state = get_model_status_pb2.ModelVersionStatus.State.Value(r.state)
        mvs.status.error_code = error_codes_pb2.Code.Value(r.error_code)
        mvs.status.error_message = r.error_message
    return resp
