"""The data plane REST and gRPC share: resolve, bridge shapes, call Triton, map names back.

Handlers (``http.py``, ``grpc.py``) decode their wire into the neutral arguments here and encode
what comes back; everything TF-Serving-specific about *meaning* (signatures, versions, labels,
examples) lives here and in ``mapping``/``examples``, nothing about wire formats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gateway import cutover
from gateway.context import GatewayContext
from gateway.core import datatypes
from gateway.core.bounded import DIMS, Plans, clip
from gateway.core.errors import invalid
from gateway.core.tensors import InferRequest, InferResponse, Tensor
from gateway.upstream import wire

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
        # the TF Serving behind the gateway (dialects.tfserving.legacy), shared by REST and gRPC; None: none
        self.cutover = cutover.open("tfserving", conf.legacy, ctx.settings.source, grpc=True)
        self._plans = Plans(MAX_PLANS)  # predict: per target, output filter, inputs' names, shapes, dtypes
        self._wire = True  # plans may take Upstream.infer_bytes (tests turn it off to compare with the neutral path)
        # resolve(spec, *, grpc=False, method=None) -> Target: Servables.resolve itself (no coroutine of its own)
        self.resolve = self.servables.resolve

    async def start(self) -> None:
        if self.cutover is not None:
            await self.cutover.start("/")

    async def close(self) -> None:
        if self.cutover is not None:
            await self.cutover.close()

    async def _infer(self, req: InferRequest) -> InferResponse:
        return await self.ctx.upstream.infer(req)

    async def predict(self, target: Target, inputs: dict[str, np.ndarray], output_filter=()) -> tuple[str, Outputs]:
        """Triton's answer to ``inputs`` under ``target``'s signature, as {alias: (array, V2 type)}.

        What depends only on the target, the output filter and the inputs' names, shapes and dtypes
        (the checks, the shape bridge, the outputs asked for) is worked out once and kept
        (``_Plan``); a request then only casts and reshapes its arrays and calls Triton."""
        key = (id(target), tuple(output_filter), *[(alias, arr.shape, arr.dtype) for alias, arr in inputs.items()])
        plan = self._plans.get(key)
        if plan is None or plan.target is not target:  # the plan holds its target: an id is not reused under it
            # refusals raise here, every time (never kept); bounded: the shapes clients send
            plan = self._plans.keep(key, _plan(target, inputs, output_filter, self._wire,
                                               self.ctx.upstream.shared_from()))
        if plan.wire is not None:  # one numeric input, numeric outputs: straight to wire bytes and back
            return await self._predict_wire(plan, next(iter(inputs.values())))
        tensors = []
        for arr, (name, datatype, cast, shape) in zip(inputs.values(), plan.inputs, strict=True):
            if cast is not None:
                arr = arr.astype(cast)
            tensors.append(Tensor(name, arr.reshape(shape) if shape is not None else arr, datatype))
        target = plan.target
        resp = await self._infer(InferRequest(target.signature.triton, tensors, target.triton_version, plan.output_names))
        return resp.version, _outputs(plan, resp)

    async def _predict_wire(self, plan: _Plan, arr: np.ndarray) -> tuple[str, Outputs]:
        """``predict`` of a plan with ``wire``: the request written from the plan's header (what
        ``wire.serialize_request`` writes for it), the answer's arrays taken from its raw contents
        (``wire.decode_response``'s arrays; an answer of any other form is decoded by it)."""
        road = plan.wire
        want = road.dtype
        data = await self.ctx.upstream.infer_bytes(
            plan.target.signature.triton, wire.Planned(road.header, (arr if arr.dtype == want else arr.astype(want),)))
        form = road.form
        arrays = form.read(data) if form is not None else None
        if arrays is not None:  # the form of the answers before it: read without parsing the message
            version = form.version
        else:
            msg, raws = wire.parse_answer(data)
            arrays = wire.numeric_outputs(msg, raws, road.outputs)
            if arrays is None:  # not the answer the metadata promised: as any other answer
                return msg.model_version, _outputs(plan, wire.decode_response(msg, raws))
            version = msg.model_version
            road.form = wire.AnswerForm.learn(data, arrays, version)
        return version, {alias: (_shaped(plan, a), datatype) for (alias, _), (_, datatype, _), a
                         in zip(plan.outputs, road.outputs, arrays, strict=True)}

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


MAX_PLANS = 1024


@dataclass(frozen=True, slots=True)
class _Plan:
    """One predict's request-independent part: per input its Triton name, V2 type, the numpy type
    it is cast to (None: none) and the shape it is sent in (None: its own); the outputs asked for
    (alias, Triton name); whether a batch dim added to every input is removed from every output;
    the shape element-wise outputs take back (None: not element-wise)."""

    target: Target
    inputs: tuple[tuple[str, str, np.dtype | None, tuple[int, ...] | None], ...]
    outputs: tuple[tuple[str, str], ...]
    output_names: list[str]
    unbatch: bool
    like: tuple[int, ...] | None
    wire: _Wire | None  # the request's bytes and the answer's arrays without neutral tensors (None: through them)


@dataclass(slots=True)
class _Wire:
    """A predict of one input and outputs of fixed-size numeric types, none converted (no
    half_as_float): the request header (``wire.header``: an element-wise input in the shape it is
    sent in), the input's numpy type, and the outputs expected as (Triton name, V2 type, numpy
    type), in the plan's output order; the form of the last answer read (``wire.AnswerForm``),
    which the next answer of that form is read by."""

    header: bytes
    dtype: np.dtype
    outputs: tuple[tuple[str, str, np.dtype], ...]
    form: wire.AnswerForm | None = field(default=None, compare=False)  # learned from the last answer decoded


def _outputs(plan: _Plan, resp: InferResponse) -> Outputs:
    """The answer's outputs the plan asked for, by alias, in the shapes and types clients see."""
    half = plan.target.signature.half_as_float
    result = {}
    for alias, name in plan.outputs:
        t = resp.output(name)
        data, v2 = (t.data.astype(np.float32), "FP32") if half and t.datatype in HALF_TYPES else (t.data, t.datatype)
        result[alias] = (_shaped(plan, data), v2)
    return result


def _shaped(plan: _Plan, data: np.ndarray) -> np.ndarray:
    """An output in the shape clients see: the batch dimension added for them taken off, an
    element-wise signature's output in its input's shape."""
    if plan.unbatch:
        data = shapes.unbatch(data)
    return shapes.restore(data, plan.like) if plan.like is not None else data


def _plan(target: Target, inputs: dict[str, np.ndarray], output_filter, wire_capable: bool = False,
          shared_from: int | None = None) -> _Plan:
    """The checks (in TF Serving's words) and the shape rule of a predict, for these inputs' names,
    shapes and dtypes; ``wire`` only for an input smaller than ``shared_from`` (``Upstream.shared_from``:
    a larger one goes to Triton through shared memory, by ``Upstream.infer``)."""
    sig = target.signature
    if sig.method != "predict":
        raise invalid(f"Expected prediction signature method_name to be tensorflow/serving/predict. "
                      f"Was: {sig.method_name}")
    _check_inputs(sig, inputs)
    outs = _filter(sig, output_filter)
    specs = dict(sig.inputs)
    planned, added = [], []
    for alias, arr in inputs.items():
        spec = specs[alias]
        cast = datatypes.by_v2(spec.datatype).numpy if sig.half_as_float and spec.datatype in HALF_TYPES else None
        shape, add = shapes.fit((arr.size,) if sig.elementwise else arr.shape, spec, sig.max_batch_size)
        planned.append((spec.name, spec.datatype, cast, shape if shape != arr.shape else None))
        added.append(add)
    like = next(iter(inputs.values())).shape if sig.elementwise and inputs else None
    names = [s.name for _, s in outs]
    road = None
    if wire_capable and len(planned) == 1 and not sig.half_as_float \
            and planned[0][1] in wire.RAW_NUMPY and all(s.datatype in wire.RAW_NUMPY for _, s in outs):
        (name, datatype, _, sent), arr = planned[0], next(iter(inputs.values()))
        dtype = np.dtype(wire.RAW_NUMPY[datatype])
        if shared_from is None or arr.size * dtype.itemsize < shared_from:
            head = wire.header(sig.triton, target.triton_version, [(name, datatype, arr.shape if sent is None else sent)],
                                names)
            road = _Wire(head, dtype, tuple((s.name, s.datatype, np.dtype(wire.RAW_NUMPY[s.datatype])) for _, s in outs))
    return _Plan(target, tuple(planned), tuple((alias, spec.name) for alias, spec in outs), names,
                 bool(added) and all(added), like, road)


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
