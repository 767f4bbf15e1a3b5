"""The cutover routes on the gRPC listeners (TF Serving :8500, GRPS :7081), with real clients.

No TF Serving or GRPS binary installs here, so the legacy server is a stand-in that speaks the
original wire: a second gateway with only those two gRPC listeners, in front of the session's Triton,
whose model mappings make some models answer exactly as the front gateway's Triton side does
(``same``: half_plus_two on both) and others differently by a known amount (``off``: the legacy
side is ``cutover_perturbed``, docs/models.md: ``y`` off by 1e-3, ``y2`` missing, ``y3`` extra, an
error for x >= 1000), or fail (``gone``: a Triton model that does not exist, NOT_FOUND). The front gateway has ``dialects.<d>.legacy.grpc`` pointing at it and
one route per model. What is checked: which side's answer the client gets (bytes), the status,
details and trailing metadata of a relayed error, the migration counters on /metrics, the mismatch
log, and that a failing or slow Triton side under ``shadow`` leaves the client's answer alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import grpc
import numpy as np
import pytest
import yaml

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway._proto.grps_pb2 import DataType, GenericTensor, GrpsMessage
from gateway._proto.tensorflow.core.example import example_pb2, feature_pb2
from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from gateway.cutover.record import read as read_mismatches
from gateway.cutover.report import collect, parse, render
from tests import acceptance
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

SUCCESS, FAILURE = grps_pb2.Status.SUCCESS, grps_pb2.Status.FAILURE


def _tf(triton: str, outputs: dict) -> dict:
    return {"triton": triton, "derived": False,
            "signatures": {"serving_default": {"inputs": {"x": "x"}, "outputs": outputs, "elementwise": True}}}


SAME = _tf("half_plus_two", {"y": "y", "y2": "y2"})
SAME["signatures"].update({
    "regress_x_to_y": {"method": "regress", "features": {"x": "x"}, "output": "y", "elementwise": True},
    "classify_x_to_y": {"method": "classify", "features": {"x": "x"}, "scores": "y", "elementwise": True}})
OFF = {"triton": "cutover_perturbed"}  # y = 0.5x + 2.001, y3 = 0.5x + 3; x >= 1000 refused
GONE = _tf("no_such_model", {"y": "y"})
# model -> (front's mapping, legacy's mapping, route settings on the front)
TF_MODELS = {
    "same": (SAME, SAME, {"route": "shadow"}),
    "off": (SAME, OFF, {"route": "shadow", "atol": 1e-5, "rtol": 1e-5}),
    "gone": (SAME, GONE, {"route": "shadow"}),
    "broken": (GONE, SAME, {"route": "shadow"}),
    "relay": (SAME, OFF, {"route": "legacy"}),
    "relay_gone": (SAME, GONE, {"route": "legacy"}),
    "split": (SAME, OFF, {"route": "canary", "canary_percent": 50, "sticky": "header:x-user"}),
    "canary_all": (SAME, OFF, {"route": "canary", "canary_percent": 100, "reverse_shadow": True}),
    "direct": (SAME, OFF, {}),  # the dialect's default route: triton
}
# GRPS: grps_echo echoes, so "off" has the legacy side add a constant input (an output the
# front's answer lacks); "gone" a Triton model that does not exist; "slow" a Triton side that
# takes seconds (tiny_llm) behind a fast legacy one
ECHO = {"triton_model": "grps_echo", "triton_version": "1", "str_input": "text", "str_output": "text_out"}
GRPS_MODELS = {
    "same-1": (ECHO, ECHO, {"route": "shadow"}),
    "off-1": (ECHO, {**ECHO, "inputs": {"i64": 7}}, {"route": "shadow"}),
    "gone-1": (ECHO, {**ECHO, "triton_model": "no_such_model"}, {"route": "shadow"}),
    "relay-1": (ECHO, {**ECHO, "inputs": {"i64": 7}}, {"route": "legacy"}),
    "relay_gone-1": (ECHO, {**ECHO, "triton_model": "no_such_model"}, {"route": "legacy"}),
    "slow-1": ({"triton_model": "tiny_llm", "triton_version": "1", "str_input": "text_input",
                "str_output": "text_output", "inputs": {"max_tokens": 64}}, ECHO, {"route": "shadow"}),
    "canary_all-1": (ECHO, {**ECHO, "inputs": {"i64": 7}}, {"route": "canary", "canary_percent": 100,
                                                            "reverse_shadow": True}),
}


@pytest.fixture(scope="module")
def legacy(triton, tmp_path_factory):
    ports = {"tfserving_grpc": free_port(), "grps_grpc": free_port(), "admin_http": free_port()}
    dialects = {"tfserving": {"models": {m: v[1] for m, v in TF_MODELS.items()}},
                "grps": {"start_online": True, "models": {m: v[1] for m, v in GRPS_MODELS.items()}}}
    gw = start_gateway(gateway_config(triton.grpc_target, ports, {"dialects": dialects}),
                       tmp_path_factory.mktemp("legacy"))
    yield gw
    stop_gateway(gw)


@pytest.fixture(scope="module")
def front(triton, legacy, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    ports = {"tfserving_grpc": free_port(), "grps_grpc": free_port(), "admin_http": free_port()}
    mismatches = {"path": str(tmp / "migration"), "per_model": 50}
    dialects = {
        "tfserving": {"models": {m: v[0] for m, v in TF_MODELS.items()},
                      "legacy": {"grpc": legacy.target("tfserving_grpc"), "route": "triton", "shadow_timeout_s": 20,
                                 "mismatches": mismatches, "models": {m: v[2] for m, v in TF_MODELS.items()}}},
        "grps": {"start_online": True, "models": {m: v[0] for m, v in GRPS_MODELS.items()},
                 "legacy": {"grpc": legacy.target("grps_grpc"), "route": "triton", "shadow_timeout_s": 20,
                            "mismatches": mismatches, "models": {m: v[2] for m, v in GRPS_MODELS.items()}}},
    }
    gw = start_gateway(gateway_config(triton.grpc_target, ports, {"dialects": dialects}), tmp)
    gw.mismatch_dir = tmp / "migration"
    yield gw
    stop_gateway(gw)


def _stub(gw, listener: str, stub_class):
    """A stub on a channel to ``gw``'s listener; ``stub.channel`` is the channel (for raw calls)."""
    channel = grpc.insecure_channel(gw.target(listener))
    stub = stub_class(channel)
    stub.channel = channel
    return stub


@pytest.fixture(scope="module")
def tf(front):
    stub = _stub(front, "tfserving_grpc", prediction_service_pb2_grpc.PredictionServiceStub)
    yield stub
    stub.channel.close()


@pytest.fixture(scope="module")
def tf_legacy(legacy):
    stub = _stub(legacy, "tfserving_grpc", prediction_service_pb2_grpc.PredictionServiceStub)
    yield stub
    stub.channel.close()


@pytest.fixture(scope="module")
def grps(front):
    stub = _stub(front, "grps_grpc", grps_pb2_grpc.GrpsServiceStub)
    yield stub
    stub.channel.close()


@pytest.fixture(scope="module")
def grps_legacy(legacy):
    stub = _stub(legacy, "grps_grpc", grps_pb2_grpc.GrpsServiceStub)
    yield stub
    stub.channel.close()


def _predict(model: str, values=(1.0, 2.0, 5.0)) -> predict_pb2.PredictRequest:
    arr = np.asarray(values, dtype=np.float32)
    req = predict_pb2.PredictRequest()
    req.model_spec.name = model
    req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT, tensor_content=arr.tobytes(),
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=arr.size)])))
    return req


PATHS = {"Predict": "/tensorflow.serving.PredictionService/Predict", "GrpsPredict": "/grps.protos.v1.GrpsService/Predict"}


def _raw(stub, method: str, request, metadata=()):
    """(answer bytes, trailing metadata) of a unary call, the answer left unparsed."""
    call_ = stub.channel.unary_unary(PATHS[method], request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=None)
    answer, call = call_.with_call(request, metadata=metadata, timeout=30)
    return answer, dict(call.trailing_metadata())


def _error(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, **kw)
    return info.value


def _migration(front) -> dict:
    with urllib.request.urlopen(front.url("admin_http") + "/metrics", timeout=10) as r:
        return parse(r.read().decode())


def _wait_counts(front, dialect: str, model: str, want: dict[str, int], timeout: float = 60):
    """The model's migration outcome counts once they reach ``want`` (the shadow runs in the background)."""
    end = time.monotonic() + timeout
    got = None
    while time.monotonic() < end:
        got = _migration(front).get((dialect, model))
        if got is not None and all(got.counts.get(k, 0) >= v for k, v in want.items()):
            return got
        time.sleep(0.2)
    raise AssertionError(f"{dialect}/{model}: counts {got and dict(got.counts)} never reached {want}")


# -- TF Serving gRPC ------------------------------------------------------------------------------------
def test_tf_legacy_route_relays_answer_bytes_unchanged(tf, tf_legacy):
    direct, _ = _raw(tf_legacy, "Predict", _predict("relay"))
    relayed, trailing = _raw(tf, "Predict", _predict("relay"), metadata=(("x-request-id", "cut-1"),))
    assert relayed == direct  # the legacy server's bytes (cutover_perturbed's y and y3)
    assert sorted(predict_pb2.PredictResponse.FromString(relayed).outputs) == ["y", "y3"]
    assert trailing["x-request-id"] == "cut-1"


def test_tf_legacy_route_relays_status_and_details_unchanged(tf, tf_legacy):
    want = _error(tf_legacy.Predict, _predict("relay_gone"), timeout=30)
    got = _error(tf.Predict, _predict("relay_gone"), timeout=30, metadata=(("x-request-id", "cut-2"),))
    assert (got.code(), got.details()) == (want.code(), want.details())
    assert want.code() != grpc.StatusCode.OK and want.details()
    assert dict(got.trailing_metadata())["x-request-id"] == "cut-2"


def test_tf_triton_route_never_calls_legacy(tf, front):
    resp = tf.Predict(_predict("direct"), 30)
    assert list(resp.outputs["y"].float_val) == [2.5, 3.0, 4.5]  # the front's Triton side: 0.5x + 2
    assert ("tfserving", "direct") not in _migration(front)


def test_tf_shadow_identical_model_all_match(tf, tf_legacy, front):
    for i in range(5):
        req = _predict("same", (float(i), 2.0 * i))
        assert _raw(tf, "Predict", req)[0] == _raw(tf_legacy, "Predict", req)[0]
    got = _wait_counts(front, "tfserving", "same", {"match": 5})
    assert got.counts.get("mismatch", 0) == 0 and got.compared == 5 and got.agreement == 1.0


def test_tf_shadow_perturbed_model_client_gets_legacy_and_mismatch_is_named(tf, tf_legacy, front):
    req = _predict("off", (1.0, 2.0, 5.0))
    assert _raw(tf, "Predict", req)[0] == _raw(tf_legacy, "Predict", req)[0]  # the client's answer is the legacy's
    got = _wait_counts(front, "tfserving", "off", {"mismatch": 1})
    assert got.errors["y"]["abs"] == pytest.approx(1e-3, rel=1e-3)
    lines = [rec for rec in read_mismatches(front.mismatch_dir, "tfserving") if rec["model"] == "off"]
    assert lines, "the mismatch is recorded"
    outputs = lines[0]["outputs"]
    assert outputs["y"]["reason"] == "values" and outputs["y"]["max_abs"] == pytest.approx(1e-3, rel=1e-3)
    assert outputs["y2"]["reason"] == "missing in legacy" and outputs["y3"]["reason"] == "missing in triton"
    # the perturbed model's own error (x >= 1000): the client gets the legacy's status and words
    want = _error(tf_legacy.Predict, _predict("off", (1000.0,)), timeout=30)
    got_err = _error(tf.Predict, _predict("off", (1000.0,)), timeout=30)
    assert (got_err.code(), got_err.details()) == (want.code(), want.details())
    assert "x >= 1000 refused" in want.details()
    _wait_counts(front, "tfserving", "off", {"legacy_error": 1})


def test_tf_shadow_legacy_error_is_the_clients_and_counted(tf, tf_legacy, front):
    want = _error(tf_legacy.Predict, _predict("gone"), timeout=30)
    got = _error(tf.Predict, _predict("gone"), timeout=30)
    assert (got.code(), got.details()) == (want.code(), want.details())
    _wait_counts(front, "tfserving", "gone", {"legacy_error": 1})


def test_tf_shadow_failing_triton_never_changes_the_clients_answer(tf, tf_legacy, front):
    req = _predict("broken")
    assert _raw(tf, "Predict", req)[0] == _raw(tf_legacy, "Predict", req)[0]
    _wait_counts(front, "tfserving", "broken", {"triton_error": 1})


def test_tf_canary_is_sticky_by_header_and_splits(tf):
    sides = {}
    for user in range(40):
        md = (("x-user", f"user-{user}"),)
        first = list(tf.Predict(_predict("split", (2.0,)), 30, metadata=md).outputs["y"].float_val)
        again = list(tf.Predict(_predict("split", (2.0,)), 30, metadata=md).outputs["y"].float_val)
        assert first == again  # sticky: the same user, the same side
        sides[user] = first
    seen = {v[0] for v in sides.values()}
    assert len(seen) == 2 and 3.0 in seen  # Triton's 0.5x + 2 and the legacy's 0.5x + 2.001


def test_tf_canary_all_to_triton_shadows_legacy_in_reverse(tf, front):
    resp = tf.Predict(_predict("canary_all", (2.0,)), 30)
    assert list(resp.outputs["y"].float_val) == [3.0] and "y2" in resp.outputs  # Triton answered
    got = _wait_counts(front, "tfserving", "canary_all", {"mismatch": 1})
    assert got.errors["y"]["abs"] == pytest.approx(1e-3, rel=1e-3) and got.routes == {"canary"}


def _examples(request, model: str | None, signature: str = "", xs=(1.0, 4.0)):
    if model is not None:
        request.model_spec.name = model
        request.model_spec.signature_name = signature
    for x in xs:
        ex = example_pb2.Example()
        ex.features.feature["x"].CopyFrom(feature_pb2.Feature(float_list=feature_pb2.FloatList(value=[x])))
        request.input.example_list.examples.append(ex)
    return request


def test_tf_other_methods_shadowed_and_compared(tf, tf_legacy, front):
    """Classify, Regress, MultiInference, GetModelMetadata on the identical model: the legacy's
    bytes to the client, every comparison a match; GetModelStatus and Regress relayed on ``relay``."""
    calls = [
        ("Classify", _examples(classification_pb2.ClassificationRequest(), "same", "classify_x_to_y")),
        ("Regress", _examples(regression_pb2.RegressionRequest(), "same", "regress_x_to_y")),
        ("GetModelMetadata", get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec={"name": "same"}, metadata_field=["signature_def"])),
    ]
    multi = _examples(inference_pb2.MultiInferenceRequest(), None)
    for sig, method in (("regress_x_to_y", "tensorflow/serving/regress"), ("classify_x_to_y", "tensorflow/serving/classify")):
        task = multi.tasks.add(method_name=method)
        task.model_spec.name, task.model_spec.signature_name = "same", sig
    calls.append(("MultiInference", multi))
    for method, req in calls:
        path = f"/tensorflow.serving.PredictionService/{method}"
        PATHS[method] = path
        assert _raw(tf, method, req)[0] == _raw(tf_legacy, method, req)[0], method
    got = _wait_counts(front, "tfserving", "same", {"match": 4})
    assert got.counts.get("mismatch", 0) == 0 and got.counts.get("triton_error", 0) == 0
    status = get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "relay"})
    front_models = model_service_pb2_grpc.ModelServiceStub(tf.channel)
    legacy_models = model_service_pb2_grpc.ModelServiceStub(tf_legacy.channel)
    assert front_models.GetModelStatus(status, 30) == legacy_models.GetModelStatus(status, 30)


def test_tf_real_tensorflow_serving_api_client_on_every_route(front, legacy):
    """tensorflow-serving-api's own stubs (the wheel, tests/legacy/tfserving_cutover_client.py):
    on ``legacy``, ``shadow`` and a perturbed ``shadow`` the answers are the legacy server's,
    field for field; on ``triton`` the front's own (not the perturbed legacy's)."""
    env = dict(os.environ, PYTHONPATH=f"{acceptance.compiled_tensorflow_protos()}:{ROOT / '.run' / 'legacy-clients'}")
    models = ["relay", "relay_gone", "same", "off", "direct"]

    def run(gw) -> dict:
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "legacy" / "tfserving_cutover_client.py"),
                               gw.target("tfserving_grpc"), *models], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    via_front, direct = run(front), run(legacy)
    for model in ("relay", "relay_gone", "same", "off"):
        assert via_front[model] == direct[model], model
    assert via_front["relay_gone"][0] == "NOT_FOUND"
    assert via_front["relay"][1] == "tfs-relay"  # the client's request id, back once
    assert via_front["direct"][0] != direct["direct"][0]  # triton: the front's half_plus_two, not cutover_perturbed


def test_tf_route_change_in_the_file_applies_without_restart(tf, front):
    """``direct`` moved from triton to legacy by editing the front's YAML, and back: the next calls
    follow (the routes are reloaded from the file, gateway/cutover/routing.py)."""
    y = lambda: list(tf.Predict(_predict("direct", (2.0,)), 30).outputs["y"].float_val)  # noqa: E731
    assert y() == [3.0]  # Triton's half_plus_two
    original = front.config_path.read_text()
    doc = yaml.safe_load(original)
    doc["dialects"]["tfserving"]["legacy"]["models"]["direct"] = {"route": "legacy"}
    try:
        front.config_path.write_text(yaml.safe_dump(doc))
        end = time.monotonic() + 10
        while y() == [3.0]:
            assert time.monotonic() < end, "the route change was not picked up"
            time.sleep(0.1)
        assert y() == pytest.approx([3.001])  # cutover_perturbed, through the legacy server
    finally:
        front.config_path.write_text(original)
    end = time.monotonic() + 10
    while y() != [3.0]:
        assert time.monotonic() < end, "the route change back was not picked up"
        time.sleep(0.1)


# -- GRPS gRPC ---------------------------------------------------------------------------------------------
def _grps_req(model: str, text: str = "hello") -> GrpsMessage:
    return GrpsMessage(model=model, str_data=text)


def _grps_tensors(model: str) -> GrpsMessage:
    req = GrpsMessage(model=model)
    req.gtensors.tensors.append(GenericTensor(name="f32", dtype=DataType.DT_FLOAT32, shape=[2], flat_float32=[1.5, 2]))
    return req


def test_grps_legacy_route_relays_unary_and_streams(grps, grps_legacy):
    req = _grps_tensors("relay-1")
    assert _raw(grps, "GrpsPredict", req)[0] == _raw(grps_legacy, "GrpsPredict", req)[0]
    gone = _grps_req("relay_gone-1")
    want = grps_legacy.Predict(gone, 30)
    assert want.status.status == FAILURE
    assert grps.Predict(gone, 30).SerializeToString() == want.SerializeToString()
    stream_req = _grps_req("relay-1", "streamed")
    direct = [m.SerializeToString() for m in grps_legacy.PredictStreaming(stream_req, 30)]
    relayed = [m.SerializeToString() for m in grps.PredictStreaming(stream_req, 30)]
    assert relayed == direct and direct


def test_grps_shadow_identical_perturbed_and_failing(grps, grps_legacy, front):
    for model in ("same-1", "off-1", "gone-1"):
        req = _grps_tensors(model)
        assert grps.Predict(req, 30).SerializeToString() == grps_legacy.Predict(req, 30).SerializeToString()
    assert _wait_counts(front, "grps", "same-1", {"match": 1}).counts.get("mismatch", 0) == 0
    _wait_counts(front, "grps", "off-1", {"mismatch": 1})
    _wait_counts(front, "grps", "gone-1", {"legacy_error": 1})
    lines = [rec for rec in read_mismatches(front.mismatch_dir, "grps") if rec["model"] == "off-1"]
    assert lines and lines[0]["outputs"]["i64_out"]["reason"] == "missing in triton"


def test_grps_shadow_slower_different_triton_leaves_the_client_alone(grps, grps_legacy, front):
    """The Triton side is another, slower model (tiny_llm: a token every 15 ms) answering other
    text: the client gets the legacy's bytes and the difference is counted. (A Triton that hangs,
    under a client deadline shorter than the shadow's: tests/unit/cutover/test_grpc_relay.py.)"""
    req = _grps_req("slow-1", "hi")
    got = grps.Predict(req, 30)
    assert got.SerializeToString() == grps_legacy.Predict(req, 30).SerializeToString()
    assert got.status.status == SUCCESS and got.str_data == "hi"
    _wait_counts(front, "grps", "slow-1", {"mismatch": 1})


def test_grps_canary_all_to_triton(grps, front):
    got = grps.Predict(_grps_tensors("canary_all-1"), 30)
    assert got.status.status == SUCCESS and [t.name for t in got.gtensors.tensors] == ["f32_out"]  # Triton's
    _wait_counts(front, "grps", "canary_all-1", {"mismatch": 1})


def test_grps_shadow_stream_client_gets_legacy_messages_and_streams_are_compared(grps, grps_legacy, front):
    before = _migration(front).get(("grps", "same-1"))
    matched = before.counts.get("match", 0) if before else 0
    req = _grps_req("same-1", "streamed words")
    direct = [m.SerializeToString() for m in grps_legacy.PredictStreaming(req, 30)]
    got = [m.SerializeToString() for m in grps.PredictStreaming(req, 30)]
    assert got == direct and direct
    _wait_counts(front, "grps", "same-1", {"match": matched + 1})


def test_report_after_the_grpc_routes(front):
    """``gateway migration report``'s reading of these runs (docs/migration.md quotes it): the
    identical models ready (no mismatch, no error), the perturbed and failing ones not, each named."""
    models = collect(front.url("admin_http") + "/metrics", [str(front.mismatch_dir)])
    text = render(models, 5)
    print("\n" + text)
    by = {(m.dialect, m.model): m for m in models}
    assert by[("tfserving", "same")].verdict(5) == "ready to cut over"
    assert by[("tfserving", "same")].agreement == 1.0
    # protobuf answers have no field order or float spelling: the identical models' answers are plain
    # matches, though the two gateways write PredictResponse's outputs map in orders of their own
    assert by[("tfserving", "same")].formats == {} and by[("grps", "same-1")].formats == {}
    assert "same: " not in text.split("differences:")[-1]
    assert by[("tfserving", "off")].verdict(5).startswith("not ready")
    assert by[("tfserving", "off")].differing == {"y": "values", "y2": "missing in legacy", "y3": "missing in triton",
                                                  "model_spec": "values"}  # cutover_perturbed is version 1, not 123
    assert by[("tfserving", "broken")].counts["triton_error"] >= 1
    assert by[("grps", "off-1")].differing == {"i64_out": "missing in triton"}
