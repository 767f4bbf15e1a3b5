"""What is measured: for every path, the request through the gateway and the same work sent to
Triton directly, each with a check of its answer (a benchmark of error pages would be worthless).

| path                     | through the gateway                         | directly to Triton                                  |
|--------------------------|---------------------------------------------|-----------------------------------------------------|
| V2 gRPC unary            | ModelInfer on :v2_grpc (passthrough)        | the same bytes on Triton's gRPC port                |
| V2 gRPC streamed         | ModelStreamInfer, one message per turn      | the same on Triton's gRPC port                      |
| V2 REST small, JSON      | POST :v2_http /v2/models/M/infer, 4 FP32    | the same body on Triton's HTTP port                 |
| V2 REST small, binary    | the same, binary tensor extension in/out    | the same body on Triton's HTTP port                 |
| TF Serving REST small    | POST :predict {"instances": [1, 2, 5, 7]}   | Triton HTTP /v2/models/M/infer, the same 4 FP32     |
| TF Serving REST image    | :predict with 150,528 floats (3x224x224)    | Triton HTTP JSON infer with the same number text    |
| TF Serving gRPC Predict  | PredictRequest, 4 floats (float_val)        | ModelInfer, the same 4 FP32                         |
| GRPS gtensors JSON       | the GRPS seed's gtensors (in1, in2)         | Triton HTTP JSON infer of grps_echo, same tensors   |
| GRPS bin_data 16 MiB     | octet-stream body, echoed                   | Triton HTTP binary extension, the same bytes        |
| LLM stream (tiny_llm)    | MindIE native POST /infer, stream=true      | Triton HTTP /v2/models/tiny_llm/generate_stream     |
| LLM stream (tiny_llm)    | OpenAI /v1/chat/completions, stream=true    | the same                                            |

All on saved_model_half_plus_three (y = x/2 + 3, input ``x`` FP32 [-1], so it takes the
image-sized vector as is), grps_echo and tiny_llm from model_repository/.

The floor (``Case.floor``, added by ``with_floors``): the gateway side's request and answer check,
sent to bench/floor.py, which does the same path the least possible way on the same stack (Sanic,
grpc.aio, one ModelInfer; for the LLM streams one ModelStreamInfer, its pieces written as SSE events).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import numpy as np
import orjson
from tritonclient.grpc import service_pb2

from gateway._proto.tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from gateway._proto.tensorflow_serving.apis import predict_pb2

HPT = "saved_model_half_plus_three"
SMALL = [1.0, 2.0, 5.0, 7.0]
SMALL_Y = [3.5, 4.0, 5.5, 6.5]
IMAGE_FLOATS = 3 * 224 * 224  # 150,528
BIN_BYTES = 16 * 1024 * 1024
# tiny_llm's natural length is above LLM_TOKENS for this prompt as it is and as the chat template
# renders it: every side of an LLM row streams exactly LLM_TOKENS tokens (the answer check asks it)
LLM_PROMPT = "benchmark prompt"
LLM_TOKENS = 16
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
TF_PREDICT = "/tensorflow.serving.PredictionService/Predict"
TF_PREDICT_PATH = f"/v1/models/{HPT}:predict"
JSON = {"Content-Type": "application/json"}


class BadAnswer(AssertionError):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise BadAnswer(what)


@dataclass
class Side:
    """One way of sending a case's request: ``kind`` is http, grpc_unary, grpc_stream or llm."""

    how: str
    kind: str
    address: str  # URL for http/llm, host:port for gRPC
    body: bytes
    check: Callable[[bytes], None]
    method: str = ""  # gRPC method
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))
    is_token: Callable[[bytes], bool] | None = None


@dataclass
class Case:
    key: str
    title: str
    payload: str
    concurrency: int
    direct: Side
    gateway: Side
    floor: Side | None = None  # the same request to bench/floor.py (with_floors)


# -- requests and their checks ------------------------------------------------------------------
def _v2_request(values: list[float]) -> bytes:
    req = service_pb2.ModelInferRequest(model_name=HPT)
    req.inputs.add(name="x", datatype="FP32", shape=[len(values)])
    req.raw_input_contents.append(np.asarray(values, dtype=np.float32).tobytes())
    return req.SerializeToString()


def _check_v2(raw: bytes) -> None:
    resp = service_pb2.ModelInferResponse.FromString(raw)
    y = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).tolist()
    expect(y == SMALL_Y, f"ModelInfer answered {y}")


def _check_v2_stream(raw: bytes) -> None:
    resp = service_pb2.ModelStreamInferResponse.FromString(raw)
    expect(not resp.error_message, f"ModelStreamInfer error: {resp.error_message}")
    _check_v2(resp.infer_response.SerializeToString())


def _tf_predict_request(values: list[float]) -> bytes:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = HPT
    req.inputs["x"].CopyFrom(tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT, float_val=values,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(values))])))
    return req.SerializeToString()


def _check_tf_predict(raw: bytes) -> None:
    y = list(predict_pb2.PredictResponse.FromString(raw).outputs["y"].float_val)
    expect(y == SMALL_Y, f"Predict answered {y}")


def _v2_json(inputs: list[dict]) -> bytes:
    return orjson.dumps({"inputs": inputs})


def _check_v2_json(expected: dict[str, list]) -> Callable[[bytes], None]:
    def check(raw: bytes) -> None:
        outs = {o["name"]: o["data"] for o in json.loads(raw)["outputs"]}
        for name, want in expected.items():
            got = outs.get(name)
            expect(got is not None and len(got) == len(want) and np.allclose(got, want, rtol=1e-6),
                   f"output {name}: {str(got)[:80]}")
    return check


def _v2_binary_small() -> tuple[bytes, dict[str, str]]:
    """The small request in the binary tensor extension, the answer asked for in binary too."""
    header = orjson.dumps({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32",
                                       "parameters": {"binary_data_size": 16}}],
                           "parameters": {"binary_data_output": True}})
    return header + np.asarray(SMALL, dtype=np.float32).tobytes(), {
        "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}


def _check_v2_binary_small(raw: bytes) -> None:
    expect(raw.endswith(np.asarray(SMALL_Y, dtype=np.float32).tobytes()), f"binary answer {raw[-40:]!r}")


def _check_predictions(want: np.ndarray) -> Callable[[bytes], None]:
    def check(raw: bytes) -> None:
        got = json.loads(raw).get("predictions")
        expect(got is not None and len(got) == len(want) and np.allclose(got, want, rtol=1e-6),
               f"predictions {str(got)[:80]}")
    return check


def image_values() -> np.ndarray:
    return np.random.default_rng(0).random(IMAGE_FLOATS, dtype=np.float32)


def bin_payload() -> bytes:
    return np.random.default_rng(1).integers(0, 256, BIN_BYTES, dtype=np.uint8).tobytes()


def _binary_ext_request(payload: bytes, every_output: bool = False) -> tuple[bytes, dict[str, str]]:
    """KServe V2 HTTP binary-data extension: a JSON header, then one BYTES element (4-byte length +
    bytes) to grps_echo; its answer in binary, asked for by name (``text_out``) or, ``every_output``,
    by the request's ``binary_data_output`` (what a V2 client moving large tensors sends)."""
    ask = {"parameters": {"binary_data_output": True}} if every_output else \
        {"outputs": [{"name": "text_out", "parameters": {"binary_data": True}}]}
    header = orjson.dumps({
        "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(payload) + 4}}],
        **ask,
    })
    return header + struct.pack("<I", len(payload)) + payload, {
        "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}


def _check_binary_ext(payload: bytes) -> Callable[[bytes], None]:
    def check(raw: bytes) -> None:
        expect(raw.endswith(struct.pack("<I", len(payload)) + payload), "binary answer differs from the payload")
    return check


def _v2_binary_big(payload: bytes) -> tuple[bytes, dict[str, str]]:
    return _binary_ext_request(payload, every_output=True)


def _v2_bytes_request(payload: bytes) -> bytes:
    """``payload`` as one BYTES element to grps_echo, as ModelInfer's raw input."""
    req = service_pb2.ModelInferRequest(model_name="grps_echo")
    req.inputs.add(name="text", datatype="BYTES", shape=[1])
    req.raw_input_contents.append(struct.pack("<I", len(payload)) + payload)
    return req.SerializeToString()


def _check_v2_bytes(payload: bytes) -> Callable[[bytes], None]:
    element = struct.pack("<I", len(payload)) + payload

    def check(raw: bytes) -> None:
        resp = service_pb2.ModelInferResponse.FromString(raw)
        expect(list(resp.raw_output_contents) == [element], "ModelInfer's BYTES answer differs from the payload")
    return check


def _check_bytes(payload: bytes) -> Callable[[bytes], None]:
    def check(raw: bytes) -> None:
        expect(raw == payload, f"octet-stream answer of {len(raw)} bytes differs from the payload")
    return check


def _check_grps_gtensors(raw: bytes) -> None:
    doc = json.loads(raw)
    names = [t.get("name") for t in doc.get("gtensors", {}).get("tensors", [])]
    expect(doc.get("status", {}).get("code") == 200 and names == ["out1", "out2"], f"GRPS answered {raw[:120]!r}")


def _mindie_token(line: bytes) -> bool:
    """Every event with a token's ids: MindIE's final event is the last token's (with generated_text)."""
    return line.startswith(b"data:") and b'"token":{"id":[' in line and b'"token":{"id":[]' not in line


def _triton_token(line: bytes) -> bool:
    return line.startswith(b"data:") and b'"text_output":' in line and b'"text_output":""' not in line


def _openai_token(line: bytes) -> bool:
    return line.startswith(b"data:") and b'"content":"' in line and b'"content":""' not in line


def _check_sse(is_token: Callable[[bytes], bool], tokens: int | None = None) -> Callable[[bytes], None]:
    """At least one token event; exactly ``tokens`` when given (the sides of a row compare per request)."""
    def check(raw: bytes) -> None:
        n = sum(1 for line in raw.splitlines() if is_token(line))
        expect(n > 0, f"no token event in {raw[:160]!r}")
        expect(tokens is None or n == tokens, f"{n} token events, not {tokens}")
    return check


# for the LLM rows at scale (bench/llmscale.py)
check_sse, triton_token, openai_token = _check_sse, _triton_token, _openai_token


GRPS_GTENSORS = {"gtensors": {"tensors": [
    {"name": "in1", "dtype": "DT_INT32", "shape": [3, 2], "flat_int32": [1, 2, 3, 4, 5, 6]},
    {"name": "in2", "dtype": "DT_FLOAT64", "shape": [3, 3], "flat_double": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]},
]}}


def build(triton_http: str, triton_grpc: str, gw_url: Callable[[str], str], gw_target: Callable[[str], str],
          concurrency: int, big_concurrency: int, latency_concurrency: int | None = 1) -> list[Case]:
    """Every case, addressed at this stack's ports. ``latency_concurrency`` adds concurrency-1 rows
    of the two cheapest paths (the added latency of one hop); None leaves them out."""
    v2 = _v2_request(SMALL)
    image = image_values()
    image_text = orjson.dumps(image, option=orjson.OPT_SERIALIZE_NUMPY)
    image_y = image * np.float32(0.5) + np.float32(3)
    payload = bin_payload()
    bin_direct, bin_headers = _binary_ext_request(payload)
    v2_big, v2_big_headers = _v2_binary_big(payload)
    v2_bytes = _v2_bytes_request(payload)
    tf_url = gw_url("tfserving_rest") + TF_PREDICT_PATH
    v2_url = f"{triton_http}/v2/models/{HPT}/infer"
    grps_url = gw_url("grps_http") + "/grps/v1/infer/predict"
    llm_payload = f"tiny_llm (15 ms/token), {LLM_TOKENS} tokens at most, one request at a time"

    def llm_direct() -> Side:
        return Side("Triton HTTP generate_stream", "llm", f"{triton_http}/v2/models/tiny_llm/generate_stream",
                    orjson.dumps({"text_input": LLM_PROMPT, "max_tokens": LLM_TOKENS, "stream": True}),
                    _check_sse(_triton_token, LLM_TOKENS), is_token=_triton_token)

    small_direct = _v2_json([{"name": "x", "shape": [4], "datatype": "FP32", "data": SMALL}])

    def v2_unary(c: int) -> Case:
        return Case("v2_unary", "V2 gRPC unary (passthrough)", "ModelInfer, 4 FP32 raw", c,
                    Side("Triton gRPC ModelInfer", "grpc_unary", triton_grpc, v2, _check_v2, MODEL_INFER),
                    Side("gateway :v2_grpc ModelInfer", "grpc_unary", gw_target("v2_grpc"), v2, _check_v2,
                         MODEL_INFER))

    def tf_rest_small(c: int) -> Case:
        return Case("tf_rest_small", "TF Serving REST predict, small", '{"instances": [1.0, 2.0, 5.0, 7.0]}', c,
                    Side("Triton HTTP /v2 JSON infer", "http", v2_url, small_direct, _check_v2_json({"y": SMALL_Y})),
                    Side("gateway :tfserving_rest :predict", "http", tf_url,
                         b'{"instances": [1.0, 2.0, 5.0, 7.0]}', _check_predictions(np.array(SMALL_Y))))

    v2_bin, v2_bin_headers = _v2_binary_small()
    v2_rest_url = gw_url("v2_http") + f"/v2/models/{HPT}/infer"

    def v2_rest(c: int) -> list[Case]:
        return [
            Case("v2_rest_json", "V2 REST infer, small JSON", '4 FP32 as JSON "data"', c,
                 Side("Triton HTTP /v2 JSON infer", "http", v2_url, small_direct, _check_v2_json({"y": SMALL_Y})),
                 Side("gateway :v2_http /v2 JSON infer", "http", v2_rest_url, small_direct,
                      _check_v2_json({"y": SMALL_Y}))),
            Case("v2_rest_binary", "V2 REST infer, small binary", "4 FP32 binary in and out", c,
                 Side("Triton HTTP binary extension", "http", v2_url, v2_bin, _check_v2_binary_small,
                      headers=v2_bin_headers),
                 Side("gateway :v2_http binary extension", "http", v2_rest_url, v2_bin, _check_v2_binary_small,
                      headers=v2_bin_headers)),
        ]

    cases = []
    if latency_concurrency:
        cases += [v2_unary(latency_concurrency), tf_rest_small(latency_concurrency)]
    cases += [
        v2_unary(concurrency),
        Case("v2_stream", "V2 gRPC streamed (ModelStreamInfer)", "1 message per turn, 4 FP32 raw", concurrency,
             Side("Triton gRPC ModelStreamInfer", "grpc_stream", triton_grpc, v2, _check_v2_stream,
                  MODEL_STREAM_INFER),
             Side("gateway :v2_grpc ModelStreamInfer", "grpc_stream", gw_target("v2_grpc"), v2, _check_v2_stream,
                  MODEL_STREAM_INFER)),
        *v2_rest(concurrency),
        tf_rest_small(concurrency),
        Case("tf_rest_image", "TF Serving REST predict, image-sized", f"{IMAGE_FLOATS:,} FP32 as JSON numbers",
             big_concurrency,
             Side("Triton HTTP /v2 JSON infer", "http", v2_url,
                  b'{"inputs":[{"name":"x","shape":[%d],"datatype":"FP32","data":%s}]}' % (IMAGE_FLOATS, image_text),
                  _check_v2_json({"y": image_y.tolist()})),
             Side("gateway :tfserving_rest :predict", "http", tf_url, b'{"instances": %s}' % image_text,
                  _check_predictions(image_y))),
        Case("tf_grpc", "TF Serving gRPC Predict", "PredictRequest, 4 float_val", concurrency,
             Side("Triton gRPC ModelInfer", "grpc_unary", triton_grpc, v2, _check_v2, MODEL_INFER),
             Side("gateway :tfserving_grpc Predict", "grpc_unary", gw_target("tfserving_grpc"),
                  _tf_predict_request(SMALL), _check_tf_predict, TF_PREDICT)),
        Case("grps_gtensors", "GRPS HTTP gtensors (JSON)", "seed gtensors: INT32 3x2 + FP64 3x3", concurrency,
             Side("Triton HTTP /v2 JSON infer", "http", f"{triton_http}/v2/models/grps_echo/infer",
                  _v2_json([{"name": "in1", "shape": [3, 2], "datatype": "INT32", "data": [1, 2, 3, 4, 5, 6]},
                            {"name": "in2", "shape": [3, 3], "datatype": "FP64",
                             "data": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]}]),
                  _check_v2_json({"out1": [1, 2, 3, 4, 5, 6], "out2": [1, 2, 3, 4, 5, 6, 7, 8, 9]})),
             Side("gateway :grps_http predict", "http", grps_url, orjson.dumps(GRPS_GTENSORS), _check_grps_gtensors)),
        Case("grps_bin", "GRPS HTTP bin_data 16 MiB", "16 MiB octet-stream, echoed", big_concurrency,
             Side("Triton HTTP binary extension", "http", f"{triton_http}/v2/models/grps_echo/infer", bin_direct,
                  _check_binary_ext(payload), headers=bin_headers),
             Side("gateway :grps_http octet-stream", "http", grps_url, payload, _check_bytes(payload),
                  headers={"Content-Type": "application/octet-stream"})),
        Case("v2_rest_big", "V2 REST infer, 16 MiB binary", "16 MiB BYTES element, binary in and out, echoed",
             big_concurrency,
             Side("Triton HTTP binary extension", "http", f"{triton_http}/v2/models/grps_echo/infer", v2_big,
                  _check_binary_ext(payload), headers=v2_big_headers),
             Side("gateway :v2_http binary extension", "http", gw_url("v2_http") + "/v2/models/grps_echo/infer",
                  v2_big, _check_binary_ext(payload), headers=v2_big_headers)),
        Case("v2_grpc_big", "V2 gRPC unary, 16 MiB", "ModelInfer, 16 MiB BYTES raw, echoed", big_concurrency,
             Side("Triton gRPC ModelInfer", "grpc_unary", triton_grpc, v2_bytes, _check_v2_bytes(payload), MODEL_INFER),
             Side("gateway :v2_grpc ModelInfer", "grpc_unary", gw_target("v2_grpc"), v2_bytes,
                  _check_v2_bytes(payload), MODEL_INFER)),
        Case("llm_mindie", "LLM stream: MindIE native /infer", llm_payload, 1, llm_direct(),
             Side("gateway :mindie_http POST /infer stream", "llm", gw_url("mindie_http") + "/infer",
                  orjson.dumps({"inputs": LLM_PROMPT, "stream": True, "parameters": {"max_new_tokens": LLM_TOKENS}}),
                  _check_sse(_mindie_token, LLM_TOKENS), is_token=_mindie_token)),
        Case("llm_openai", "LLM stream: OpenAI chat completions", llm_payload, 1, llm_direct(),
             Side("gateway :mindie_http POST /v1/chat/completions stream", "llm",
                  gw_url("mindie_http") + "/v1/chat/completions",
                  orjson.dumps({"model": "tiny_llm", "stream": True, "max_tokens": LLM_TOKENS,
                                "messages": [{"role": "user", "content": LLM_PROMPT}]}),
                  _check_sse(_openai_token, LLM_TOKENS), is_token=_openai_token)),
    ]
    return cases


# -- the floor ----------------------------------------------------------------------------------
FLOOR_HOW = {
    "v2_unary": "floor: grpc.aio generic handler, the bytes forwarded",
    "v2_stream": "floor: grpc.aio stream_stream, the messages forwarded",
    "tf_rest_small": "floor: Sanic route, orjson → ModelInfer (raw FP32) → orjson",
    "tf_rest_image": "floor: Sanic route, orjson → ModelInfer (raw FP32) → orjson",
    "tf_grpc": "floor: grpc.aio Predict, PredictRequest → ModelInfer (raw FP32) → PredictResponse",
    "v2_rest_json": "floor: Sanic route, orjson → ModelInfer (numpy raw) → orjson",
    "v2_rest_binary": "floor: Sanic route, body sliced → ModelInfer → orjson header + raw outputs",
    "grps_gtensors": "floor: Sanic route, orjson gtensors → ModelInfer → orjson gtensors",
    "grps_bin": "floor: Sanic route, the body as one BYTES element → ModelInfer → its bytes",
    "v2_rest_big": "floor: Sanic route, body sliced → ModelInfer → orjson header + raw outputs",
    "v2_grpc_big": "floor: grpc.aio generic handler, the bytes forwarded",
    "llm_mindie": "floor: Sanic route, orjson → ModelStreamInfer → one SSE event per text_output",
    "llm_openai": "floor: Sanic route, orjson → ModelStreamInfer → one chat.completion.chunk per text_output",
}


def floor_side(case: Case, floor_http: str, floor_grpc: str) -> Side | None:
    """The gateway side's request and answer check, addressed to the floor (None: no floor for this path)."""
    how = FLOOR_HOW.get(case.key)
    if how is None:
        return None
    gw = case.gateway
    if gw.kind in ("http", "llm"):
        url = urlsplit(gw.address)
        address = floor_http + url.path + (f"?{url.query}" if url.query else "")
    elif gw.kind in ("grpc_unary", "grpc_stream"):
        address = floor_grpc
    else:
        return None
    return replace(gw, how=how, address=address)


def with_floors(cases: list[Case], floor_http: str, floor_grpc: str) -> list[Case]:
    """Each case of a path the floor serves gets its floor side (in place; the list is returned)."""
    for case in cases:
        case.floor = floor_side(case, floor_http, floor_grpc)
    return cases
