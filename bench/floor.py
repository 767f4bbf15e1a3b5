"""The floor: every path `make bench` measures, done the least possible way on the gateway's stack.

One process, like one gateway worker: uvloop, a Sanic server (``create_server``, TouchUp once) on
one port and a grpc.aio server on another, one grpc.aio channel to Triton. A client that goes away
cancels a stream, not a unary call, as the gateway's default ``upstream.cancel: streams`` (Triton
2.51 can crash on a cancelled call: wrk leaves requests in flight at the end of each run). No validation, no
metrics, no request ids, no deadlines, no errors worth the name: a reference for what Sanic and
grpc.aio cost by themselves, not a product. Each handler does only what its answer needs:

    gRPC  /inference.GRPCInferenceService/ModelInfer        the bytes forwarded (no serializers)
          /inference.GRPCInferenceService/ModelStreamInfer  the stream forwarded, message for message
          /tensorflow.serving.PredictionService/Predict     PredictRequest parsed, float_val → one
                                                            ModelInfer (raw FP32) → PredictResponse
    HTTP  POST /v1/models/<name>:predict    {"instances": [floats]} → orjson → one ModelInfer (raw
                                            FP32 "x") → {"predictions": y.tolist()} by orjson (the
                                            floor prototype of issue 20)
          POST /v2/models/<name>/infer      V2 REST: JSON "data" by numpy, or binary inputs sliced from the
                                            body → one ModelInfer → orjson JSON (binary_data_output: the
                                            raw outputs after the JSON header)
          POST /grps/v1/infer/predict       JSON gtensors → one ModelInfer of grps_echo → gtensors;
                                            application/octet-stream → BYTES input "text" → the bytes
          POST /infer                       MindIE native stream: {"inputs", "parameters": {"max_new_tokens"}}
                                            → one ModelStreamInfer of tiny_llm → each text_output as
                                            an SSE event {"token": {"id": [n], "text": ...}}, written
                                            when the next arrives: the last is the final event
                                            {"generated_text", "token": {"id": [n], "text": null}}
          POST /v1/chat/completions         OpenAI stream: the messages as the gateway's default chat
                                            template renders them → the same stream →
                                            each text_output as a chat.completion.chunk delta, then [DONE]
          GET  /ready                       200 once both servers listen

    python -m bench.floor TRITON_GRPC HTTP_PORT GRPC_PORT     (bench/stack.py starts and stops it)
"""

from __future__ import annotations

import asyncio
import signal
import struct
import sys

import grpc
import numpy as np
import orjson
import uvloop
from sanic import Sanic
from sanic.application.state import ApplicationServerInfo
from sanic.http import Http
from sanic.http.constants import HTTP
from sanic.response import raw
from sanic.touchup import TouchUp
from tritonclient.grpc import service_pb2

from gateway._proto.tensorflow.core.framework import types_pb2
from gateway._proto.tensorflow_serving.apis import predict_pb2
from gateway.upstream.cancel import uncancelled

OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
           ("grpc.enable_http_proxy", 0)]
JSON = "application/json"
OCTET = "application/octet-stream"
GRPS_MODEL = "grps_echo"
LLM_MODEL = "tiny_llm"
SSE = "text/event-stream"
# GRPS dtype ↔ V2 datatype and numpy type, for the gtensors floor
GRPS_TYPES = {"DT_INT32": ("INT32", np.int32), "DT_INT64": ("INT64", np.int64), "DT_FLOAT32": ("FP32", np.float32),
              "DT_FLOAT64": ("FP64", np.float64)}
V2_TYPES = {v2: (grps, np_type, "flat_" + grps[3:].lower()) for grps, (v2, np_type) in GRPS_TYPES.items()}
V2_NUMPY = {v2: np_type for v2, np_type in GRPS_TYPES.values()}


class Floor:
    def __init__(self, triton: str):
        self.channel = grpc.aio.insecure_channel(triton, options=OPTIONS)
        self.forward = self.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        self.forward_stream = self.channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        self.generate = self.channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=service_pb2.ModelInferRequest.SerializeToString,
            response_deserializer=service_pb2.ModelStreamInferResponse.FromString)
        self.infer = self.channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=service_pb2.ModelInferRequest.SerializeToString,
            response_deserializer=service_pb2.ModelInferResponse.FromString)

    # -- gRPC ---------------------------------------------------------------------------------------
    async def model_infer(self, request: bytes, _context) -> bytes:
        return await uncancelled(self.forward(request))

    async def model_stream_infer(self, requests, _context):
        async for answer in self.forward_stream(requests):
            yield answer

    async def predict(self, request: predict_pb2.PredictRequest, _context) -> predict_pb2.PredictResponse:
        req = service_pb2.ModelInferRequest(model_name=request.model_spec.name)
        for name, tensor in request.inputs.items():
            req.inputs.add(name=name, datatype="FP32", shape=[d.size for d in tensor.tensor_shape.dim])
            req.raw_input_contents.append(np.asarray(tensor.float_val, dtype=np.float32).tobytes())
        resp = await uncancelled(self.infer(req))
        out = predict_pb2.PredictResponse()
        out.model_spec.name = resp.model_name
        for spec, data in zip(resp.outputs, resp.raw_output_contents, strict=True):
            t = out.outputs[spec.name]
            t.dtype = types_pb2.DT_FLOAT
            for size in spec.shape:
                t.tensor_shape.dim.add(size=size)
            t.float_val.extend(np.frombuffer(data, dtype=np.float32).tolist())
        return out

    def grpc_handlers(self) -> list[grpc.GenericRpcHandler]:
        return [
            grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
                "ModelInfer": grpc.unary_unary_rpc_method_handler(self.model_infer),
                "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(self.model_stream_infer),
            }),
            grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", {
                "Predict": grpc.unary_unary_rpc_method_handler(
                    self.predict, request_deserializer=predict_pb2.PredictRequest.FromString,
                    response_serializer=predict_pb2.PredictResponse.SerializeToString),
            }),
        ]

    # -- HTTP ---------------------------------------------------------------------------------------
    async def tf_predict(self, request, name: str):
        x = np.asarray(orjson.loads(request.body)["instances"], dtype=np.float32)
        req = service_pb2.ModelInferRequest(model_name=name.partition(":")[0])
        req.inputs.add(name="x", datatype="FP32", shape=x.shape)
        req.raw_input_contents.append(x.tobytes())
        resp = await uncancelled(self.infer(req))
        y = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(tuple(resp.outputs[0].shape))
        return raw(orjson.dumps({"predictions": y.tolist()}), content_type=JSON)

    async def v2_infer(self, request, name: str):
        body = request.body
        size = int(request.headers.get("inference-header-content-length", len(body)))
        doc = orjson.loads(body[:size])
        req = service_pb2.ModelInferRequest(model_name=name)
        for t in doc["inputs"]:
            req.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
            if "data" in t:
                req.raw_input_contents.append(np.asarray(t["data"], dtype=V2_NUMPY[t["datatype"]]).tobytes())
            else:
                n = t["parameters"]["binary_data_size"]
                req.raw_input_contents.append(body[size:size + n])
                size += n
        resp = await uncancelled(self.infer(req))
        binary = doc.get("parameters", {}).get("binary_data_output", False)
        outputs, tail = [], []
        for spec, data in zip(resp.outputs, resp.raw_output_contents, strict=True):
            out = {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}
            if binary:
                out["parameters"] = {"binary_data_size": len(data)}
                tail.append(data)
            else:
                out["data"] = np.frombuffer(data, dtype=V2_NUMPY[spec.datatype]).tolist()
            outputs.append(out)
        head = orjson.dumps({"model_name": resp.model_name, "model_version": resp.model_version, "outputs": outputs})
        if not tail:
            return raw(head, content_type=JSON)
        return raw(head + b"".join(tail), content_type=OCTET, headers={"Inference-Header-Content-Length": str(len(head))})

    async def grps_predict(self, request):
        if request.content_type == OCTET:
            return await self.grps_bin(request.body)
        req = service_pb2.ModelInferRequest(model_name=GRPS_MODEL)
        for t in orjson.loads(request.body)["gtensors"]["tensors"]:
            datatype, np_type = GRPS_TYPES[t["dtype"]]
            values = next(v for k, v in t.items() if k.startswith("flat_"))
            req.inputs.add(name=t["name"], datatype=datatype, shape=t["shape"])
            req.raw_input_contents.append(np.asarray(values, dtype=np_type).tobytes())
        resp = await uncancelled(self.infer(req))
        tensors = []
        for spec, data in zip(resp.outputs, resp.raw_output_contents, strict=True):
            dtype, np_type, flat = V2_TYPES[spec.datatype]
            tensors.append({"name": spec.name, "shape": list(spec.shape), "dtype": dtype,
                            flat: np.frombuffer(data, dtype=np_type).tolist()})
        return raw(orjson.dumps({"status": {"code": 200, "msg": "OK", "status": "SUCCESS"},
                                 "gtensors": {"tensors": tensors}}), content_type=JSON)

    async def grps_bin(self, body: bytes):
        req = service_pb2.ModelInferRequest(model_name=GRPS_MODEL)
        req.inputs.add(name="text", datatype="BYTES", shape=[1])
        req.raw_input_contents.append(struct.pack("<I", len(body)) + body)
        resp = await uncancelled(self.infer(req))
        return raw(resp.raw_output_contents[0][4:], content_type=OCTET)

    async def llm_texts(self, prompt: str, max_tokens: int):
        """tiny_llm's streamed text_output pieces for ``prompt`` (one ModelStreamInfer)."""
        req = service_pb2.ModelInferRequest(model_name=LLM_MODEL)
        text = prompt.encode()
        for name, datatype, data in (("text_input", "BYTES", struct.pack("<I", len(text)) + text),
                                     ("max_tokens", "INT32", struct.pack("<i", max_tokens)),
                                     ("stream", "BOOL", b"\x01")):
            req.inputs.add(name=name, datatype=datatype, shape=[1, 1])
            req.raw_input_contents.append(data)
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        call = self.generate()
        await call.write(req)
        await call.done_writing()
        while True:
            answer = (await call.read()).infer_response
            if answer.raw_output_contents:
                yield answer.raw_output_contents[0][4:].decode()
            if answer.parameters["triton_final_response"].bool_param:
                return

    async def mindie_infer(self, request):
        doc = orjson.loads(request.body)
        resp = await request.respond(content_type=SSE)
        # MindIE's final event is the last token's, with generated_text: each event is written once the
        # next piece (or the end) arrives, as the gateway must (Triton says "final" in a response of its own)
        n, held, texts = 0, None, []
        async for text in self.llm_texts(doc["inputs"], doc["parameters"]["max_new_tokens"]):
            if held is not None:
                await resp.send(held)
            n += 1
            texts.append(text)
            held = b"data: " + orjson.dumps({"token": {"id": [n], "text": text}}) + b"\n\n"
        await resp.send(b"data: " + orjson.dumps({"generated_text": "".join(texts),
                                                  "token": {"id": [n], "text": None}}) + b"\n\n")
        await resp.eof()

    async def openai_chat(self, request):
        doc = orjson.loads(request.body)
        resp = await request.respond(content_type=SSE)
        # the prompt the gateway's default chat template renders for these messages: the same tokens
        prompt = "".join(f"{m['role']}: {m['content']}\n" for m in doc["messages"]) + "assistant:"
        async for text in self.llm_texts(prompt, doc["max_tokens"]):
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
            await resp.send(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.send(b"data: [DONE]\n\n")
        await resp.eof()

    def http_app(self) -> Sanic:
        app = Sanic("bench_floor", configure_logging=False)
        app.config.update({"ACCESS_LOG": False, "MOTD": False, "REQUEST_BUFFER_SIZE": 1 << 20})
        app.add_route(self.tf_predict, "/v1/models/<name>", methods=["POST"])
        app.add_route(self.v2_infer, "/v2/models/<name>/infer", methods=["POST"])
        app.add_route(self.grps_predict, "/grps/v1/infer/predict", methods=["POST"])
        app.add_route(self.mindie_infer, "/infer", methods=["POST"])
        app.add_route(self.openai_chat, "/v1/chat/completions", methods=["POST"])
        app.add_route(self.ready, "/ready", methods=["GET"])
        return app

    async def ready(self, _request):
        return raw(b"ready")


async def serve(triton: str, http_port: int, grpc_port: int) -> None:
    floor = Floor(triton)
    server = grpc.aio.server(options=OPTIONS[:2])
    server.add_generic_rpc_handlers(floor.grpc_handlers())
    if not server.add_insecure_port(f"127.0.0.1:{grpc_port}"):
        raise OSError(f"cannot listen on 127.0.0.1:{grpc_port}")
    await server.start()
    app = floor.http_app()
    srv = await app.create_server(host="127.0.0.1", port=http_port, return_asyncio_server=True, access_log=False)
    # Sanic's TouchUp drops its empty ``alt-svc:`` header only when server_info names one HTTP
    # version, which create_server does not record: named here while it runs, as the gateway does
    recorded, app.state.server_info = app.state.server_info, [ApplicationServerInfo(settings={"version": HTTP.VERSION_1})]
    try:
        await srv.startup()  # runs Sanic's TouchUp (TOUCHUP is on), as the gateway's worker does once
        if not getattr(Http, "__touched__", False):
            TouchUp.run(app)
    finally:
        app.state.server_info = recorded
    await srv.before_start()
    await srv.after_start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    srv.close()
    await server.stop(0)
    await floor.channel.close()


def main(argv: list[str]) -> None:
    triton, http_port, grpc_port = argv[0], int(argv[1]), int(argv[2])
    uvloop.run(serve(triton, http_port, grpc_port))


if __name__ == "__main__":
    main(sys.argv[1:])
