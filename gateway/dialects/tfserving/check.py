"""``gateway check`` for TF Serving: every model name, version label and signature, resolved by
the Servables that requests use (``mapping``), against Triton.

Errors: a configured model whose Triton model is missing or has no ready version, a version label
pointing at a version Triton does not serve, a signature naming a Triton model, input or output
that does not exist, a classify ``classes`` output that is not BYTES, a feature whose dtype a
tf.Example cannot fill. Warning: tensors TF Serving's REST JSON cannot carry (gRPC can).
"""

from __future__ import annotations

from gateway.core import datatypes
from gateway.core.errors import ErrorKind, GatewayError
from gateway.ops.findings import CheckContext, ios

from . import codec, examples
from .config import ModelConf, TFServingConfig
from .mapping import ServableRef, Servables, Signature


async def check(ctx: CheckContext) -> list:
    conf: TFServingConfig = ctx.config
    names = list(conf.models)
    if conf.expose_all_models:
        ready = sorted({e.name for e in await ctx.upstream.repository_index() if e.state == "READY"})
        names += [n for n in ready if n not in conf.models]
    out: list = []
    for name in names:
        out += await _model(ctx, Servables(conf, ctx.upstream), name)
    return out


async def _model(ctx: CheckContext, servables: Servables, name: str) -> list:
    model = await servables.model(name)
    if model is None:
        return []
    latest = await servables.latest(model)
    if latest is None:
        entries = await servables.index(model.triton)
        if not entries:
            return [ctx.error(name, f"Triton has no model '{model.triton}'")]
        states = ", ".join(f"{e.version or '?'} {e.state or 'UNKNOWN'}" for e in entries)
        return [ctx.error(name, f"Triton model '{model.triton}' has no ready version ({states})")]
    out: list = []
    ready = [e.version for e in await servables.index(model.triton) if e.state == "READY"]
    for label, version in model.version_labels.items():
        try:
            await servables.version(ServableRef(name, label=label), model)
        except GatewayError:
            out.append(ctx.error(name, f"version label '{label}' -> version {version}, which Triton model "
                                       f"'{model.triton}' does not serve (ready: {', '.join(ready)})"))
    labels = " ".join(f"{k}={v}" for k, v in model.version_labels.items())
    for sname, sig in (await _signatures(ctx, servables.conf, model, name, out)).items():
        version = str(latest) if sig.own else ""
        detail = f"{sname} [{sig.method}]" + (f" labels: {labels}" if labels else "")
        out.append(ctx.row(name, sig.triton, version, ios(sig.inputs, sig.client_dtype),
                           ios(sig.outputs, sig.client_dtype), detail))
        out += _types(ctx, name, sname, sig, configured=sname in model.signatures)
    return out


async def _signatures(ctx: CheckContext, conf: TFServingConfig, model: ModelConf, name: str,
                      out: list) -> dict[str, Signature]:
    """The signatures requests naming no version get (Servables.signatures); when one fails, each
    signature is realised alone so that every broken one is named."""
    try:
        return dict(await Servables(conf, ctx.upstream).signatures(model, None))
    except GatewayError:
        pass
    parts = {"(derived)": model.model_copy(update={"signatures": {}})} if model.derived else {}
    parts.update({s: model.model_copy(update={"signatures": {s: sc}, "derived": False})
                  for s, sc in model.signatures.items()})
    sigs: dict[str, Signature] = {}
    whole = f"every request to '{name}' fails meanwhile: its signatures are resolved together"
    for sname, part in parts.items():
        try:
            sigs.update(await Servables(conf, ctx.upstream).signatures(part, None))
        except GatewayError as e:
            sc = model.signatures.get(sname)
            sigs.pop(sname, None)  # not the derived one of the same name: requests get the configured one
            if e.kind is ErrorKind.NOT_FOUND and sc is not None and sc.triton:
                out.append(ctx.error(name, f"signature '{sname}' names Triton model '{sc.triton}', which Triton "
                                           f"does not have ({whole})"))
            else:
                out.append(ctx.error(name, f"signature '{sname}': {e.message} ({whole})"))
    return sigs


def _types(ctx: CheckContext, name: str, sname: str, sig: Signature, configured: bool) -> list:
    out = []
    tensors = [*sig.inputs, *sig.outputs]
    no_json = sorted({f"{s.name} {sig.client_dtype(s)}" for _, s in tensors
                      if sig.client_dtype(s) not in codec._FROM_JSON})
    if no_json and sig.method == "predict":
        out.append(ctx.warning(name, f"signature '{sname}': REST cannot carry {', '.join(no_json)} (TF Serving's "
                                     "JSON has no such type: 501); gRPC can"
                                     + (", or set half_as_float: true" if any(" FP16" in t or " BF16" in t
                                                                              for t in no_json) else "")))
    if sig.method in ("classify", "regress"):
        for feature, spec in sig.inputs:
            if datatypes.by_v2(spec.datatype).numpy.kind not in examples._ACCEPTS:
                out.append(ctx.error(name, f"signature '{sname}': feature '{feature}' -> input '{spec.name}' is "
                                           f"{spec.datatype}, which no tf.Example feature can fill"))
    if sig.method == "regress" and not _one_per_example(sig.outputs[0][1].shape):
        spec = sig.outputs[0][1]
        # examples.regress_values refuses any other shape; a derived signature only warns (not configured)
        level = ctx.error if configured else ctx.warning
        out.append(level(name, f"signature '{sname}': regress output '{spec.name}' has shape {list(spec.shape)}; "
                               "Regress needs one value per example ([batch] or [batch, 1])"))
    if sig.method == "classify" and len(sig.outputs) > 1 and sig.outputs[1][1].datatype != "BYTES":
        spec = sig.outputs[1][1]
        out.append(ctx.error(name, f"signature '{sname}': classes output '{spec.name}' is {spec.datatype}, "
                                   "not BYTES (class labels)"))
    return out


def _one_per_example(shape: tuple[int, ...]) -> bool:
    return len(shape) <= 1 or len(shape) == 2 and shape[1] in (1, -1)
