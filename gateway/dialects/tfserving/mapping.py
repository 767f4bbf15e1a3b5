"""TF Serving names -> Triton: model name, version or label, and signature.

    (TF model, version | label, signature) --Servables.resolve--> Target(Triton model, version, Signature)

A ``Signature`` is realised from the Triton model's metadata: its inputs and outputs carry the
Triton TensorSpec under the TF alias. Without configuration every Triton model is exposed under its
own name with a ``serving_default`` signature (aliases = Triton names). With
``derive_example_signatures`` a model whose inputs are all numeric and whose only output is FP32 or
FP64 also gets ``tensorflow/serving/regress`` and ``tensorflow/serving/classify`` (features named as
its inputs; one class with an empty label, the score being the output), which is how
``saved_model_half_plus_three`` answers the TF Serving examples with no YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gateway.core.bounded import keep
from gateway.core.errors import ErrorKind, GatewayError, invalid
from gateway.core.tensors import ModelMetadata, TensorSpec
from gateway.upstream import Upstream

from . import errors
from .config import (
    CLASSIFY_SIGNATURE,
    DEFAULT_SIGNATURE,
    METHODS,
    REGRESS_SIGNATURE,
    ModelConf,
    SignatureConf,
    TFServingConfig,
)


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    method: str  # predict | classify | regress
    triton: str
    max_batch_size: int
    inputs: tuple[tuple[str, TensorSpec], ...]  # predict: alias; classify/regress: feature name
    outputs: tuple[tuple[str, TensorSpec], ...]  # predict: alias; classify: scores/classes; regress: outputs
    labels: tuple[str, ...] = ()
    own: bool = True  # over the TF model's own Triton model (versions and labels apply)
    elementwise: bool = False  # unknown rank: inputs flattened, outputs reshaped back (config.py)
    half_as_float: bool = False  # FP16/BF16 tensors are DT_FLOAT to clients, converted here (config.py)
    # alias -> the V2 type clients send (client_dtype of every input), made once
    client_types: dict[str, str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "client_types", {alias: self.client_dtype(spec) for alias, spec in self.inputs})

    @property
    def method_name(self) -> str:
        return METHODS[self.method]

    def client_dtype(self, spec: TensorSpec) -> str:
        """The V2 type clients see for one of this signature's tensors (metadata, REST, gRPC)."""
        return "FP32" if self.half_as_float and spec.datatype in HALF_TYPES else spec.datatype


@dataclass(frozen=True, slots=True)
class Target:
    model: str  # TF name
    version: int | None  # None: latest
    signature: Signature

    @property
    def triton_version(self) -> str:
        """Versions and labels select versions of the model's own Triton model only."""
        return "" if self.version is None or not self.signature.own else str(self.version)


@dataclass(frozen=True, slots=True)
class ServableRef:
    """A ModelSpec in neutral form (REST path or gRPC ModelSpec)."""

    name: str
    version: int | None = None
    label: str | None = None
    signature: str = ""


HALF_TYPES = ("FP16", "BF16")
_NUMERIC = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
            "FP16", "FP32", "FP64", "BF16"}


def _pick(specs: tuple[TensorSpec, ...], names, model: str, what: str) -> tuple[tuple[str, TensorSpec], ...]:
    by_name = {s.name: s for s in specs}
    if names is None:
        return tuple((s.name, s) for s in specs)
    out = []
    for alias, triton_name in names.items():
        if triton_name not in by_name:
            raise GatewayError(ErrorKind.FAILED_PRECONDITION,
                               f"signature maps '{alias}' to {what} '{triton_name}', which Triton model "
                               f"'{model}' does not have")
        out.append((alias, by_name[triton_name]))
    return tuple(out)


def _one(specs, name: str, model: str, alias: str) -> tuple[str, TensorSpec]:
    return _pick(specs, {alias: name}, model, "output")[0]


def realise(name: str, conf: SignatureConf, meta: ModelMetadata) -> Signature:
    """A configured signature over one Triton model's metadata."""
    if conf.method == "predict":
        ins = _pick(meta.inputs, conf.inputs, meta.name, "input")
        outs = _pick(meta.outputs, conf.outputs, meta.name, "output")
        return Signature(name, "predict", meta.name, meta.max_batch_size, ins, outs,
                         elementwise=conf.elementwise, half_as_float=conf.half_as_float)
    feats = _pick(meta.inputs, conf.features, meta.name, "input")
    if conf.method == "regress":
        outs = (_one(meta.outputs, conf.output, meta.name, "outputs"),)
        return Signature(name, "regress", meta.name, meta.max_batch_size, feats, outs,
                         elementwise=conf.elementwise)
    outs = [_one(meta.outputs, conf.scores, meta.name, "scores")]
    if conf.classes:
        outs.append(_one(meta.outputs, conf.classes, meta.name, "classes"))
    return Signature(name, "classify", meta.name, meta.max_batch_size, feats, tuple(outs), conf.labels,
                     elementwise=conf.elementwise)


def predict_view(sig: Signature) -> Signature:
    """A classify/regress signature as Predict sees it in TF Serving, which runs any signature's
    tensors: its one input under TF's alias ``inputs`` (kClassifyInputs / kRegressInputs), its
    outputs under ``outputs`` / ``scores`` / ``classes``. With more than one feature there is no
    such tensor and the signature stays an example signature (Predict refuses it)."""
    if sig.method == "predict" or len(sig.inputs) != 1:
        return sig
    return replace(sig, method="predict", inputs=(("inputs", sig.inputs[0][1]),))


def derived(meta: ModelMetadata, examples: bool) -> dict[str, SignatureConf]:
    """The signatures a Triton model gets with no configuration (see the module docstring)."""
    sigs = {DEFAULT_SIGNATURE: SignatureConf()}
    numeric_in = meta.inputs and all(s.datatype in _NUMERIC for s in meta.inputs)
    one_float_out = len(meta.outputs) == 1 and meta.outputs[0].datatype in ("FP32", "FP64")
    if examples and numeric_in and one_float_out:
        out = meta.outputs[0].name
        sigs[REGRESS_SIGNATURE] = SignatureConf(method="regress", output=out)
        sigs[CLASSIFY_SIGNATURE] = SignatureConf(method="classify", scores=out, labels=("",))
    return sigs


def _check_spec(spec: ServableRef) -> None:
    """ServerCore::ServableRequestFromModelSpec's checks of the request's own fields."""
    if not spec.name:
        raise invalid("ModelSpec has no name specified.")
    if spec.version is not None and spec.label is not None:
        raise invalid(f"Both model version ({spec.version}) and model version label ({spec.label}) "
                      "cannot be supplied.")


def _pick_version(spec: ServableRef, conf: ModelConf | None, ready: list[int]) -> int | None:
    """The version ``spec`` names (label resolved) among the ``ready`` ones; NOT_FOUND in TF's words.

    TF Serving resolves a label before it looks for the servable (``ServableRequestFromModelSpec``
    → ``GetModelVersionForLabel``), and a model it has no labels for, or none at all, gives the
    same INVALID_ARGUMENT as an unknown label: ``Unrecognized servable version label: L``."""
    version = spec.version
    if spec.label is not None:
        if conf is None or spec.label not in conf.version_labels:
            raise errors.unknown_label(spec.label)
        version = conf.version_labels[spec.label]
    if conf is None:
        raise errors.servable_not_found(spec.name, spec.version)
    if version is None and not ready:
        raise errors.servable_not_found(spec.name, None)
    if version is not None and version not in ready:
        raise errors.servable_not_found(spec.name, version)
    return version


class Servables:
    """Resolves TF names against the configuration and Triton's repository (index cached upstream)."""

    def __init__(self, conf: TFServingConfig, upstream: Upstream):
        self.conf = conf
        self.upstream = upstream
        # realised signatures, reused while upstream serves the same (cached) metadata objects
        self._sigs: dict[tuple, tuple[tuple, dict[str, Signature]]] = {}
        self._exposed: dict[str, ModelConf] = {}  # Triton models exposed under their own names
        # resolved targets, reused while upstream serves the same (cached) index and metadata objects
        self._resolved: dict[tuple, tuple[object, tuple, tuple, Target]] = {}

    async def model(self, name: str) -> ModelConf | None:
        conf = self.conf.models.get(name)
        if conf is not None:
            return conf
        return self._expose(name, await self._versions(name))

    def _expose(self, name: str, ready: list[int]) -> ModelConf | None:
        """``expose_all_models``: a Triton model with a ready version, under its own name."""
        if not (self.conf.expose_all_models and ready):
            return None
        conf = self._exposed.get(name)
        if conf is None:
            conf = keep(self._exposed, name, ModelConf(triton=name), 1024)  # bounded by the names Triton has had
        return conf

    async def _versions(self, triton: str, ready_only: bool = True) -> list[int]:
        out = []
        for e in await self.upstream.repository_index():
            if e.name == triton and e.version.isdigit() and (e.state == "READY" or not ready_only):
                out.append(int(e.version))
        return sorted(out)

    async def index(self, triton: str):
        return [e for e in await self.upstream.repository_index() if e.name == triton]

    async def version(self, spec: ServableRef, conf: ModelConf | None) -> int | None:
        """The version a request names (label resolved); NOT_FOUND as TF Serving words it."""
        _check_spec(spec)
        return _pick_version(spec, conf, await self._versions(conf.triton) if conf is not None else [])

    async def latest(self, conf: ModelConf) -> int | None:
        ready = await self._versions(conf.triton)
        return ready[-1] if ready else None

    async def signatures(self, conf: ModelConf, version: int | None) -> dict[str, Signature]:
        """The model's signatures (read-only: shared by requests while the metadata is unchanged)."""
        return (await self._signatures(conf, version))[0]

    async def _signatures(self, conf: ModelConf, version: int | None) -> tuple[dict[str, Signature], tuple]:
        """The signatures, and the ((model, version) keys, metadata objects) they come from."""
        v = "" if version is None else str(version)
        own = await self.upstream.model_metadata(conf.triton, v)
        others = sorted({sc.triton for sc in conf.signatures.values() if sc.triton and sc.triton != conf.triton})
        same = {sc.triton for sc in conf.signatures.values() if sc.same_versions}  # versions follow the model's
        keys = [(t, v if t in same else "") for t in others]
        metas = (own, *[await self.upstream.model_metadata(t, tv) for t, tv in keys])
        sources = (((conf.triton, v), *keys), metas)
        # configured signatures are one dict per TF name; exposed models have none (key None)
        key = (conf.triton, v, conf.derived, id(conf.signatures) if conf.signatures else None)
        hit = self._sigs.get(key)
        if hit is not None and len(hit[0]) == len(metas) and all(a is b for a, b in zip(hit[0], metas, strict=True)):
            return hit[1], sources
        other_meta = dict(zip(others, metas[1:], strict=True))
        confs = derived(own, self.conf.derive_example_signatures) if conf.derived else {}
        confs.update(conf.signatures)
        out = {}
        for name, sc in confs.items():
            if not sc.triton or sc.triton == conf.triton:
                out[name] = realise(name, sc, own)
            else:
                out[name] = replace(realise(name, sc, other_meta[sc.triton]), own=sc.same_versions)
        keep(self._sigs, key, (metas, out), 1024)  # bounded, like the metadata cache it follows
        return out, sources

    async def resolve(self, spec: ServableRef, *, grpc: bool = False, method: str | None = None) -> Target:
        """``method``: the API called (predict, classify, regress; None: the signature as configured).
        TF Serving words an unknown signature differently in its REST predict, gRPC predict and
        classify/regress paths; Predict sees an example signature through ``predict_view``.

        A request resolved before is answered from memory while Triton's repository index and the
        model's metadata are the very objects the upstream cache served then (a new fetch, every
        ``upstream.cache_ttl_s``, resolves again)."""
        key = (spec, grpc, method)
        hit = self._resolved.get(key)
        if hit is not None and self._fresh(hit):
            return hit[3]
        index = await self.upstream.repository_index()
        target, sources = await self._resolve(spec, grpc, method)
        keep(self._resolved, key, (index, sources[0], sources[1], target), 1024)  # bounded, like the caches it follows
        return target

    def _fresh(self, hit: tuple) -> bool:
        """Whether a remembered resolution still stands: the upstream cache holds the very index and
        metadata it was made from (read without a call: the request's hot path)."""
        upstream = self.upstream
        if upstream.cached_index() is not hit[0]:
            return False
        for (model, version), meta in zip(hit[1], hit[2], strict=True):
            if upstream.cached_metadata(model, version) is not meta:
                return False
        return True

    async def _resolve(self, spec: ServableRef, grpc: bool, method: str | None) -> tuple[Target, tuple]:
        """The target, and the (model, version) keys and metadata objects it was realised from."""
        _check_spec(spec)
        conf = self.conf.models.get(spec.name)
        ready = await self._versions(conf.triton if conf is not None else spec.name)  # one index scan
        if conf is None:
            conf = self._expose(spec.name, ready)
        version = _pick_version(spec, conf, ready)
        sigs, sources = await self._signatures(conf, version)
        name = spec.signature or DEFAULT_SIGNATURE
        sig = sigs.get(name)
        if sig is None:
            if method in ("classify", "regress"):
                raise errors.no_signature(name)
            raise errors.signature_not_found_grpc(name) if grpc else errors.signature_not_found_rest(name)
        if method == "predict":
            sig = predict_view(sig)
        return Target(spec.name, version, sig), sources
