"""The data plane REST and gRPC share: resolve, bridge shapes, call Triton, map names back.

Handlers (``http.py``, ``grpc.py``) decode their wire into the neutral arguments here and encode
what comes back; everything TF-Serving-specific about *meaning* (signatures, versions, labels,
examples) lives here and in ``mapping``/``examples``, nothing about wire formats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gateway.context import GatewayContext
from gateway.core import datatypes
from gateway.core.bounded import DIMS, clip
from gateway.core.errors import invalid
from gateway.core.tensors import InferRequest, InferResponse, Tensor

from . import errors, examples, shapes
from .config import TFServingConfig
from .examples import Features
from .mapping import HALF_TYPES, ServableRef, Servables, Signature, Target

Outputs = dict[str, tuple[np.ndarray, str]]  # alias -> (array, V2 datatype)

# Triton repository-index state -> TF Serving ModelVersionStatus.State name
_STATES = {"READY": "AVAILABLE", "LOADING": "LOADING", "UNLOADING": "UNLOADING", "UNAVAILABLE": "END"}


@dataclass(frozen=True, slots=True)
class VersionStatus:
    version: int
    state: str  # AVAILABLE, LOADING, UNLOADING, END, UNKNOWN
    error_code: str  # tensorflow.error.Code name
    error_message: str


class Service:
    def __init__(self, ctx: GatewayContext, conf: TFServingConfig):
        self.ctx = ctx
        self.conf = conf
        self.servables = Servables(conf, ctx.upstream)
        self.errors = errors.Rendering()

    async def resolve(self, spec: ServableRef, *, grpc: bool = False, method: str | None = None) -> Target:
        return await self.servables.resolve(spec, grpc=grpc, method=method)

    async def _infer(self, req: InferRequest) -> InferResponse:
        return await self.ctx.upstream.infer(req)

    async def predict(self, target: Target, inputs: dict[str, np.ndarray], output_filter=()) -> tuple[str, Outputs]:
        sig = target.signature
        if sig.method != "predict":
            raise invalid(f"Expected prediction signature method_name to be tensorflow/serving/predict. "
                          f"Was: {sig.method_name}")
        _check_inputs(sig, inputs)
        outs = _filter(sig, output_filter)
        specs = dict(sig.inputs)
        tensors, added = [], []
        for alias, arr in inputs.items():
            spec = specs[alias]
            if sig.half_as_float and spec.datatype in HALF_TYPES:
                arr = arr.astype(datatypes.by_v2(spec.datatype).numpy)
            fitted, add = shapes.bridge(arr.reshape(-1) if sig.elementwise else arr, spec, sig.max_batch_size)
            tensors.append(Tensor(spec.name, fitted, spec.datatype))
            added.append(add)
        req = InferRequest(sig.triton, tensors, target.triton_version, [s.name for _, s in outs])
        resp = await self._infer(req)
        unbatch = bool(added) and all(added)
        like = next(iter(inputs.values())).shape if sig.elementwise and inputs else None
        result = {}
        for alias, spec in outs:
            t = resp.output(spec.name)
            data = shapes.unbatch(t.data) if unbatch else t.data
            data, v2 = (data.astype(np.float32), "FP32") if sig.half_as_float and t.datatype in HALF_TYPES \
                else (data, t.datatype)
            result[alias] = (shapes.restore(data, like) if like is not None else data, v2)
        return resp.version, result

    async def run_examples(self, target: Target, method: str, exs: list[Features], context: Features):
        """regress -> (version, float32 [N]); classify -> (version, (labels, scores [N, C]))."""
        sig = target.signature
        if sig.method != method:
            raise invalid(f"Expected {_noun(method)} signature method_name to be tensorflow/serving/{method}. "
                          f"Was: {sig.method_name}")
        if not exs:
            raise invalid("Input is empty.")
        arrays = examples.to_inputs(sig, exs, context)
        specs = {s.name: s for _, s in sig.inputs}
        tensors = [Tensor(n, shapes.bridge(a, specs[n], sig.max_batch_size)[0], specs[n].datatype)
                   for n, a in arrays.items()]
        outs = [s.name for _, s in sig.outputs]
        resp = await self._infer(InferRequest(sig.triton, tensors, target.triton_version, outs))
        n = len(exs)
        if method == "regress":
            return resp.version, examples.regress_values(resp.output(outs[0]).data, n)
        classes = resp.output(outs[1]).data if len(outs) > 1 else None
        return resp.version, examples.classify_results(resp.output(outs[0]).data, classes, sig.labels, n)

    async def metadata(self, spec: ServableRef) -> tuple[int | None, dict[str, Signature]]:
        conf = await self.servables.model(spec.name) if spec.name else None
        version = await self.servables.version(spec, conf)
        if version is None:
            version = await self.servables.latest(conf)
        return version, await self.servables.signatures(conf, version)

    async def status(self, spec: ServableRef) -> list[VersionStatus]:
        """All versions (a label is ignored, as TF Serving does), or the one asked for."""
        conf = await self.servables.model(spec.name)
        entries = await self.servables.index(conf.triton) if conf is not None else []
        rows = [_status(e) for e in entries if e.version.isdigit()]
        if not rows:
            raise errors.no_versions(spec.name)
        if spec.version is not None:
            rows = [r for r in rows if r.version == spec.version]
            if not rows:
                raise errors.no_version(spec.name, spec.version)
        return sorted(rows, key=lambda r: r.version)


def open(ctx: GatewayContext, conf: TFServingConfig) -> Service:
    """The dialect's per-worker state: one Service for the REST and the gRPC listener."""
    return Service(ctx, conf)


def _noun(method: str) -> str:
    return {"classify": "classification", "regress": "regression"}.get(method, method)


def _status(entry) -> VersionStatus:
    state = _STATES.get(entry.state, "UNKNOWN")
    failed = entry.state == "UNAVAILABLE" and entry.reason and entry.reason != "unloaded"
    return VersionStatus(int(entry.version), state, "UNKNOWN" if failed else "OK", entry.reason if failed else "")


def _check_inputs(sig: Signature, inputs: dict) -> None:
    want = [a for a, _ in sig.inputs]
    got = set(inputs)
    if got == set(want):
        return
    extra = sorted(got - set(want))
    missing = sorted(set(want) - got)
    # the client's names are quoted from a bounded prefix: many long aliases must not make a huge text
    raise invalid(f"input size does not match signature: {len(got)}!={len(want)} len({{{_names(sorted(got))}}}) "
                  f"!= len({{{','.join(sorted(want))}}}). Sent extra: {{{_names(extra)}}}. "
                  f"Missing but required: {{{','.join(missing)}}}.")


def _names(names: list[str]) -> str:
    return clip(",".join(clip(n) for n in names[:DIMS]) + (",..." if len(names) > DIMS else ""))


def _filter(sig: Signature, output_filter) -> list:
    if not output_filter:
        return list(sig.outputs)
    by_alias = dict(sig.outputs)
    seen = set()
    for alias in output_filter:
        if alias not in by_alias:
            raise invalid(f"output tensor alias not found in signature: {clip(alias)} Outputs expected to be in the "
                          f"set {{{','.join(sorted(by_alias))}}}.")
        if alias in seen:
            raise invalid(f"duplicate output tensor alias: {clip(alias)}")
        seen.add(alias)
    return [(a, s) for a, s in sig.outputs if a in seen]
