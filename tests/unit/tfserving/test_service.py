"""The TF Serving data plane over a fake Upstream: names, versions, labels, derived signatures."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gateway.context import GatewayContext
from gateway.core.errors import GatewayError
from gateway.core.tensors import InferResponse, ModelIndexEntry, ModelMetadata, Tensor, TensorSpec
from gateway.dialects.tfserving import config
from gateway.dialects.tfserving.mapping import ServableRef
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
    target = await svc.resolve(ServableRef("hp3"))
    version, outs = await svc.predict(target, {"x": np.array([1.0], np.float32)})
    assert version == "123" and outs["y"][0].tolist() == [3.5]
    assert up.requests[0][0].version == ""


async def test_derived_regress_signature_drops_the_feature_dim():
    svc, up = service()
    target = await svc.resolve(ServableRef("hp3", signature="tensorflow/serving/regress"))
    from gateway.dialects.tfserving.examples import Feature
    _, values = await svc.run_examples(target, "regress", [{"x": Feature("float", [1.0])}] * 2, {})
    assert values.tolist() == [3.5, 3.5] and up.requests[0][0].inputs[0].shape == (2,)


async def test_labels_and_versions():
    svc, up = service({"models": {"half": {"triton": "hp3", "version_labels": {"stable": 123}}}})
    target = await svc.resolve(ServableRef("half", label="stable"))
    assert target.triton_version == "123"
    with pytest.raises(GatewayError, match="Unrecognized servable version label: canary"):
        await svc.resolve(ServableRef("half", label="canary"))
    with pytest.raises(GatewayError, match=r"Specific\(half, 7\)"):
        await svc.resolve(ServableRef("half", version=7))


async def test_status_lists_failed_versions_as_end():
    svc, _ = service()
    rows = await svc.status(ServableRef("hp3"))
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


async def test_elementwise_signature_flattens_inputs_and_reshapes_outputs():
    svc, up = service({"models": {"hp3": {"signatures": {"serving_default": {"elementwise": True}}}}})
    target = await svc.resolve(ServableRef("hp3"))
    _, outs = await svc.predict(target, {"x": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)})
    assert up.requests[0][0].inputs[0].shape == (4,)  # what Triton's dims [-1] take
    assert outs["y"][0].tolist() == [[3.5, 4.0], [4.5, 5.0]]
    _, outs = await svc.predict(target, {"x": np.array(2.0, np.float32)})  # a scalar stays a scalar
    assert up.requests[1][0].inputs[0].shape == (1,) and outs["y"][0].shape == () and outs["y"][0] == 4.0
    plain, up2 = service()  # without the declaration the shape goes to Triton unchanged (Triton judges)
    await plain.predict(await plain.resolve(ServableRef("hp3")), {"x": np.zeros((2, 2), np.float32)})
    assert up2.requests[0][0].inputs[0].shape == (2, 2)


async def test_classify_and_regress_name_a_missing_signature_as_tf_serving_does():
    svc, _ = service()
    for method in ("classify", "regress"):
        with pytest.raises(GatewayError, match="^No signature was found with the name: nope$"):
            await svc.resolve(ServableRef("hp3", signature="nope"), method=method)
    with pytest.raises(GatewayError, match="^ModelSpec has no name specified.$"):
        await svc.resolve(ServableRef(""), grpc=True)


def test_elementwise_is_validated():
    # on a regress/classify signature it applies to Predict over it (mapping.predict_view)
    conf = config.TFServingConfig.model_validate({"models": {"m": {"signatures": {"r": {
        "method": "regress", "output": "y", "elementwise": True}}}}})
    assert conf.models["m"].signatures["r"].elementwise
    with pytest.raises(ValidationError, match="valid boolean"):
        config.TFServingConfig.model_validate({"models": {"m": {"signatures": {"s": {"elementwise": "yes"}}}}})


async def test_half_as_float_shows_fp16_as_float_and_converts_both_ways():
    half = ModelMetadata("hp3", ("1",), "python", (TensorSpec("x", "FP16", (-1,)),), (TensorSpec("y", "FP16", (-1,)),))

    def double(req):
        x = req.inputs[0].data
        return InferResponse(req.model, "1", [Tensor("y", (x * np.float16(2)).astype(np.float16), "FP16")])

    up = FakeUpstream(metas=[half], infer=double, index=INDEX)
    section = {"models": {"hp3": {"signatures": {"serving_default": {"half_as_float": True}}}}}
    svc = Service(GatewayContext(Settings(), up), config.TFServingConfig.model_validate(section))
    target = await svc.resolve(ServableRef("hp3"))
    assert target.signature.client_dtype(target.signature.inputs[0][1]) == "FP32"
    _, outs = await svc.predict(target, {"x": np.array([1.5, 3.0], np.float32)})
    assert up.requests[0][0].inputs[0].data.dtype == np.float16 and up.requests[0][0].inputs[0].datatype == "FP16"
    assert outs["y"][1] == "FP32" and outs["y"][0].dtype == np.float32 and outs["y"][0].tolist() == [3.0, 6.0]
    with pytest.raises(ValidationError, match="half_as_float: only a predict signature can set it"):
        config.TFServingConfig.model_validate({"models": {"m": {"signatures": {"r": {
            "method": "regress", "output": "y", "half_as_float": True}}}}})


async def test_predict_over_an_example_signature_runs_its_tensors_as_tf_serving_does():
    svc, up = service()
    target = await svc.resolve(ServableRef("hp3", signature="tensorflow/serving/regress"), method="predict")
    assert [a for a, _ in target.signature.inputs] == ["inputs"]
    _, outs = await svc.predict(target, {"inputs": np.array([2.0], np.float32)})
    assert outs["outputs"][0].tolist() == [4.0] and up.requests[0][0].inputs[0].name == "x"
    # the signature as configured for classify/regress and MultiInference (method None)
    assert (await svc.resolve(ServableRef("hp3", signature="tensorflow/serving/regress"))).signature.method == "regress"


async def test_signatures_are_reused_while_the_metadata_is_the_same_object():
    svc, up = service()
    first = (await svc.resolve(ServableRef("hp3"))).signature
    assert (await svc.resolve(ServableRef("hp3"))).signature is first  # not rebuilt per request
    up.metas["hp3"] = ModelMetadata("hp3", ("123",), "python", (TensorSpec("x", "FP32", (-1, 2)),),
                                    (TensorSpec("y", "FP32", (-1,)),))  # Triton reloaded the model
    again = (await svc.resolve(ServableRef("hp3"))).signature
    assert again is not first and again.inputs[0][1].shape == (-1, 2)


async def test_a_batch_of_one_bytes_element_is_unbatched_to_an_array_and_answered():
    """A batching model's BYTES output of shape [1] for an input given without its batch dim: the
    output loses the batch dim the gateway added and stays an array (a bare bytes object crashed the
    writers: 500); the answer is TF Serving's, a scalar in columnar form, refused in row form."""
    from gateway.dialects.tfserving import codec

    meta = ModelMetadata("tok", ("1",), "python", (TensorSpec("x", "FP32", (-1, 4)),),
                         (TensorSpec("s", "BYTES", (-1,)),), max_batch_size=8)
    up = FakeUpstream(metas=[meta], infer=lambda req: InferResponse(
        "tok", "1", [Tensor("s", np.array([b"ab"], dtype=object), "BYTES")]))
    svc = Service(GatewayContext(Settings(), up), config.TFServingConfig())
    target = await svc.resolve(ServableRef("tok"))
    _, outs = await svc.predict(target, {"x": np.ones(4, np.float32)})
    arr, v2 = outs["s"]
    assert up.requests[0][0].inputs[0].shape == (1, 4)
    assert isinstance(arr, np.ndarray) and arr.shape == () and arr.item() == b"ab" and v2 == "BYTES"
    assert codec.write_predict(outs, row=False) == b'{\n    "outputs": "ab"\n}'
    with pytest.raises(GatewayError, match="has no shape information"):
        codec.write_predict(outs, row=True)


class CachingUpstream(FakeUpstream):
    """Serves the index and the metadata as the same objects while "cached", as TritonUpstream does,
    and counts the calls made for them."""

    def __init__(self):
        super().__init__(metas=[META], infer=_infer, index=INDEX)
        self.index_object = list(INDEX)
        self.calls = 0

    async def repository_index(self):
        self.calls += 1
        return self.index_object

    async def model_metadata(self, model, version=""):
        self.calls += 1
        return await super().model_metadata(model, version)

    def cached_index(self):
        return self.index_object

    def cached_metadata(self, model, version=""):
        return self.metas.get(model)


async def test_a_resolution_is_reused_without_a_call_while_the_cache_holds_its_sources():
    up = CachingUpstream()
    svc = Service(GatewayContext(Settings(), up), config.TFServingConfig.model_validate({}))
    first = await svc.resolve(ServableRef("hp3"))
    calls = up.calls
    assert await svc.resolve(ServableRef("hp3")) is first and up.calls == calls  # no await on the hot path
    up.metas["hp3"] = ModelMetadata("hp3", ("123",), "python", (TensorSpec("x", "FP32", (-1, 2)),),
                                    (TensorSpec("y", "FP32", (-1,)),))  # the cache now holds a new object
    again = await svc.resolve(ServableRef("hp3"))
    assert again is not first and again.signature.inputs[0][1].shape == (-1, 2) and up.calls > calls
    up.index_object = [ModelIndexEntry("hp3", "124", "READY")]  # a new index: resolved again
    assert await svc.resolve(ServableRef("hp3")) is not again
    assert (await svc.resolve(ServableRef("hp3", version=124))).version == 124


async def test_an_input_for_shared_memory_takes_upstream_infer_not_the_wire_plan():
    """Inputs of ``shared_from()`` bytes or more go through shared memory: the wire plan leaves them
    to ``Upstream.infer`` (which places them); smaller ones are written to the wire."""
    svc, up = service()
    up.shared = 16
    target = await svc.resolve(ServableRef("hp3"))
    _, small = await svc.predict(target, {"x": np.array([1.0, 2.0, 3.0], np.float32)})  # 12 bytes: the wire
    assert up.wired == 1 and small["y"][0].tolist() == [3.5, 4.0, 4.5]
    _, large = await svc.predict(target, {"x": np.arange(4, dtype=np.float32)})  # 16 bytes: Upstream.infer
    assert up.wired == 1 and len(up.requests) == 2 and large["y"][0].tolist() == [3.0, 3.5, 4.0, 4.5]


async def test_same_versions_selects_the_version_of_a_signature_over_another_model():
    """One Triton model per signature (gateway import tfserving): with same_versions a version or label
    reaches that version of the signature's model; without it, its default version (as before)."""
    other = ModelMetadata("hp3__other", ("1", "2"), "python", (TensorSpec("x", "FP32", (-1,)),),
                          (TensorSpec("y", "FP32", (-1,)),))
    index = [ModelIndexEntry("hp3", "1", "READY"), ModelIndexEntry("hp3", "2", "READY"),
             ModelIndexEntry("hp3__other", "1", "READY"), ModelIndexEntry("hp3__other", "2", "READY")]
    up = FakeUpstream(metas=[META, other], infer=_infer, index=index)
    sigs = {"follows": {"triton": "hp3__other", "same_versions": True}, "default": {"triton": "hp3__other"}}
    section = {"models": {"half": {"triton": "hp3", "version_labels": {"stable": 1}, "signatures": sigs}}}
    svc = Service(GatewayContext(Settings(), up), config.TFServingConfig.model_validate(section))
    follows = await svc.resolve(ServableRef("half", label="stable", signature="follows"))
    assert (follows.signature.triton, follows.triton_version) == ("hp3__other", "1")
    default = await svc.resolve(ServableRef("half", label="stable", signature="default"))
    assert (default.signature.triton, default.triton_version) == ("hp3__other", "")
