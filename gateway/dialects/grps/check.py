"""``gateway check`` for GRPS: every ``name-version`` (Triton's ready models, the configured
``models`` and ``default_model``) resolved by ``mapping.resolve`` and probed with the request and
response mapping requests use (``mapping.to_request`` / ``from_response`` on placeholder values;
nothing is sent to the model).

Errors: a configured name or the default model whose Triton model or version is missing; a
configured ``str_input``/``ndarray_input`` that a str_data/ndarray request cannot use (no such
input, wrong dtype, a shape that is not a single value, another required input left unfilled); a
``str_output``/``ndarray_output`` that is not a BYTES/FP32 output; a constant input whose value does
not fit. Warning: a constant input the model does not have (requests ignore it).
"""

from __future__ import annotations

import numpy as np

from gateway.core import datatypes
from gateway.core.errors import ErrorKind, GatewayError
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor
from gateway.ops.findings import CheckContext, ios

from . import codec, mapping
from .config import GrpsSettings


async def check(ctx: CheckContext) -> list:
    cfg: GrpsSettings = ctx.config
    names = list(cfg.models)
    if cfg.default_model not in names:
        names.append(cfg.default_model)
    for e in await ctx.upstream.repository_index():
        name = f"{e.name}-{e.version}"
        if e.state == "READY" and e.version and name not in names:
            names.append(name)
    out: list = []
    for name in names:
        out += await _name(ctx, cfg, name)
    return out


async def _name(ctx: CheckContext, cfg: GrpsSettings, name: str) -> list:
    target = mapping.resolve(name, cfg)
    configured = name in cfg.models
    default = name == cfg.default_model
    try:
        meta = await ctx.upstream.model_metadata(target.model, target.version)
    except GatewayError as e:
        if e.kind is not ErrorKind.NOT_FOUND:
            raise
        version = f" version '{target.version}'" if target.version else ""
        what = "default_model" if default and not configured else "configured name"
        return [ctx.error(name, f"{what} maps to Triton model '{target.model}'{version}, which Triton does not "
                                f"serve: requests get 'Not found model: {name}'")]
    out: list = []
    payloads = ["gtensors", "gmap"]
    str_ok, str_why = _probe(meta, target, cfg, codec.GrpsMessage(str_data="check"), None)
    if str_ok:
        payloads.insert(0, "str_data/bin_data")
    elif target.rule.str_input:
        out.append(ctx.error(name, f"str_input '{target.rule.str_input}': str_data requests fail: {str_why}"))
    nd_ok, nd_why = _probe_ndarray(meta, target, cfg)
    nd_spec = next((s for s in meta.inputs if s.name == target.rule.ndarray_input), None)
    if nd_spec is not None and nd_spec.datatype != "FP32":  # the mapping sends FP32 whatever the input
        nd_ok, nd_why = False, ""
        out.append(ctx.error(name, f"ndarray_input '{nd_spec.name}' is {nd_spec.datatype}: ndarray requests send "
                                   "FP32 and Triton refuses them"))
    if nd_ok:
        payloads.insert(-2, "ndarray")
    elif nd_why and target.rule.ndarray_input:
        out.append(ctx.error(name, f"ndarray_input '{target.rule.ndarray_input}': ndarray requests fail: {nd_why}"))
    out += _outputs(ctx, name, meta, target.rule)
    out += _constants(ctx, name, meta, target.rule)
    tags = [t for t, on in (("default_model", default), ("configured", configured)) if on]
    detail = f"payloads: {', '.join(payloads)}" + (f" ({', '.join(tags)})" if tags else "")
    if meta.decoupled:
        detail += "; decoupled: unary answers merged, ?streaming=true streams"
    out.insert(0, ctx.row(name, target.model, target.version, ios(meta.inputs), ios(meta.outputs), detail))
    return out


def _probe(meta: ModelMetadata, target: mapping.Target, cfg: GrpsSettings, msg, ndarray) -> tuple[bool, str]:
    try:
        mapping.to_request(msg, ndarray, meta, target, cfg, streaming=False)
    except GatewayError as e:
        return False, e.message
    return True, ""


def _probe_ndarray(meta: ModelMetadata, target: mapping.Target, cfg: GrpsSettings) -> tuple[bool, str]:
    try:
        spec = mapping._input_of(meta, target.rule.ndarray_input, "FP32", "ndarray")
    except GatewayError as e:
        return False, e.message
    arr = np.zeros([max(d, 1) for d in spec.shape], dtype=np.float32)
    return _probe(meta, target, cfg, codec.GrpsMessage(), arr)


def _placeholder(meta: ModelMetadata) -> InferResponse:
    """A response with one placeholder value per output, named and typed as the model's."""
    outs = []
    for s in meta.outputs:
        shape = [max(d, 1) for d in s.shape] or [1]
        row = datatypes.by_v2(s.datatype)
        data = np.full(shape, b"x", dtype=object) if row.is_bytes else np.zeros(shape, dtype=row.numpy)
        outs.append(Tensor(s.name, data, s.datatype))
    return InferResponse(meta.name, "1", outs)


def _outputs(ctx: CheckContext, name: str, meta: ModelMetadata, rule) -> list:
    out = []
    if rule.str_output:
        try:
            msg, raw = mapping.from_response(_placeholder(meta), "str_data", meta, rule)
            answered = msg.WhichOneof("data_oneof") == "str_data"
        except GatewayError:
            answered = False
        if not answered:
            have = mapping.describe(meta.outputs)
            out.append(ctx.error(name, f"str_output '{rule.str_output}' is not a BYTES output of model '{meta.name}' "
                                       f"(it has: {have}); str_data answers fall back to gtensors"))
    if rule.ndarray_output:
        try:
            mapping.from_response(_placeholder(meta), "ndarray", meta, rule, return_ndarray=True)
        except GatewayError as e:
            out.append(ctx.error(name, f"ndarray_output '{rule.ndarray_output}': return-ndarray answers fail: "
                                       f"{e.message} (outputs: {mapping.describe(meta.outputs)})"))
    return out


def _constants(ctx: CheckContext, name: str, meta: ModelMetadata, rule) -> list:
    out = []
    for key, value in rule.inputs.items():
        try:
            spec = meta.input(key)
        except KeyError:
            out.append(ctx.warning(name, f"constant input '{key}' is ignored: model '{meta.name}' has no such input "
                                         f"(it expects: {mapping.describe(meta.inputs)})"))
            continue
        try:
            mapping._single(spec, value, meta)
        except GatewayError as e:
            out.append(ctx.error(name, f"constant input '{key}': {e.message}"))
    return out
