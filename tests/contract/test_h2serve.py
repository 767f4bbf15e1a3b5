"""The gRPC listeners served by gateway/h2/server.py (``grpc_server: h2``) held to grpc.aio's server
(``grpc_server: grpc``): two gateways in front of the session's Triton (the session's own, on h2serve,
and one on grpc.aio's server), the same requests with the
real grpcio client (TF Serving, GRPS, the V2 passthrough unary and ModelStreamInfer, grpc.health.v1)
give the same answer bytes, codes, details and trailing metadata; through h2serve a client's
deadline and a cancelled client stream reach Triton's call."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2

from gateway._proto import grps_pb2
from gateway._proto.tensorflow.core.example import example_pb2, feature_pb2
from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_pb2,
    predict_pb2,
    regression_pb2,
)
from gateway.call import current
from gateway.h2 import server as h2serve
from gateway.upstream import TritonUpstream
from tests.contract.test_passthrough import _llm_inputs
from tests.support import ROOT, free_port, gateway_config, running_worker, start_gateway, stop_gateway

HP3 = "saved_model_half_plus_three"
LISTENERS = ("tfserving_grpc", "grps_grpc", "v2_grpc", "admin_http")


@pytest.fixture(scope="module")
def gateways(gateway, triton, tmp_path_factory):
    """(a gateway on grpc.aio's server, the one on h2serve), with the contract tests' dialect settings:
    the h2serve one is the session's gateway (``grpc_server: h2`` is the default), so only the
    grpc.aio one is started here."""
    from gateway.settings import Settings

    assert Settings().grpc_server == "h2" and "grpc_server" not in gateway.config_path.read_text()
    dialects: dict = {}
    for f in sorted((ROOT / "tests" / "config").glob("*.yaml")):
        dialects.update((yaml.safe_load(f.read_text()) or {}).get("dialects") or {})
    ports = {name: free_port() for name in LISTENERS}
    cfg = gateway_config(triton.grpc_target, ports, {"dialects": dialects, "grpc_server": "grpc"})
    reference = start_gateway(cfg, tmp_path_factory.mktemp("gw-grpc"))
    try:
        yield reference, gateway
    finally:
        stop_gateway(reference)


@pytest.fixture(scope="module")
def channels(gateways):
    """listener -> (channel to the grpc.aio gateway, channel to the h2serve one)."""
    opened = {name: tuple(grpc.insecure_channel(gw.target(name)) for gw in gateways)
              for name in ("tfserving_grpc", "grps_grpc", "v2_grpc")}
    yield opened
    for pair in opened.values():
        for ch in pair:
            ch.close()


def _outcome(channel, path: str, request: bytes, n: int):
    """(answer bytes, code, details, trailing metadata) of one unary call, errors included."""
    md = (("x-request-id", f"diff-{n}"),)
    try:
        answer, call = channel.unary_unary(path).with_call(request, timeout=30, metadata=md)
        return answer, call.code(), call.details(), tuple(call.trailing_metadata())
    except grpc.RpcError as err:
        return None, err.code(), err.details(), tuple(err.trailing_metadata() or ())


def _same(pair, path: str, request: bytes, n: int):
    aio, h2 = (_outcome(ch, path, request, n) for ch in pair)
    if path.endswith("/GetModelMetadata") and aio[0] is not None and h2[0] is not None:
        # a map's entries are written in an order of each process's own (string hashing): compared decoded
        assert _signatures(h2[0]) == _signatures(aio[0])
        aio, h2 = aio[1:], h2[1:]
    assert h2 == aio, path
    return h2


def _signatures(answer: bytes):
    resp = get_model_metadata_pb2.GetModelMetadataResponse.FromString(answer)
    sdm = get_model_metadata_pb2.SignatureDefMap()
    assert resp.metadata["signature_def"].Unpack(sdm)
    return resp.model_spec, sdm


def _shape(*dims):
    return tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])


def _floats(values, name=HP3, key="x", dtype=types_pb2.DT_FLOAT):
    req = predict_pb2.PredictRequest()
    req.model_spec.name = name
    arr = np.asarray(values, dtype=np.float32)
    req.inputs[key].CopyFrom(tensor_pb2.TensorProto(dtype=dtype, tensor_shape=_shape(*arr.shape),
                                                    tensor_content=arr.tobytes()))
    return req.SerializeToString()


def _examples(*xs):
    return [example_pb2.Example(features=feature_pb2.Features(feature={
        "x": feature_pb2.Feature(float_list=feature_pb2.FloatList(value=[x]))})) for x in xs]


def _tf_requests():
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = HP3
    classify.model_spec.signature_name = "tensorflow/serving/classify"
    classify.input.example_list.examples.extend(_examples(1.0, 2.0))
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name = HP3
    regress.model_spec.signature_name = "tensorflow/serving/regress"
    regress.input.example_list.examples.extend(_examples(1.0))
    no_examples = classification_pb2.ClassificationRequest()
    no_examples.model_spec.name = HP3
    multi = inference_pb2.MultiInferenceRequest(tasks=[
        inference_pb2.InferenceTask(model_spec=model_pb2.ModelSpec(name=HP3, signature_name=sig), method_name=sig)
        for sig in ("tensorflow/serving/regress", "tensorflow/serving/classify")])
    multi.input.example_list.examples.extend(_examples(1.0))
    meta = get_model_metadata_pb2.GetModelMetadataRequest()
    meta.model_spec.name = HP3
    meta.metadata_field.append("signature_def")
    meta_bad = get_model_metadata_pb2.GetModelMetadataRequest()
    meta_bad.model_spec.name = HP3
    meta_bad.metadata_field.append("nope")
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = HP3
    status_unknown = get_model_status_pb2.GetModelStatusRequest()
    status_unknown.model_spec.name = "missing"
    predict = "/tensorflow.serving.PredictionService/"
    return [
        (predict + "Predict", _floats([1.0, 2.0, 5.0])),
        (predict + "Predict", _floats([[1.0], [2.0]])),
        (predict + "Predict", _floats([1.0], name="missing")),
        (predict + "Predict", _floats([1.0], key="nope")),
        (predict + "Predict", _floats([1.0], dtype=types_pb2.DT_STRING)),
        (predict + "Predict", b"\xff\xff\xff"),  # not a PredictRequest
        (predict + "Predict", b""),
        (predict + "Classify", classify.SerializeToString()),
        (predict + "Classify", no_examples.SerializeToString()),
        (predict + "Classify", b"\x0a\x05"),  # cut short
        (predict + "Regress", regress.SerializeToString()),
        (predict + "MultiInference", multi.SerializeToString()),
        (predict + "GetModelMetadata", meta.SerializeToString()),
        (predict + "GetModelMetadata", meta_bad.SerializeToString()),
        ("/tensorflow.serving.ModelService/GetModelStatus", status.SerializeToString()),
        ("/tensorflow.serving.ModelService/GetModelStatus", status_unknown.SerializeToString()),
        ("/tensorflow.serving.ModelService/HandleReloadConfigRequest",
         model_management_pb2.ReloadConfigRequest().SerializeToString()),
        ("/tensorflow.serving.PredictionService/Nope", b""),
    ]


def test_tf_serving_answers_the_same(channels):
    codes = set()
    for n, (path, request) in enumerate(_tf_requests()):
        codes.add(_same(channels["tfserving_grpc"], path, request, n)[-3])
    assert {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.UNIMPLEMENTED} <= codes


def test_health_answers_the_same(channels):
    check = "/grpc.health.v1.Health/Check"
    for listener in ("tfserving_grpc", "grps_grpc", "v2_grpc"):
        for service in ("", "tensorflow.serving.PredictionService", "inference.GRPCInferenceService", "nope"):
            _same(channels[listener], check, health_pb2.HealthCheckRequest(service=service).SerializeToString(), 0)
    for ch in channels["tfserving_grpc"]:
        watch = ch.unary_stream("/grpc.health.v1.Health/Watch")(health_pb2.HealthCheckRequest().SerializeToString(),
                                                                 timeout=30)
        first = health_pb2.HealthCheckResponse.FromString(next(watch))
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()


def test_grps_answers_the_same(channels):
    svc = "/grps.protos.v1.GrpsService/"
    cases = [(svc + "Predict", grps_pb2.GrpsMessage(str_data="hello").SerializeToString()),
             (svc + "Predict", grps_pb2.GrpsMessage().SerializeToString()),
             (svc + "Predict", b"\xff\xff"),
             (svc + "CheckLiveness", grps_pb2.GrpsMessage().SerializeToString()),
             (svc + "CheckReadiness", grps_pb2.GrpsMessage().SerializeToString()),
             (svc + "ServerMetadata", grps_pb2.GrpsMessage().SerializeToString())]
    for ch in channels["grps_grpc"]:  # both online (GRPS starts offline; other tests switch the session's gateway)
        ch.unary_unary(svc + "Online")(grps_pb2.GrpsMessage().SerializeToString(), timeout=30)
    for n, (path, request) in enumerate(cases):
        _same(channels["grps_grpc"], path, request, n)


def _infer(model: str, values=None) -> bytes:
    req = service_pb2.ModelInferRequest(model_name=model, id="d")
    x = req.inputs.add(name="x", datatype="FP32", shape=[len(values or [1.0])])
    x.contents.fp32_contents.extend(values or [1.0])
    return req.SerializeToString()


def test_v2_passthrough_answers_the_same(channels):
    svc = "/inference.GRPCInferenceService/"
    cases = [(svc + "ModelInfer", _infer(HP3, [1.0, 2.0])),
             (svc + "ModelInfer", _infer("missing")),
             (svc + "ModelInfer", b"\xff"),
             (svc + "ServerLive", b""),
             (svc + "ServerMetadata", b""),
             (svc + "ModelMetadata", service_pb2.ModelMetadataRequest(name=HP3).SerializeToString()),
             (svc + "ModelMetadata", service_pb2.ModelMetadataRequest(name="missing").SerializeToString()),
             (svc + "ModelConfig", service_pb2.ModelConfigRequest(name=HP3).SerializeToString()),
             (svc + "RepositoryModelLoad", service_pb2.RepositoryModelLoadRequest(model_name=HP3).SerializeToString())]
    for n, (path, request) in enumerate(cases):
        _same(channels["v2_grpc"], path, request, n)


def _stream_requests(prompt: str, max_tokens: int, rid: str):
    req = service_pb2.ModelInferRequest(model_name="tiny_llm", id=rid)
    for inp in _llm_inputs(prompt, max_tokens):
        req.inputs.append(inp._get_tensor())
        raw = inp._get_content()
        if raw is not None:
            req.raw_input_contents.append(raw)
    yield req.SerializeToString()


def _stream_outcome(channel, prompt: str, max_tokens: int, rid: str, timeout: float = 30):
    call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")(
        _stream_requests(prompt, max_tokens, rid), timeout=timeout, metadata=(("x-request-id", rid),))
    answers = []
    try:
        for item in call:
            answers.append(item)
    except grpc.RpcError as err:
        return answers, err.code(), err.details(), tuple(err.trailing_metadata() or ())
    return answers, call.code(), call.details(), tuple(call.trailing_metadata())


def test_v2_model_stream_infer_answers_the_same(channels):
    aio, h2 = (_stream_outcome(ch, "hello there", 4, "s1") for ch in channels["v2_grpc"])
    assert h2 == aio
    assert h2[1] is grpc.StatusCode.OK and len(h2[0]) >= 4


def _cancelled_in_triton(triton, rid: str) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if f"tiny_llm: request {rid} cancelled" in triton.log_tail(400):
            return True
        time.sleep(0.2)
    return False


async def test_a_client_deadline_reaches_tritons_call(triton, monkeypatch):
    """Through h2serve (an in-process worker), TF Serving Predict with a 2.5 s deadline: Triton's
    call is given what is left of it, not the listener's default."""
    given = []
    infer_bytes = TritonUpstream.infer_bytes

    async def recording(self, model, request):
        given.append(current().remaining())
        return await infer_bytes(self, model, request)

    monkeypatch.setattr(TritonUpstream, "infer_bytes", recording)
    port = free_port()
    async with running_worker({"tfserving_grpc": port}, triton.grpc_target, GRPC_SERVER="h2") as (worker, _):
        assert [type(s) for s in worker._grpc] == [h2serve.Server]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            answer = await ch.unary_unary("/tensorflow.serving.PredictionService/Predict")(
                _floats([1.0]), timeout=2.5)
            assert predict_pb2.PredictResponse.FromString(answer).outputs["y"].float_val == [3.5]
            await ch.unary_unary("/tensorflow.serving.PredictionService/Predict")(_floats([1.0]))
    assert 1.5 < given[0] <= 2.5
    assert given[1] > 2.5  # no client deadline: the listener's own


def test_a_cancelled_client_stream_cancels_tritons_request(gateways, triton):
    client = grpcclient.InferenceServerClient(gateways[1].target("v2_grpc"))
    got = []
    client.start_stream(callback=lambda result, error: got.append((result, error)))
    client.async_stream_infer("tiny_llm", _llm_inputs("cancel me", 100_000), request_id="h2-cancel")
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.stop_stream(cancel_requests=True)
    client.close()
    assert len(got) >= 2 and got[0][1] is None
    assert _cancelled_in_triton(triton, "h2-cancel"), triton.log_tail(30)
