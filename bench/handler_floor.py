"""The gateway's own work per small TF REST predict, TF gRPC Predict and GRPS gtensors predict, against
the floor's, without sockets.

Both handlers run in one process on the same canned Triton answer, so what differs is only the
work each does around Sanic and grpc.aio (whose cost is the same for both and left out here):

    gateway   the edge (request id, admission, deadline, metrics, access line) around TF Serving's
              REST dispatch: path parsing, name resolution, JSON parse and validation, the V2
              request serialized by hand, the answer decoded and written in TF's float text
    floor     the least a Sanic + grpc.aio gateway does for the same predict: orjson, a
              ModelInferRequest built with protobuf, the answer through numpy and orjson

GRPS: the edge around GRPS's HTTP predict of the bench's two gtensors (``grps_echo``), against
``bench/floor.py``'s ``grps_predict``.

TF gRPC Predict: the edge around the PredictionServicer's Predict and its answer serializer, from
the request's bytes as grpc.aio hands them over (a stand-in context: no metadata, no deadline),
against ``bench/floor.py``'s Predict, from the same bytes parsed as grpc.aio parses them for it,
and its serializer.

Triton's side is a coroutine answering canned bytes (decoded by protobuf as grpc would). Prints
CPU µs per request for each (best of several rounds) and their ratio.

    .venv/bin/python -m bench.handler_floor [N]
"""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np
import orjson
from sanic.response import raw
from tritonclient.grpc import model_config_pb2, service_pb2

from gateway.call import Admission
from gateway.dialects.tfserving import config as tf_config
from gateway.dialects.tfserving import errors as tf_errors
from gateway.dialects.tfserving.http import dispatch
from gateway.dialects.tfserving.service import Service
from gateway.edge import Edge
from gateway.settings import Settings
from gateway.upstream import TritonUpstream

MODEL = "saved_model_half_plus_three"
BODY = b'{"instances": [1.0, 2.0, 5.0, 7.0]}'
PATH = f"/v1/models/{MODEL}:predict"


def _answer(x: np.ndarray) -> bytes:
    y = (x * 0.5 + 3).astype(np.float32)
    resp = service_pb2.ModelInferResponse(model_name=MODEL, model_version="123", id="r")
    out = resp.outputs.add(name="y", datatype="FP32", shape=list(y.shape))
    del out  # shape set above
    resp.raw_output_contents.append(y.tobytes())
    return resp.SerializeToString()


ANSWER = _answer(np.array([1.0, 2.0, 5.0, 7.0], np.float32))
GRPS_MODEL = "grps_echo"
GRPS_BODY = (b'{"gtensors":{"tensors":[{"name":"in1","dtype":"DT_INT32","shape":[3,2],"flat_int32":[1,2,3,4,5,6]},'
             b'{"name":"in2","dtype":"DT_FLOAT64","shape":[3,3],"flat_double":[1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,9.0]}]}}')


def _grps_answer() -> bytes:
    resp = service_pb2.ModelInferResponse(model_name=GRPS_MODEL, model_version="1", id="r")
    for name, arr in (("out1", np.arange(1, 7, dtype=np.int32).reshape(3, 2)),
                      ("out2", np.arange(1, 10, dtype=np.float64).reshape(3, 3))):
        resp.outputs.add(name=name, datatype="INT32" if arr.dtype == np.int32 else "FP64", shape=list(arr.shape))
        resp.raw_output_contents.append(arr.tobytes())
    return resp.SerializeToString()


GRPS_ANSWER = _grps_answer()


class CannedTriton(TritonUpstream):
    """The real upstream client but for the wire: metadata and inference answered from memory."""

    async def connect(self) -> None:
        self._channel = object()

        async def model_infer_bytes(data: bytes, timeout: float, **_grpc_kw):
            # the answer as gRPC receives it (infer_bytes): the request's model is its first field
            return GRPS_ANSWER if data[2:2 + data[1]] == GRPS_MODEL.encode() else ANSWER

        self._model_infer_bytes = model_infer_bytes

    async def _idempotent(self, method: str, request, timeout: float | None = None):
        if method == "RepositoryIndex":
            r = service_pb2.RepositoryIndexResponse()
            r.models.add(name=MODEL, version="123", state="READY")
            return r
        if method == "ModelMetadata" and request.name == GRPS_MODEL:
            r = service_pb2.ModelMetadataResponse(name=GRPS_MODEL, versions=["1"], platform="python")
            r.inputs.add(name="in1", datatype="INT32", shape=[-1, -1])
            r.inputs.add(name="in2", datatype="FP64", shape=[-1, -1])
            r.outputs.add(name="out1", datatype="INT32", shape=[-1, -1])
            r.outputs.add(name="out2", datatype="FP64", shape=[-1, -1])
            return r
        if method == "ModelMetadata":
            r = service_pb2.ModelMetadataResponse(name=MODEL, versions=["123"], platform="python")
            r.inputs.add(name="x", datatype="FP32", shape=[-1])
            r.outputs.add(name="y", datatype="FP32", shape=[-1])
            return r
        if method == "ModelConfig":
            return service_pb2.ModelConfigResponse(config=model_config_pb2.ModelConfig(name=request.name))
        raise AssertionError(method)


class Request:
    """What the TF REST route reads of a Sanic request."""

    __slots__ = ("path", "method", "headers", "body", "stream")

    def __init__(self):
        self.path, self.method, self.headers, self.body, self.stream = PATH, "POST", {}, BODY, None


async def gateway_loop(n: int) -> float:
    up = CannedTriton("127.0.0.1:1", cache_ttl=3600)
    await up.connect()
    service = Service(type("Ctx", (), {"upstream": up, "settings": Settings()})(), tf_config.TFServingConfig())
    edge = Edge("tfserving", "tfserving_rest", tf_errors.Rendering(), Admission(1024), 30.0, 600.0)

    async def route(request, path):
        return raw(await dispatch(service, request), content_type="application/json")

    endpoint = edge.http("rest", route)
    first = await endpoint(Request(), path=PATH)
    assert first.status == 200, first.body
    t0 = time.thread_time()
    for _ in range(n):
        await endpoint(Request(), path=PATH)
    return (time.thread_time() - t0) / n * 1e6


async def floor_loop(n: int) -> float:
    async def stub_infer(req, timeout):
        req.SerializeToString()  # what grpc does with the message
        return service_pb2.ModelInferResponse.FromString(ANSWER)

    async def predict(request, model: str):  # floor_tfrest.py's handler, as written there
        name = model.split(":")[0]
        x = np.asarray(orjson.loads(request.body)["instances"], dtype=np.float32)
        req = service_pb2.ModelInferRequest(model_name=name)
        t = req.inputs.add()
        t.name, t.datatype = "x", "FP32"
        t.shape.extend(x.shape)
        req.raw_input_contents.append(x.tobytes())
        resp = await stub_infer(req, timeout=30)
        y = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(tuple(resp.outputs[0].shape))
        return raw(orjson.dumps({"predictions": y.tolist()}), content_type="application/json")

    t0 = time.thread_time()
    for _ in range(n):
        await predict(Request(), f"{MODEL}:predict")
    return (time.thread_time() - t0) / n * 1e6


def _predict_request() -> bytes:
    from gateway._proto.tensorflow.core.framework import types_pb2
    from gateway._proto.tensorflow_serving.apis import predict_pb2

    r = predict_pb2.PredictRequest()
    r.model_spec.name = MODEL
    t = r.inputs["x"]
    t.dtype = types_pb2.DT_FLOAT
    t.tensor_shape.dim.add(size=4)
    t.float_val.extend([1.0, 2.0, 5.0, 7.0])
    return r.SerializeToString()


class _Context:
    """What the edge asks of a grpc.aio servicer context."""

    def invocation_metadata(self):
        return ()

    def time_remaining(self):
        return None

    def set_trailing_metadata(self, _md) -> None:
        pass


async def grpc_gateway_loop(n: int) -> float:
    from gateway.dialects.tfserving import grpc as tf_grpc

    up = CannedTriton("127.0.0.1:1", cache_ttl=3600)
    await up.connect()
    service = Service(type("Ctx", (), {"upstream": up, "settings": Settings()})(), tf_config.TFServingConfig())
    edge = Edge("tfserving", "tfserving_grpc", tf_errors.Rendering(), Admission(1024), 30.0, 600.0)
    handler = edge.unary("Predict", tf_grpc.PredictionServicer(service).Predict, tf_grpc._model_name)
    data, ctx = _predict_request(), _Context()  # Predict takes the request's bytes
    first = await handler(data, ctx)
    assert isinstance(first, bytes), first  # one float output: the answer written as bytes
    t0 = time.thread_time()
    for _ in range(n):
        tf_grpc._message_bytes(await handler(data, ctx))
    return (time.thread_time() - t0) / n * 1e6


def _canned_floor(answer: bytes):
    """``bench/floor.py``'s handlers (no channel), Triton's answer canned, the request serialized as grpc would."""
    from bench import floor

    async def stub_infer(req):
        req.SerializeToString()
        return service_pb2.ModelInferResponse.FromString(answer)

    f = floor.Floor.__new__(floor.Floor)
    f.infer = stub_infer
    return f


async def grpc_floor_loop(n: int) -> float:
    from gateway._proto.tensorflow_serving.apis import predict_pb2

    f = _canned_floor(ANSWER)
    data, parse, write = _predict_request(), predict_pb2.PredictRequest.FromString, predict_pb2.PredictResponse.SerializeToString
    t0 = time.thread_time()
    for _ in range(n):
        write(await f.predict(parse(data), None))
    return (time.thread_time() - t0) / n * 1e6


class GrpsRequest:
    """What GRPS's predict route reads of a Sanic request."""

    __slots__ = ("path", "method", "headers", "body", "stream", "app", "query_string", "content_type")

    def __init__(self, app=None):
        self.path, self.method, self.body, self.stream, self.app = "/grps/v1/infer/predict", "POST", GRPS_BODY, None, app
        self.headers, self.query_string = {"content-type": "application/json"}, ""
        self.content_type = "application/json"


async def grps_gateway_loop(n: int) -> float:
    from types import SimpleNamespace

    from gateway.context import GatewayContext
    from gateway.dialects.grps import config as grps_config
    from gateway.dialects.grps import http as grps_http
    from gateway.dialects.grps.service import GrpsService

    up = CannedTriton("127.0.0.1:1", cache_ttl=3600)
    await up.connect()
    svc = GrpsService(GatewayContext(Settings(), up), grps_config.GrpsSettings())
    app = SimpleNamespace(ctx=SimpleNamespace(grps=svc))
    edge = Edge("grps", "grps_http", svc.errors, Admission(1024), 30.0, 600.0)
    endpoint = edge.http("predict", grps_http._predict_triton)  # the route without a legacy section
    first = await endpoint(GrpsRequest(app))
    assert first.status == 200 and b'"out2"' in first.body, first.body
    t0 = time.thread_time()
    for _ in range(n):
        await endpoint(GrpsRequest(app))
    return (time.thread_time() - t0) / n * 1e6


async def grps_floor_loop(n: int) -> float:
    f = _canned_floor(GRPS_ANSWER)
    t0 = time.thread_time()
    for _ in range(n):
        await f.grps_predict(GrpsRequest())
    return (time.thread_time() - t0) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    from gateway.observe import logs

    logs.setup("WARNING", "json", False)  # no access lines on the terminal (their cost is measured with them on)
    gw = min(asyncio.run(gateway_loop(n)) for _ in range(5))
    fl = min(asyncio.run(floor_loop(n)) for _ in range(5))
    print(f"handler CPU µs per small TF REST predict: gateway {gw:.1f}, floor {fl:.1f}, ratio {gw / fl:.2f}")
    gw = min(asyncio.run(grpc_gateway_loop(n)) for _ in range(5))
    fl = min(asyncio.run(grpc_floor_loop(n)) for _ in range(5))
    print(f"handler CPU µs per small TF gRPC Predict: gateway {gw:.1f}, floor {fl:.1f}, ratio {gw / fl:.2f}")
    gw = min(asyncio.run(grps_gateway_loop(n)) for _ in range(5))
    fl = min(asyncio.run(grps_floor_loop(n)) for _ in range(5))
    print(f"handler CPU µs per GRPS gtensors predict: gateway {gw:.1f}, floor {fl:.1f}, ratio {gw / fl:.2f}")


if __name__ == "__main__":
    main()
