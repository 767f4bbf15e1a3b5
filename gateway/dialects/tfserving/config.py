"""The ``dialects.tfserving`` YAML section, declared as a strict pydantic model.

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

A signature may name another Triton model (``triton:``); it answers that model's default version
unless ``same_versions: true`` says the other model carries the TF model's versions (one Triton
model per signature, as ``gateway import tfserving`` writes them): then a version or label selects
the same version of it. Omitted ``inputs``/``outputs``/
``features`` mean "every Triton input/output under its own name". ``elementwise: true`` declares
the model element-wise (on a classify/regress signature: for Predict over it, see ``mapping``): the signature is advertised with unknown rank, as TF
signatures without a shape are, every input is sent flattened and every output whose size matches
is reshaped back to the first input's shape (``service.predict``). ``half_as_float: true``
(predict only) shows the signature's FP16/BF16 tensors to clients as DT_FLOAT, converted at the
gateway, so REST clients (TF Serving's JSON has no half) can use a half-precision model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from gateway.cutover.settings import LegacySettings
from gateway.settings import Names, Strict

METHODS = {"predict": "tensorflow/serving/predict", "classify": "tensorflow/serving/classify",
           "regress": "tensorflow/serving/regress"}
DEFAULT_SIGNATURE = "serving_default"
REGRESS_SIGNATURE = "tensorflow/serving/regress"
CLASSIFY_SIGNATURE = "tensorflow/serving/classify"


class SignatureConf(Strict):
    method: Literal["predict", "classify", "regress"] = "predict"
    triton: str = ""  # "" = the model's Triton model
    same_versions: bool = False  # `triton` has the TF model's versions: versions and labels apply to it
    inputs: dict[str, str] | None = None  # predict: alias -> Triton input
    outputs: dict[str, str] | None = None  # predict: alias -> Triton output
    features: dict[str, str] | None = None  # classify/regress: feature -> Triton input
    output: str = ""  # regress: the Triton output holding one value per example
    scores: str = ""  # classify: the Triton output holding scores [N] or [N, C]
    classes: str = ""  # classify: optional BYTES Triton output holding labels [N, C]
    labels: Names = ()  # classify: fixed labels for the C score columns
    elementwise: bool = False  # a TF signature of unknown rank over an element-wise model: sent
    #   flattened, answered in the request's shape; on classify/regress it applies to Predict over it
    half_as_float: bool = False  # predict: FP16/BF16 tensors are DT_FLOAT to clients (converted)

    @model_validator(mode="after")
    def _needs(self):
        if self.method == "classify" and not self.scores:
            raise ValueError("a classify signature needs 'scores'")
        if self.method == "regress" and not self.output:
            raise ValueError("a regress signature needs 'output'")
        if self.half_as_float and self.method != "predict":
            raise ValueError("half_as_float: only a predict signature can set it")
        return self


class ModelConf(Strict):
    triton: str = ""  # "" = the TF name (filled in by TFServingConfig)
    version_labels: dict[str, int] = {}
    signatures: dict[str, SignatureConf] = {}
    derived: bool = True  # add serving_default (and the derived example signatures) from metadata


class TFServingConfig(Strict):
    expose_all_models: bool = True
    derive_example_signatures: bool = True
    tensor_content_outputs: bool = False
    models: dict[str, ModelConf] = {}
    legacy: LegacySettings | None = None  # the TF Serving behind the gateway (docs/migration.md)

    @model_validator(mode="after")
    def _triton_names(self):
        for name, conf in self.models.items():
            if not conf.triton:
                self.models[name] = conf.model_copy(update={"triton": name})
        return self
