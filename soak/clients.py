"""The soak's clients: one function per kind of request, each returning one outcome.

    correct  the answer a well-behaved server gives (for a hostile request: its proper refusal)
    clean    a proper error in the dialect's envelope that the moment explains (Triton down:
             503 / UNAVAILABLE / GRPS FAILURE; deadline: 504 / DEADLINE_EXCEEDED)
    lost     anything else: no answer, a hang (socket timeout), a reset connection, a wrong
             body, or a 5xx for a client's mistake

Only 127.0.0.1: every URL and gRPC target is built from the ports the soak started itself.
"""

from __future__ import annotations

import http.client
import json
import os
import socket

import grpc
import numpy as np
import tritonclient.grpc as v2client
import tritonclient.http as v2http
from tritonclient.utils import InferenceServerException

from gateway._proto import grps_pb2, grps_pb2_grpc
from gateway._proto.tensorflow.core.framework import tensor_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

CORRECT, CLEAN, LOST = "correct", "clean", "lost"
TIMEOUT = 30.0  # no answer within this is a hang
TF_MODEL = "saved_model_half_plus_three"
UPSTREAM_DOWN_HTTP = (500, 503, 504)  # Triton gone (UNAVAILABLE), a call cut by its death, a deadline
UPSTREAM_DOWN_GRPC = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL)


class Clients:
    def __init__(self, ports: dict[str, int], oversize: int):
        self.ports = ports
        self.oversize = oversize  # bytes: just past the gateway's limits.max_request_bytes
        self._local = {}

    # -- plumbing ---------------------------------------------------------------------------------
    def _http(self, listener: str, method: str, path: str, body: bytes | None = None,
              headers: dict | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.ports[listener], timeout=TIMEOUT)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _channel(self, listener: str) -> grpc.Channel:
        key = (listener, os.getpid())
        ch = self._local.get(key)
        if ch is None:
            opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
            ch = self._local[key] = grpc.insecure_channel(f"127.0.0.1:{self.ports[listener]}", options=opts)
        return ch

    def close(self) -> None:
        for ch in self._local.values():
            ch.close()

    @staticmethod
    def _envelope(body: bytes, key: str) -> bool:
        try:
            doc = json.loads(body)
        except ValueError:
            return False
        return isinstance(doc, dict) and key in doc

    @staticmethod
    def _grpc_clean(e: grpc.RpcError) -> str:
        return CLEAN if e.code() in UPSTREAM_DOWN_GRPC and e.details() else LOST

    # -- steady load ------------------------------------------------------------------------------
    def tf_rest(self) -> str:
        status, body = self._http("tfserving_rest", "POST", f"/v1/models/{TF_MODEL}:predict",
                                  b'{"instances": [1.0, 2.0]}')
        if status == 200 and json.loads(body) == {"predictions": [3.5, 4.0]}:
            return CORRECT
        if status in UPSTREAM_DOWN_HTTP and self._envelope(body, "error"):
            return CLEAN
        return LOST, f"{status} {body[:160]!r}"  # what came instead, for the summary

    def tf_grpc(self) -> str:
        req = predict_pb2.PredictRequest()
        req.model_spec.name = TF_MODEL
        req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0, 2.0]))
        req.inputs["x"].tensor_shape.dim.add(size=2)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel("tfserving_grpc"))
        try:
            resp = stub.Predict(req, timeout=TIMEOUT)
        except grpc.RpcError as e:
            return self._grpc_clean(e)
        return CORRECT if list(resp.outputs["y"].float_val) == [3.5, 4.0] else LOST

    def grps_http(self) -> str:
        status, body = self._http("grps_http", "POST", "/grps/v1/infer/predict?model=your_model-1.0.0",
                                  b'{"str_data": "soak"}', {"Content-Type": "application/json"})
        try:
            doc = json.loads(body)
        except ValueError:
            return LOST
        code = doc.get("status", {}).get("code", status)  # GRPS's code is the body's (HTTP 200 by default)
        if code == 200:
            return CORRECT if doc.get("str_data") == "soak" and doc["status"]["status"] == "SUCCESS" else LOST
        failed = doc.get("status", {}).get("status") == "FAILURE"
        return CLEAN if code in UPSTREAM_DOWN_HTTP and failed else (LOST, f"{status} {body[:200]!r}")

    def grps_grpc(self) -> str:
        stub = grps_pb2_grpc.GrpsServiceStub(self._channel("grps_grpc"))
        try:
            resp = stub.Predict(grps_pb2.GrpsMessage(str_data="soak", model="your_model-1.0.0"), timeout=TIMEOUT)
        except grpc.RpcError as e:
            return self._grpc_clean(e)
        if resp.status.status == grps_pb2.Status.SUCCESS:
            return CORRECT if resp.str_data == "soak" else LOST
        return CLEAN if resp.status.code in UPSTREAM_DOWN_HTTP and resp.status.msg else LOST

    def v2_grpc(self) -> str:
        client = v2client.InferenceServerClient(f"127.0.0.1:{self.ports['v2_grpc']}")
        try:
            x = v2client.InferInput("x", [2], "FP32")
            x.set_data_from_numpy(np.array([1.0, 2.0], np.float32))
            y = client.infer(TF_MODEL, [x], client_timeout=TIMEOUT).as_numpy("y")
            return CORRECT if y.tolist() == [3.5, 4.0] else LOST
        except InferenceServerException as e:
            code = (e.status() or "").replace("StatusCode.", "")
            return CLEAN if code in {c.name for c in UPSTREAM_DOWN_GRPC} else LOST
        finally:
            client.close()

    def v2_http(self) -> str:
        """KServe V2 REST (:8000) through Triton's own HTTP client, the input as a binary tensor."""
        client = v2http.InferenceServerClient(f"127.0.0.1:{self.ports['v2_http']}", connection_timeout=TIMEOUT,
                                              network_timeout=TIMEOUT)
        try:
            x = v2http.InferInput("x", [2], "FP32")
            x.set_data_from_numpy(np.array([1.0, 2.0], np.float32), binary_data=True)
            y = client.infer(TF_MODEL, [x]).as_numpy("y")
            return CORRECT if y is not None and y.tolist() == [3.5, 4.0] else LOST
        except InferenceServerException as e:  # status: the HTTP status, as text
            return CLEAN if str(e.status()) in {str(s) for s in UPSTREAM_DOWN_HTTP} and e.message() else LOST
        finally:
            client.close()

    def openai_stream(self, vanish: bool = False) -> str:
        """A streamed chat completion read to ``data: [DONE]``; ``vanish``: the client closes the
        socket after the first event (the gateway must cancel the Triton request and carry on)."""
        body = json.dumps({"model": "tiny_llm", "stream": True, "max_tokens": 24,
                           "messages": [{"role": "user", "content": "soak test"}]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["mindie_http"], timeout=TIMEOUT)
        try:
            conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                answer = resp.read()
                ok = resp.status in UPSTREAM_DOWN_HTTP and self._envelope(answer, "error")
                return CLEAN if ok else (LOST, f"{resp.status} {answer[:200]!r}")
            events, seen = 0, []
            while True:
                line = resp.readline()
                if not line:  # the stream ended without [DONE] or an error event
                    return LOST, f"stream ended after {events} events: {seen[-3:]}"
                seen.append(line[:200])
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return CORRECT
                if self._envelope(data, "error"):
                    return CLEAN  # an in-band error event (Triton died mid-stream)
                events += 1
                if vanish:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    return CORRECT
        finally:
            conn.close()

    def grps_stream_cancel(self) -> str:
        """A GRPS gRPC stream over the LLM, cancelled by the client after its first message."""
        stub = grps_pb2_grpc.GrpsServiceStub(self._channel("grps_grpc"))
        call = stub.PredictStreaming(grps_pb2.GrpsMessage(str_data="soak stream", model="soak_llm-1"),
                                     timeout=TIMEOUT)
        try:
            first = next(call)
        except grpc.RpcError as e:
            return self._grpc_clean(e)
        except StopIteration:
            return LOST
        call.cancel()
        if first.status.status == grps_pb2.Status.FAILURE:
            return CLEAN if first.status.code in UPSTREAM_DOWN_HTTP else LOST
        return CORRECT

    # -- hostile requests: correct means the proper refusal ------------------------------------------
    def oversized_tf(self) -> str:
        """Content-Length past the limit: the 413 must come at once, before the body is sent."""
        head = (f"POST /v1/models/{TF_MODEL}:predict HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {self.oversize}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", self.ports["tfserving_rest"]), timeout=TIMEOUT) as sock:
            sock.sendall(head + b'{"instances": [' + b"1.0," * 1000)
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            status, answer = resp.status, resp.read()
        return CORRECT if status == 413 and self._envelope(answer, "error") else LOST

    def oversized_grpc(self) -> str:
        req = grps_pb2.GrpsMessage(str_data="x" * self.oversize, model="your_model-1.0.0")
        stub = grps_pb2_grpc.GrpsServiceStub(self._channel("grps_grpc"))
        try:
            stub.Predict(req, timeout=TIMEOUT)
        except grpc.RpcError as e:
            return CORRECT if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else LOST
        return LOST

    def malformed_tf(self) -> str:
        status, body = self._http("tfserving_rest", "POST", f"/v1/models/{TF_MODEL}:predict",
                                  b'{"instances": [1.0, 2.0}' + os.urandom(64))
        return CORRECT if status == 400 and self._envelope(body, "error") else LOST

    def malformed_v2_http(self) -> str:
        status, body = self._http("v2_http", "POST", f"/v2/models/{TF_MODEL}/infer", b'{"inputs": [{"name": "x",')
        if self._envelope(body, "error") and (status == 400 or status in UPSTREAM_DOWN_HTTP):
            return CORRECT if status == 400 else CLEAN  # as Triton, the model is found before the body is read
        return LOST, f"{status} {body[:200]!r}"

    def malformed_mindie(self) -> str:
        status, body = self._http("mindie_http", "POST", "/v1/chat/completions",
                                  b'{"model": "tiny_llm", "messages": "not a list", "top_p": 7}')
        if self._envelope(body, "error_type") and (status == 422 or status in UPSTREAM_DOWN_HTTP):
            return CORRECT if status == 422 else CLEAN  # the model is resolved first: 503 while Triton is down
        return LOST, f"{status} {body[:200]!r}"

    def malformed_grps(self) -> str:
        status, body = self._http("grps_http", "POST", "/grps/v1/infer/predict",
                                  b'{"gtensors": {"tensors": [{"dtype": "DT_FLOAT32", "shape": [1, 2], '
                                  b'"flat_float32": [1.0]}]}}', {"Content-Type": "application/json"})
        if self._envelope(body, "status") and isinstance(found := json.loads(body)["status"], dict):
            status = found.get("code", status)  # GRPS's code is the body's (HTTP 200 by default)
        if self._envelope(body, "status") and (status == 400 or status in UPSTREAM_DOWN_HTTP):
            return CORRECT if status == 400 else CLEAN  # GRPS resolves the model before it reads tensors
        return LOST, f"{status} {body[:200]!r}"

    def malformed_tensorproto(self) -> str:
        req = predict_pb2.PredictRequest()
        req.model_spec.name = TF_MODEL
        req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=b"abc"))
        req.inputs["x"].tensor_shape.dim.add(size=1)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel("tfserving_grpc"))
        try:
            stub.Predict(req, timeout=TIMEOUT)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.INVALID_ARGUMENT:
                return CORRECT
            return self._grpc_clean(e) if e.code() == grpc.StatusCode.UNAVAILABLE else LOST
        return LOST
