"""The TF Serving data plane over a fake Upstream: names, versions, labels, derived signatures."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gateway.context import GatewayContext
from gateway.core.errors import GatewayError
from gateway.core.tensors import InferResponse, ModelIndexEntry, ModelMetadata, Tensor, TensorSpec
from gateway.dialects.tfserving import config
from gateway.dialects.tfserving.mapping import Spec
from gateway.dialects.tfserving.service import Service
from gateway.settings import Settings
from tests.fakes import FakeUpstream

META = ModelMetadata("hp3", ("123",), "python", (TensorSpec("x", "FP32", (-1,)),),
                     (TensorSpec("y", "FP32", (-1,)),))


def _infer(req):
    x = req.inputs[0].data
    return InferResponse(req.model, "123", [Tensor("y", (0.5 * x + 3).astype(np.float32), "FP32")])


INDEX = [ModelIndexEntry("hp3", "123", "READY"), ModelIndexEntry("hp3", "7", "UNAVAILABLE", "load failed")]


def service(section=None):
    up = FakeUpstream(metas=[META], infer=_infer, index=INDEX)
    return Service(GatewayContext(Settings(), up), config.TFServingConfig.model_validate(section or {})), up


async def test_predict_with_no_config():
    svc, up = service()
    target = await svc.resolve(Spec("hp3"))
    version, outs = await svc.predict(target, {"x": np.array([1.0], np.float32)})
    assert version == "123" and outs["y"][0].tolist() == [3.5]
    assert up.requests[0][0].version == ""


async def test_derived_regress_signature_drops_the_feature_dim():
    svc, up = service()
    target = await svc.resolve(Spec("hp3", signature="tensorflow/serving/regress"))
    from gateway.dialects.tfserving.examples import Feature
    _, values = await svc.run_examples(target, "regress", [{"x": Feature("float", [1.0])}] * 2, {})
    assert values.tolist() == [3.5, 3.5] and up.requests[0][0].inputs[0].shape == (2,)


async def test_labels_and_versions():
    svc, up = service({"models": {"half": {"triton": "hp3", "version_labels": {"stable": 123}}}})
    target = await svc.resolve(Spec("half", label="stable"))
    assert target.triton_version == "123"
    with pytest.raises(GatewayError, match="Unrecognized servable version label: canary"):
        await svc.resolve(Spec("half", label="canary"))
    with pytest.raises(GatewayError, match=r"Specific\(half, 7\)"):
        await svc.resolve(Spec("half", version=7))


async def test_status_lists_failed_versions_as_end():
    svc, _ = service()
    rows = await svc.status(Spec("hp3"))
    assert [(r.version, r.state, r.error_code) for r in rows] == [(7, "END", "UNKNOWN"), (123, "AVAILABLE", "OK")]


def test_config_is_validated():
    with pytest.raises(ValidationError, match="modelz"):
        config.TFServingConfig.model_validate({"modelz": {}})
    with pytest.raises(ValidationError, match="needs 'output'"):
        config.TFServingConfig.model_validate({"models": {"m": {"signatures": {"r": {"method": "regress"}}}}})
    with pytest.raises(ValidationError, match="labels"):  # a string is not a list of labels
        config.TFServingConfig.model_validate({"models": {"m": {"signatures": {
            "c": {"method": "classify", "scores": "y", "labels": "abc"}}}}})
    with pytest.raises(ValidationError, match="expose_all_models"):  # "false" is not a boolean
        config.TFServingConfig.model_validate({"expose_all_models": "false"})
    conf = config.TFServingConfig.model_validate({"models": {"m": {"signatures": {
        "c": {"method": "classify", "scores": "y", "labels": ["a", "b"]}}}}})
    assert conf.models["m"].triton == "m" and conf.models["m"].signatures["c"].labels == ("a", "b")
