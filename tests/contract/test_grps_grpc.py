"""GRPS gRPC (7081) against the real Triton, with GrpsService stubs compiled from proto/grps.proto
(the same descriptor as grps_apis' grps_pb2, so grps_apis clients send identical bytes)."""

from __future__ import annotations

import time

import grpc
import pytest
import yaml

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway._proto.grps_pb2 import DataType, GenericTensor, GrpsMessage

SUCCESS, FAILURE = grps_pb2.Status.SUCCESS, grps_pb2.Status.FAILURE


@pytest.fixture(scope="module")
def stub(gateway):
    channel = grpc.insecure_channel(gateway.target("grps_grpc"))
    yield grps_pb2_grpc.GrpsServiceStub(channel)
    stub_ = grps_pb2_grpc.GrpsServiceStub(channel)
    stub_.Online(GrpsMessage())
    channel.close()


def ok(msg):
    return msg.status.code == 200 and msg.status.msg == "OK" and msg.status.status == SUCCESS


def test_health_rpcs(stub):
    assert ok(stub.CheckLiveness(GrpsMessage()))
    assert ok(stub.Offline(GrpsMessage()))
    not_ready = stub.CheckReadiness(GrpsMessage())
    assert (not_ready.status.code, not_ready.status.status) == (503, FAILURE)
    assert ok(stub.Online(GrpsMessage()))
    assert ok(stub.CheckReadiness(GrpsMessage()))


def test_str_data(stub):
    r = stub.Predict(GrpsMessage(str_data="hello grps"))
    assert ok(r) and r.str_data == "hello grps"


def test_seed_gtensors(stub):
    req = GrpsMessage()
    req.gtensors.tensors.append(GenericTensor(name="in1", dtype=DataType.DT_INT32, shape=[3, 2], flat_int32=range(1, 7)))
    req.gtensors.tensors.append(GenericTensor(name="in2", dtype=DataType.DT_FLOAT64, shape=[3, 3],
                                              flat_float64=range(1, 10)))
    r = stub.Predict(req)
    assert ok(r)
    out1, out2 = r.gtensors.tensors
    assert (out1.name, out1.dtype, list(out1.shape), list(out1.flat_int32)) == ("out1", DataType.DT_INT32, [3, 2],
                                                                                 [1, 2, 3, 4, 5, 6])
    assert (out2.name, list(out2.shape), list(out2.flat_float64)) == ("out2", [3, 3], [float(v) for v in range(1, 10)])


def test_bin_data_and_gmap(stub):
    assert stub.Predict(GrpsMessage(bin_data=b"\x00\xffhello")).bin_data == b"\x00\xffhello"
    req = GrpsMessage()
    req.gmap.s_b["text"] = b"\xff\x00"
    assert dict(stub.Predict(req).gmap.s_b) == {"text_out": b"\xff\x00"}


def test_gmap_answers_bytes_in_the_map_the_request_used(stub):
    req = GrpsMessage()
    req.gmap.s_b["text"] = b"valid utf-8"
    r = stub.Predict(req)
    assert ok(r) and dict(r.gmap.s_b) == {"text_out": b"valid utf-8"} and not r.gmap.s_s
    req = GrpsMessage()
    req.gmap.s_s["text"] = "text"
    r = stub.Predict(req)
    assert ok(r) and dict(r.gmap.s_s) == {"text_out": "text"} and not r.gmap.s_b


def test_an_ndarray_message_is_a_400_in_the_body(stub):
    req = GrpsMessage()
    req.ndarray.SetInParent()  # NDArrayData is empty: ndarray is HTTP JSON only
    r = stub.Predict(req)
    assert (r.status.code, r.status.status) == (400, FAILURE) and "ndarray carries no data" in r.status.msg
    msgs = list(stub.PredictStreaming(req))
    assert len(msgs) == 1 and (msgs[0].status.code, msgs[0].status.status) == (400, FAILURE)


def test_model_selection(stub):
    req = GrpsMessage(model="saved_model_half_plus_three-123")
    req.gtensors.tensors.append(GenericTensor(name="x", dtype=DataType.DT_FLOAT32, shape=[2], flat_float32=[1, 5]))
    assert list(stub.Predict(req).gtensors.tensors[0].flat_float32) == [3.5, 5.5]
    assert stub.Predict(GrpsMessage(model="your_model-1.0.0", str_data="alias")).str_data == "alias"


def test_errors_travel_in_the_body_with_grpc_ok(stub):
    r = stub.Predict(GrpsMessage(model="no_such_model-1", str_data="x"))
    assert (r.status.code, r.status.msg, r.status.status) == (500, "Not found model: no_such_model-1", FAILURE)
    bad = GrpsMessage()
    bad.gtensors.tensors.append(GenericTensor(name="in1", dtype=DataType.DT_INT32, shape=[3, 2], flat_int32=[1]))
    r = stub.Predict(bad)
    assert (r.status.code, r.status.status) == (400, FAILURE) and "do not fill shape" in r.status.msg
    r = stub.Predict(GrpsMessage())
    assert r.status.code == 400 and "Have no legal member" in r.status.msg
    assert stub.Predict(GrpsMessage(str_data="still serving")).str_data == "still serving"


def test_metadata(stub):
    r = stub.ServerMetadata(GrpsMessage())
    assert ok(r) and "tiny_llm-1" in yaml.safe_load(r.str_data)["models"]
    # GRPS's template client asks ModelMetadata(str_data='your_model'): inference.yml's bare name
    r = stub.ModelMetadata(GrpsMessage(str_data="tiny_llm"))
    assert ok(r) and yaml.safe_load(r.str_data)["decoupled"] is True
    r = stub.ModelMetadata(GrpsMessage(str_data="your_model"))
    assert ok(r) and yaml.safe_load(r.str_data)["version"] == "1.0.0"
    # grps_handler.cc: anything else is status {404, "Not Found", FAILURE} with an empty str_data set
    not_found = GrpsMessage(str_data="")
    not_found.status.code, not_found.status.msg, not_found.status.status = 404, "Not Found", FAILURE
    for name in ("tiny_llm-1", "your_model-1.0.0", "", "nope"):
        r = stub.ModelMetadata(GrpsMessage(str_data=name))
        assert r.WhichOneof("data_oneof") == "str_data"
        assert r.SerializeToString(deterministic=True) == not_found.SerializeToString(deterministic=True)


def test_predict_streaming_delivers_messages_as_produced(stub):
    arrivals, texts = [], []
    start = time.monotonic()
    for msg in stub.PredictStreaming(GrpsMessage(model="tiny_llm-1", str_data="hello")):
        arrivals.append(time.monotonic() - start)
        assert ok(msg)
        texts.append(msg.str_data)
    assert len(texts) >= 8
    assert arrivals[-1] - arrivals[0] > 0.08  # tokens every 15 ms, not one burst at the end
    assert len({round(a, 2) for a in arrivals}) > len(arrivals) // 2


def test_stream_that_fails_ends_with_one_failure_message(stub):
    msgs = list(stub.PredictStreaming(GrpsMessage(model="no_such_model-1", str_data="x")))
    assert len(msgs) == 1 and (msgs[0].status.code, msgs[0].status.status) == (500, FAILURE)
