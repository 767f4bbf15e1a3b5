"""Mapping rules between GRPS payloads and one Triton model's tensors (pure functions).

    model selection   "name-version" → (Triton model, version); "" → the configured default model
    str_data/bin_data → the model's BYTES input (``str_input``, else its first BYTES input) and back
    ndarray           → its FP32 input (``ndarray_input``, else its first FP32 input) and back
    gtensors          → inputs by name, or by position when every tensor is unnamed
    gmap              → inputs named like the keys, typed like the map
    plus constant inputs (rule ``inputs``), ``max_tokens`` (default_max_tokens) and ``stream``.

Any mismatch is INVALID_ARGUMENT with a message that says what the model expects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gateway._proto import grps_pb2
from gateway.core.bounded import LIMITS, check_name
from gateway.core.errors import ErrorKind, invalid
from gateway.core.tensors import InferRequest, InferResponse, ModelMetadata, Tensor, TensorSpec

from . import codec, errors
from .config import GrpsSettings, ModelRule

# GRPS's proto: ``NDArrayData {}`` is a placeholder ("HTTP only"); the C++ server's converters then
# refuse a message without gtensors. The gateway answers as for any payload it cannot use: 400.
NDARRAY_OVER_GRPC = ("ndarray carries no data in a protobuf GrpsMessage (NDArrayData is empty; ndarray is "
                     "HTTP JSON only): send gtensors, str_data, bin_data or gmap.")


@dataclass(frozen=True, slots=True)
class Target:
    name: str  # as the client named it (or the default), e.g. "grps_echo-1"
    model: str  # Triton model
    version: str  # Triton version ("" = Triton's policy)
    rule: ModelRule


def resolve(name: str, cfg: GrpsSettings) -> Target:
    """``name-version`` (or a configured alias) → Triton model and version."""
    name = check_name(name, "Model name") or cfg.default_model  # HTTP and gRPC alike, before any lookup
    rule = cfg.models.get(name)
    if rule is not None and rule.triton_model:
        return Target(name, rule.triton_model, rule.triton_version, rule)
    base, sep, version = name.rpartition("-")
    model, version = (base, version) if sep and base and version.isdigit() else (name, "")
    return Target(name, model, version, rule or cfg.models.get(model) or _NO_RULE)


# GRPS's C++ texts for an answer ``?return-ndarray=true`` cannot write (grps_handler.cc, GenNDArrayFromGrpsMsg)
NDARRAY_NO_TENSORS = "No tensors in output. Cannot convert to ndarray."
NDARRAY_ONE = "NDArray only support one tensor"
NDARRAY_FLOAT32 = "NDArray only support float32"

def model_entry(name: str, cfg: GrpsSettings) -> tuple[str, str, Target] | None:
    """GRPS's inference.yml ``models[]`` entry called ``name`` → (name, version, its target); None
    when there is none. A configured ``<name>-<version>`` (the version starting with a digit, as
    ``1.0.0``) or bare ``<name>`` key is an entry of that name (the first such key); any other name is taken as a Triton model's (Triton's version
    policy), which the caller looks up. So ``your_model`` is an entry and ``your_model-1.0.0`` not."""
    if not name or len(name) > LIMITS.max_name_chars:
        return None
    for key in cfg.models:
        base, sep, version = key.rpartition("-")
        if not (sep and base and version[:1].isdigit()):
            base, version = key, ""
        if base == name:
            return name, version, resolve(key, cfg)
    return name, "", Target(name, name, "", cfg.models.get(name) or _NO_RULE)


_NO_RULE = ModelRule()  # frozen (settings.Strict): one instance serves every model without a rule


def describe(specs) -> str:
    return ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in specs) or "no inputs"


# -- request --------------------------------------------------------------------------------------
def to_request(
    msg: codec.GrpsMessage, ndarray: np.ndarray | None, meta: ModelMetadata, target: Target,
    cfg: GrpsSettings, streaming: bool, payload: bytes | None = None,
) -> InferRequest:
    kind = "ndarray" if ndarray is not None else msg.WhichOneof("data_oneof")
    if kind is None:
        raise invalid("Have no legal member in message (str_data, bin_data, gtensors, ndarray or gmap).")
    if kind in ("str_data", "bin_data"):
        spec = _input_of(meta, target.rule.str_input, "BYTES", "str_data/bin_data")
        if kind == "str_data":
            inputs = [_single(spec, msg.str_data.encode("utf-8"), meta)]
        elif payload is not None and spec.datatype == "BYTES":
            # an octet-stream body (bytes, or a memoryview: gateway/edge/httpbody.py) is the element, not copied
            inputs = [Tensor(spec.name, _one(payload).reshape(_shape_for(spec, meta)), "BYTES")]
        else:
            inputs = [_single(spec, msg.bin_data if payload is None else bytes(payload), meta)]
    elif kind == "ndarray":
        if ndarray is None:  # a protobuf message's NDArrayData is empty: only HTTP JSON carries an ndarray
            raise invalid(NDARRAY_OVER_GRPC)
        inputs = [_ndarray_input(meta, target.rule.ndarray_input, ndarray)]
    elif kind == "gtensors":
        inputs = _gtensor_inputs(meta, msg.gtensors.tensors)
    else:
        inputs = [_single(_named(meta, k), v, meta, dt) for k, (dt, v) in codec.gmap_values(msg.gmap).items()]
    _add_defaults(inputs, meta, target.rule, cfg, streaming)
    _check_required(inputs, meta)
    return InferRequest(model=target.model, version=target.version, inputs=inputs)


def _input_of(meta: ModelMetadata, configured: str, datatype: str, what: str) -> TensorSpec:
    if configured:
        return _named(meta, configured)
    candidates = [s for s in meta.inputs if s.datatype == datatype]
    required = [s for s in candidates if not s.optional]
    if not candidates:
        raise invalid(f"model '{meta.name}' has no {datatype} input for {what}; it expects: {describe(meta.inputs)}")
    return (required or candidates)[0]


def _named(meta: ModelMetadata, name: str) -> TensorSpec:
    try:
        return meta.input(name)
    except KeyError:
        raise invalid(f"model '{meta.name}' has no input '{name}'; it expects: {describe(meta.inputs)}") from None


def _shape_for(spec: TensorSpec, meta: ModelMetadata) -> list[int]:
    """The shape of a one-value tensor for ``spec``: every dimension 1 (metadata shapes include the
    batch dimension of batching models, as -1)."""
    rank = len(spec.shape)
    if any(d > 1 for d in spec.shape):
        raise invalid(f"input '{spec.name}' of model '{meta.name}' has shape {list(spec.shape)}, not a single value")
    return [1] * max(rank, 1)


def _one(value) -> np.ndarray:
    arr = np.empty(1, dtype=object)
    arr[0] = value
    return arr


def _single(spec: TensorSpec, value, meta: ModelMetadata, datatype: str | None = None) -> Tensor:
    if datatype is not None and datatype != spec.datatype:
        raise invalid(f"input '{spec.name}' of model '{meta.name}' is {spec.datatype}, not {datatype}")
    if spec.datatype == "BYTES" and not isinstance(value, bytes):
        value = str(value).encode("utf-8")
    try:
        return Tensor.from_flat(spec.name, spec.datatype, _shape_for(spec, meta), [value])
    except (TypeError, ValueError, OverflowError):
        raise invalid(f"input '{spec.name}' of model '{meta.name}' is {spec.datatype}; got {value!r}") from None


def _ndarray_input(meta: ModelMetadata, configured: str, arr: np.ndarray) -> Tensor:
    spec = _input_of(meta, configured, "FP32", "ndarray")
    rank = len(spec.shape)
    if arr.ndim != rank:
        raise invalid(
            f"model '{meta.name}' expects the ndarray as input '{spec.name}' of rank {rank} "
            f"{list(spec.shape)}; got shape {list(arr.shape)}"
        )
    return Tensor(spec.name, arr, "FP32")


def _gtensor_inputs(meta: ModelMetadata, generic) -> list[Tensor]:
    return _gtensors_checked(meta, [codec.tensor_from_generic(g) for g in generic])


def gtensors_request(tensors: list[Tensor], meta: ModelMetadata, target: Target, cfg: GrpsSettings) -> InferRequest:
    """``to_request`` of a unary gtensors request whose tensors are already decoded (gtensors.tensors):
    the same checks, defaults and errors."""
    inputs = _gtensors_checked(meta, tensors)
    _add_defaults(inputs, meta, target.rule, cfg, False)
    _check_required(inputs, meta)
    return InferRequest(model=target.model, version=target.version, inputs=inputs)


def _gtensors_checked(meta: ModelMetadata, tensors: list[Tensor]) -> list[Tensor]:
    if not tensors:
        raise invalid("gtensors holds no tensors")
    named = [bool(t.name) for t in tensors]
    if any(named) and not all(named):
        raise invalid("gtensors tensors should all have name or all have no name (fed by order).")
    if not all(named):
        if len(tensors) > len(meta.inputs):
            raise invalid(f"{len(tensors)} unnamed tensors; model '{meta.name}' expects: {describe(meta.inputs)}")
        for t, spec in zip(tensors, meta.inputs, strict=False):
            t.name = spec.name
    for t in tensors:
        spec = _named(meta, t.name)
        if spec.datatype != t.datatype:
            raise invalid(f"input '{t.name}' of model '{meta.name}' is {spec.datatype}, not {t.datatype}")
    return tensors


def _add_defaults(inputs: list[Tensor], meta: ModelMetadata, rule: ModelRule, cfg: GrpsSettings, streaming: bool):
    given = {t.name for t in inputs}
    extra = {"max_tokens": cfg.default_max_tokens, "stream": streaming, **rule.inputs}
    for name, value in extra.items():
        if name in given or not any(s.name == name for s in meta.inputs):
            continue
        inputs.append(_single(meta.input(name), value, meta))


def _check_required(inputs: list[Tensor], meta: ModelMetadata) -> None:
    given = {t.name for t in inputs}
    missing = [s.name for s in meta.inputs if not s.optional and s.name not in given]
    if missing:
        raise invalid(f"model '{meta.name}' needs input(s) {missing}; it expects: {describe(meta.inputs)}")


# -- response -------------------------------------------------------------------------------------
def from_response(
    resp: InferResponse, kind: str, meta: ModelMetadata, rule: ModelRule, return_ndarray: bool = False,
    raw: bool = False, bytes_map: str | None = None,
) -> tuple[codec.GrpsMessage, np.ndarray | bytes | memoryview | None]:
    """InferResponse → (GrpsMessage with status OK, the ndarray to answer or None); with ``raw``, a
    bin_data answer's bytes (or memoryview) are the second element and the message carries none. ``bytes_map``: the
    gmap a gmap request carried its strings in (``codec.request_bytes_map``), where BYTES outputs go."""
    outputs = ordered(resp.outputs, meta)
    msg = codec.ok()
    if kind in ("str_data", "bin_data"):
        text = _bytes_output(outputs, rule.str_output)
        if text is not None:
            if return_ndarray:  # the answer holds no tensors (GRPS clears str_data and bin_data)
                raise errors.ExecutorError(ErrorKind.UNIMPLEMENTED, NDARRAY_NO_TENSORS)
            if kind == "bin_data" and raw:
                return msg, text
            if kind == "bin_data":
                msg.bin_data = text
            else:
                msg.str_data = text.decode("utf-8", "replace")
            return msg, None
    if kind == "gmap":
        codec.gmap_from_tensors(outputs, msg.gmap, bytes_map)
        if return_ndarray:  # no tensors; GRPS clears str_data, bin_data and gtensors, and leaves gmap
            raise errors.ExecutorError(ErrorKind.UNIMPLEMENTED, NDARRAY_NO_TENSORS, msg)
        return msg, None
    if return_ndarray:
        return msg, _ndarray_output(outputs, rule.ndarray_output)
    msg.gtensors.SetInParent()
    for t in outputs:
        codec.tensor_to_generic(t, msg.gtensors.tensors.add())
    return msg, None


def ordered(outputs: list[Tensor], meta: ModelMetadata) -> list[Tensor]:
    """The model's metadata order, unknown names last (stable)."""
    rank = {s.name: i for i, s in enumerate(meta.outputs)}
    return sorted(outputs, key=lambda t: rank.get(t.name, len(rank)))


def _bytes_output(outputs: list[Tensor], configured: str) -> bytes | memoryview | None:
    """The BYTES output's elements, joined; one element as it is (bytes, or a memoryview when the
    answer was decoded with ``views``)."""
    for t in outputs:
        if (t.name == configured) if configured else t.datatype == "BYTES":
            if t.datatype != "BYTES":
                break
            flat = t.data.reshape(-1)
            return flat[0] if len(flat) == 1 else b"".join(flat)
    return None


def _ndarray_output(outputs: list[Tensor], configured: str) -> np.ndarray:
    """The one FP32 output a ``return-ndarray`` answer writes, refused as GRPS refuses it
    (``GenNDArrayFromGrpsMsg``): GRPS's answer holds the tensors its converter gave, here every
    output of the model, or the one named ``ndarray_output`` (the converter's choice)."""
    if configured:
        outputs = [t for t in outputs if t.name == configured]
    if len(outputs) != 1 or outputs[0].datatype != "FP32":
        for t in outputs:  # GRPS's converter gave GenericTensors: a type it cannot hold fails first
            codec.tensor_to_generic(t, grps_pb2.GenericTensor())
        text = NDARRAY_NO_TENSORS if not outputs else NDARRAY_ONE if len(outputs) > 1 else NDARRAY_FLOAT32
        raise errors.ExecutorError(ErrorKind.UNIMPLEMENTED, text)
    data = outputs[0].data
    if data.ndim and not data.size:
        raise errors.ExecutorError(ErrorKind.UNIMPLEMENTED, "NDArray flat float size <= 0")
    return data
