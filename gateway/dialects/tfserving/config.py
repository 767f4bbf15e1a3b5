"""The ``dialects.tfserving`` YAML section, parsed once into frozen dataclasses.

    dialects:
      tfserving:
        expose_all_models: true          # every Triton model under its own name (serving_default)
        derive_example_signatures: true  # + regress/classify on one-float-output numeric models
        tensor_content_outputs: false    # gRPC outputs in tensor_content (TF's
                                         #   --enable_serialization_as_tensor_content)
        models:
          half:                          # the TF Serving model name clients use
            triton: saved_model_half_plus_three
            version_labels: {stable: 123, canary: 123}
            signatures:
              serving_default: {method: predict, inputs: {x: x}, outputs: {y: y}}
              tensorflow/serving/regress: {method: regress, features: {x: x}, output: y}
              tensorflow/serving/classify: {method: classify, features: {x: x}, scores: y}

A signature may name another Triton model (``triton:``). Omitted ``inputs``/``outputs``/
``features`` mean "every Triton input/output under its own name". ``elementwise: true`` declares
the model element-wise (on a classify/regress signature: for Predict over it, see ``mapping``): the signature is advertised with unknown rank, as TF
signatures without a shape are, every input is sent flattened and every output whose size matches
is reshaped back to the first input's shape (``service.predict``). ``half_as_float: true``
(predict only) shows the signature's FP16/BF16 tensors to clients as DT_FLOAT, converted at the
gateway, so REST clients (TF Serving's JSON has no half) can use a half-precision model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.settings import SettingsError

METHODS = {"predict": "tensorflow/serving/predict", "classify": "tensorflow/serving/classify",
           "regress": "tensorflow/serving/regress"}
DEFAULT_SIGNATURE = "serving_default"
REGRESS_SIGNATURE = "tensorflow/serving/regress"
CLASSIFY_SIGNATURE = "tensorflow/serving/classify"


@dataclass(frozen=True, slots=True)
class SignatureConf:
    method: str = "predict"  # predict | classify | regress
    triton: str = ""  # "" = the model's Triton model
    inputs: Mapping[str, str] | None = None  # predict: alias -> Triton input
    outputs: Mapping[str, str] | None = None  # predict: alias -> Triton output
    features: Mapping[str, str] | None = None  # classify/regress: feature -> Triton input
    output: str = ""  # regress: the Triton output holding one value per example
    scores: str = ""  # classify: the Triton output holding scores [N] or [N, C]
    classes: str = ""  # classify: optional BYTES Triton output holding labels [N, C]
    labels: tuple[str, ...] = ()  # classify: fixed labels for the C score columns
    elementwise: bool = False  # predict: a TF signature of unknown rank over an element-wise model
    half_as_float: bool = False  # predict: FP16/BF16 tensors are DT_FLOAT to clients (converted)


@dataclass(frozen=True, slots=True)
class ModelConf:
    name: str
    triton: str
    version_labels: Mapping[str, int] = field(default_factory=dict)
    signatures: Mapping[str, SignatureConf] = field(default_factory=dict)
    derived: bool = True  # add serving_default (and the derived example signatures) from metadata


@dataclass(frozen=True, slots=True)
class TFServingConfig:
    expose_all_models: bool = True
    derive_example_signatures: bool = True
    tensor_content_outputs: bool = False
    models: Mapping[str, ModelConf] = field(default_factory=dict)


def _mapping(value: Any, where: str) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingsError(f"{where}: expected a mapping")
    return value


def _names(value: Any, where: str) -> Mapping[str, str] | None:
    if value is None:
        return None
    return MappingProxyType({str(k): str(v) for k, v in _mapping(value, where).items()})


def _signature(raw: Any, where: str) -> SignatureConf:
    raw = dict(_mapping(raw, where))
    known = set(SignatureConf.__slots__)
    unknown = set(raw) - known
    if unknown:
        raise SettingsError(f"{where}: unknown keys {sorted(unknown)}")
    method = str(raw.get("method", "predict"))
    if method not in METHODS:
        raise SettingsError(f"{where}.method: {method!r} is not one of {sorted(METHODS)}")
    if method == "classify" and not raw.get("scores"):
        raise SettingsError(f"{where}: a classify signature needs 'scores'")
    if method == "regress" and not raw.get("output"):
        raise SettingsError(f"{where}: a regress signature needs 'output'")
    return SignatureConf(
        method=method,
        triton=str(raw.get("triton", "")),
        inputs=_names(raw.get("inputs"), f"{where}.inputs"),
        outputs=_names(raw.get("outputs"), f"{where}.outputs"),
        features=_names(raw.get("features"), f"{where}.features"),
        output=str(raw.get("output", "")),
        scores=str(raw.get("scores", "")),
        classes=str(raw.get("classes", "")),
        labels=tuple(str(x) for x in raw.get("labels") or ()),
        elementwise=_flag(raw, "elementwise", where),
        half_as_float=_predict_flag(raw, "half_as_float", method, where),
    )


def _flag(raw: Mapping, key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise SettingsError(f"{where}.{key}: expected true or false")
    return value


def _predict_flag(raw: Mapping, key: str, method: str, where: str) -> bool:
    value = _flag(raw, key, where)
    if value and method != "predict":
        raise SettingsError(f"{where}.{key}: only a predict signature can set it")
    return value


def _model(name: str, raw: Any, where: str) -> ModelConf:
    raw = dict(_mapping(raw, where))
    unknown = set(raw) - {"triton", "version_labels", "signatures", "derived"}
    if unknown:
        raise SettingsError(f"{where}: unknown keys {sorted(unknown)}")
    labels = {}
    for label, version in _mapping(raw.get("version_labels"), f"{where}.version_labels").items():
        if isinstance(version, bool) or not isinstance(version, int):
            raise SettingsError(f"{where}.version_labels.{label}: version must be an integer")
        labels[str(label)] = version
    sigs = {
        str(k): _signature(v, f"{where}.signatures.{k}")
        for k, v in _mapping(raw.get("signatures"), f"{where}.signatures").items()
    }
    return ModelConf(
        name=name,
        triton=str(raw.get("triton") or name),
        version_labels=MappingProxyType(labels),
        signatures=MappingProxyType(sigs),
        derived=bool(raw.get("derived", True)),
    )


def parse(section: Mapping[str, Any]) -> TFServingConfig:
    """Validate ``dialects.tfserving``; SettingsError names the offending key."""
    section = dict(section or {})
    known = {"expose_all_models", "derive_example_signatures", "tensor_content_outputs", "models"}
    unknown = set(section) - known
    if unknown:
        raise SettingsError(f"dialects.tfserving: unknown keys {sorted(unknown)}")
    models = {
        str(k): _model(str(k), v, f"dialects.tfserving.models.{k}")
        for k, v in _mapping(section.get("models"), "dialects.tfserving.models").items()
    }
    return TFServingConfig(
        expose_all_models=bool(section.get("expose_all_models", True)),
        derive_example_signatures=bool(section.get("derive_example_signatures", True)),
        tensor_content_outputs=bool(section.get("tensor_content_outputs", False)),
        models=MappingProxyType(models),
    )
