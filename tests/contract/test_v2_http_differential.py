"""KServe V2 REST: Triton's own HTTP front end is the oracle. Every request of the corpus goes to
Triton's HTTP port and to the gateway's v2_http; both must answer the same status and the same
body bytes. The differences docs/v2.md lists are the only allowances:

- Triton answers a client's malformed body with 500 (TritonJson access errors, unparsable JSON);
  the gateway with 400 and the same words.
- Server health (live, ready): Triton answers 200 with an empty body; the gateway with the JSON
  object seed 001 specifies and KServe's client reads ({"live":true}, {"ready":true}); statuses
  are Triton's. Model readiness keeps Triton's empty body (KServe's client reads the status).
- Statistics carry counters and times that move between the two calls: compared with every number
  masked.
- Model configuration maps (an ensemble's input_map / output_map): Triton writes its hash map's
  order, the gateway the order it reads them in; compared as parsed JSON.
- An ensemble's answer: Triton 2.51's HTTP writes the sequence parameters once per composing step
  (duplicate keys); gRPC carries them as a map, once: the parameters are compared as parsed JSON,
  the rest byte for byte.
- Doubles: rapidjson's Grisu2 is not always shortest (0.30000001192092898 where Python writes
  ...896, the same double): number tokens are compared as doubles, everything else byte for byte.
"""

from __future__ import annotations

import json
import random
import re
import struct

import numpy as np
import pytest
from ml_dtypes import bfloat16

from tests.support import http_call

H2 = "/v2/models/half_plus_two/infer"
MT = "/v2/models/multi_tensor/infer"
ECHO = "/v2/models/grps_echo/infer"
H3 = "/v2/models/saved_model_half_plus_three/infer"


def _j(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _binary(doc: dict, *blobs: bytes) -> tuple[bytes, dict]:
    head = _j(doc)
    return head + b"".join(blobs), {"Inference-Header-Content-Length": str(len(head))}


def _bytes_blob(items) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in items)


def _x(values, name="x", dtype="FP32", **extra):
    return {"name": name, "datatype": dtype, "shape": [len(values)], "data": values, **extra}


def _bin_input(name, dtype, shape, blob):
    return {"name": name, "datatype": dtype, "shape": shape, "parameters": {"binary_data_size": len(blob)}}


F16 = np.array([1.0, 2.0, 5.0], dtype=np.float16).tobytes()
BF16 = np.array([1.0, 2.0, 5.0], dtype=bfloat16).tobytes()
F32 = np.array([1.0, 2.0, 5.0], dtype=np.float32).tobytes()
MT_INPUTS = [{"name": "tag", "datatype": "BYTES", "shape": [1, 1], "data": ["hello"]},
             {"name": "signal", "datatype": "FP32", "shape": [1, 4], "data": [[0.1, 0.2, 0.3, 1e-7]]},
             {"name": "count", "datatype": "INT32", "shape": [1, 1], "data": [[3]]}]


def _corpus() -> list[tuple[str, str, str, bytes | None, dict]]:
    """(id, method, path, body, headers)."""
    c: list = []

    def add(name, method, path, body=None, headers=None):
        if isinstance(body, (dict, list)):
            body = _j(body)
        elif isinstance(body, str):
            body = body.encode()
        c.append((name, method, path, body, headers or {}))

    # health, server and model metadata, readiness, config, repository
    add("server_metadata", "GET", "/v2")
    add("live", "GET", "/v2/health/live")
    add("ready", "GET", "/v2/health/ready")
    add("ready_post", "POST", "/v2/health/ready", b"")
    add("metadata_post", "POST", "/v2", b"")
    add("not_found", "GET", "/v2/nothing")
    add("not_found_v3", "GET", "/v3/models")
    add("not_found_root", "GET", "/")
    for m in ("half_plus_two", "multi_tensor", "multi_tensor_scale", "multi_tensor_text", "grps_echo",
              "saved_model_half_plus_three", "tiny_llm"):
        add(f"metadata_{m}", "GET", f"/v2/models/{m}")
        add(f"ready_{m}", "GET", f"/v2/models/{m}/ready")
        add(f"config_{m}", "GET", f"/v2/models/{m}/config")
    add("metadata_version", "GET", "/v2/models/half_plus_two/versions/123")
    add("metadata_bad_version", "GET", "/v2/models/half_plus_two/versions/9")
    add("metadata_unknown", "GET", "/v2/models/no_such_model")
    add("ready_unknown", "GET", "/v2/models/no_such_model/ready")
    add("ready_bad_version", "GET", "/v2/models/half_plus_two/versions/9/ready")
    add("config_unknown", "GET", "/v2/models/no_such_model/config")
    add("config_version", "GET", "/v2/models/saved_model_half_plus_three/versions/123/config")
    add("metadata_post_model", "POST", "/v2/models/half_plus_two", b"")
    add("stats_model", "GET", "/v2/models/tiny_llm/stats")
    add("stats_unknown", "GET", "/v2/models/no_such_model/stats")
    add("stats_all", "GET", "/v2/models/stats")
    add("index", "POST", "/v2/repository/index")
    add("index_ready", "POST", "/v2/repository/index", {"ready": True})
    add("index_bad_ready", "POST", "/v2/repository/index", {"ready": 1})
    add("index_get", "GET", "/v2/repository/index")

    # JSON infer: dtypes, shapes, ids, outputs, parameters
    add("fp32", "POST", H2, {"inputs": [_x([1.0, 2.0, 5.0])]})
    add("fp32_ints", "POST", H2, {"inputs": [_x([1, 2, 5])]})
    add("fp32_id", "POST", H2, {"id": "my-id", "inputs": [_x([1, 2, 5])]})
    add("fp32_odd_values", "POST", H2, {"inputs": [_x([0.1, -3.25, 1e-7, 1e20, 123456.789, 0, -0.0, 3e38])]})
    add("fp32_nested", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2],
                                               "data": [[1, 2], [3, 4]]}]})
    add("fp32_empty", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [0], "data": []}]})
    add("fp32_nan_inf", "POST", H2, b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[NaN,Infinity,-Infinity]}]}')
    add("two_inputs", "POST", H2, {"inputs": [_x([1, 2]), _x([3], name="x2")]})
    add("one_output", "POST", H2, {"inputs": [_x([1, 2, 5])], "outputs": [{"name": "y2"}]})
    add("outputs_order", "POST", H2, {"inputs": [_x([1, 2, 5])], "outputs": [{"name": "y2"}, {"name": "y"}]})
    add("output_absent", "POST", H2, {"inputs": [_x([1, 2, 5])], "outputs": [{"name": "y_half"}]})
    add("output_unknown", "POST", H2, {"inputs": [_x([1, 2, 5])], "outputs": [{"name": "nope"}]})
    add("params", "POST", H2, {"inputs": [_x([1])], "parameters": {"s": "x", "i": 3, "b": True, "d": 1.5}})
    add("params_priority", "POST", H2, {"inputs": [_x([1])], "parameters": {"priority": 0, "timeout": 0}})
    add("params_reserved", "POST", H2, {"inputs": [_x([1])], "parameters": {"triton_x": 1}})
    add("params_bad_type", "POST", H2, {"inputs": [_x([1])], "parameters": {"k": [1]}})
    add("params_not_object", "POST", H2, {"inputs": [_x([1])], "parameters": [1]})
    add("params_bad_priority", "POST", H2, {"inputs": [_x([1])], "parameters": {"priority": "high"}})
    add("params_bad_bdo", "POST", H2, {"inputs": [_x([1])], "parameters": {"binary_data_output": 1}})
    add("versioned", "POST", "/v2/models/half_plus_two/versions/123/infer", {"inputs": [_x([1])]})
    add("mt_json", "POST", MT, {"inputs": MT_INPUTS})
    add("mt_json_batch2", "POST", MT, {"inputs": [
        {"name": "tag", "datatype": "BYTES", "shape": [2, 1], "data": ["a", "héllo\n\"q\""]},
        {"name": "signal", "datatype": "FP32", "shape": [2, 4], "data": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"name": "count", "datatype": "INT32", "shape": [2, 1], "data": [1, -2]}]})
    add("mt_scale", "POST", "/v2/models/multi_tensor_scale/infer", {"inputs": MT_INPUTS[1:]})
    add("h3", "POST", H3, {"inputs": [_x([1.0, 2.0, 5.0])]})
    add("classification", "POST", H3, {"inputs": [_x([1.0, 9.0, 5.0])],
                                       "outputs": [{"name": "y", "parameters": {"classification": 2}}]})
    add("classification_binary", "POST", H3, {"inputs": [_x([1.0, 9.0, 5.0])], "outputs": [
        {"name": "y", "parameters": {"classification": 1, "binary_data": True}}]})
    for dtype, values in (("BOOL", [True, False]), ("UINT8", [0, 255]), ("UINT16", [65535]), ("UINT32", [7]),
                          ("UINT64", [18446744073709551615]), ("INT8", [-128, 127]), ("INT16", [-3]),
                          ("INT32", [-2147483648]), ("INT64", [-9223372036854775808, 9223372036854775807]),
                          ("FP64", [0.1, 1e300, -2.5]), ("BYTES", ["a", "", "ü"])):
        add(f"echo_{dtype}", "POST", ECHO, {"inputs": [{"name": "input", "datatype": dtype, "shape": [len(values)],
                                                         "data": values}]})

    # binary tensors, alone and mixed with JSON, in and out
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32)]}, F32)
    add("bin_in", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32)], "parameters": {"binary_data_output": True}},
                        F32)
    add("bin_in_out", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32)],
                         "outputs": [{"name": "y", "parameters": {"binary_data": True}}, {"name": "y2"}]}, F32)
    add("bin_mixed_outputs", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x_half", "FP16", [3], F16), _x([1, 2], name="x2"),
                                    _bin_input("x_bf16", "BF16", [3], BF16)],
                         "parameters": {"binary_data_output": True}}, F16, BF16)
    add("bin_fp16_bf16", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x_half", "FP16", [3], F16)]}, F16)
    add("fp16_json_out", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x_half", "FP16", [3], F16)],
                         "outputs": [{"name": "y_half", "parameters": {"binary_data": True}}]}, F16)
    add("fp16_bin_out", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x_bf16", "BF16", [3], BF16)],
                         "outputs": [{"name": "y_bf16", "parameters": {"binary_data": True}}]}, BF16)
    add("bf16_bin_out", "POST", H2, body, hdr)
    tag = _bytes_blob([b"\x00\xffraw", b"xy"])
    body, hdr = _binary({"inputs": [_bin_input("tag", "BYTES", [2, 1], tag), MT_INPUTS[1] | {"shape": [2, 4],
                         "data": [1, 2, 3, 4, 5, 6, 7, 8]}, MT_INPUTS[2] | {"shape": [2, 1], "data": [1, 2]}],
                         "outputs": [{"name": "tag_bytes", "parameters": {"binary_data": True}},
                                     {"name": "total"}, {"name": "length", "parameters": {"binary_data": False}}]},
                        tag)
    add("bin_bytes_ensemble", "POST", MT, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [0], b"")]})
    add("bin_empty", "POST", H2, body, hdr)

    # errors
    add("unknown_model", "POST", "/v2/models/no_such_model/infer", {"inputs": [_x([1])]})
    add("unknown_version", "POST", "/v2/models/half_plus_two/versions/7/infer", {"inputs": [_x([1])]})
    add("decoupled", "POST", "/v2/models/tiny_llm/infer", {"inputs": []})
    add("infer_get", "GET", H2)
    add("wrong_dtype", "POST", H2, {"inputs": [_x([1, 2], dtype="INT32")]})
    add("unknown_dtype", "POST", H2, {"inputs": [_x([1, 2], dtype="FLOAT")]})
    add("fp16_json_in", "POST", H2, {"inputs": [_x([1, 2], name="x_half", dtype="FP16")]})
    add("bf16_json_in", "POST", H2, {"inputs": [_x([1, 2], name="x_bf16", dtype="BF16")]})
    add("unknown_input", "POST", H2, {"inputs": [_x([1], name="zz")]})
    add("missing_input", "POST", MT, {"inputs": MT_INPUTS[:2]})
    add("wrong_shape_model", "POST", MT, {"inputs": [MT_INPUTS[0], MT_INPUTS[1] | {"shape": [1, 3],
                                                                                  "data": [1, 2, 3]}, MT_INPUTS[2]]})
    add("shape_too_small", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2, 3]}]})
    add("shape_too_large", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": [1, 2, 3]}]})
    add("data_not_number", "POST", H2, {"inputs": [_x([1, "a", 3])]})
    add("data_bool_for_float", "POST", H2, {"inputs": [_x([1, True])]})
    add("data_float_for_int", "POST", ECHO, {"inputs": [_x([1.5], name="input", dtype="INT32")]})
    add("data_negative_uint", "POST", ECHO, {"inputs": [_x([-1], name="input", dtype="UINT8")]})
    add("data_number_for_bytes", "POST", ECHO, {"inputs": [_x([1], name="input", dtype="BYTES")]})
    add("data_missing", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]})
    add("data_and_binary", "POST", H2, {"inputs": [_x([1]) | {"parameters": {"binary_data_size": 4}}]})
    add("data_not_array", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": 1}]})
    add("name_missing", "POST", H2, {"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]})
    add("name_not_string", "POST", H2, {"inputs": [{"name": 1, "datatype": "FP32", "shape": [1], "data": [1]}]})
    add("shape_negative", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1], "data": [1]}]})
    add("shape_missing", "POST", H2, {"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})
    add("inputs_missing", "POST", H2, {})
    add("inputs_not_array", "POST", H2, {"inputs": {}})
    add("input_not_object", "POST", H2, {"inputs": [1]})
    add("outputs_not_array", "POST", H2, {"inputs": [_x([1])], "outputs": {}})
    add("output_name_missing", "POST", H2, {"inputs": [_x([1])], "outputs": [{}]})
    add("output_bad_binary", "POST", H2, {"inputs": [_x([1])], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]})
    add("output_bad_class", "POST", H2, {"inputs": [_x([1])], "outputs": [{"name": "y", "parameters": {"classification": -1}}]})
    add("id_not_string", "POST", H2, {"id": 1, "inputs": [_x([1])]})
    add("root_array", "POST", H2, [1, 2])
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32)]}, F32[:8])
    add("bin_short", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32)]}, F32 + b"junk")
    add("bin_extra", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [2], F32)]}, F32)
    add("bin_size_vs_shape", "POST", H2, body, hdr)
    add("bin_no_header", "POST", H2, {"inputs": [_bin_input("x", "FP32", [3], F32)]})
    body, _ = _binary({"inputs": [_x([1])]})
    add("header_too_long", "POST", H2, body, {"Inference-Header-Content-Length": str(len(body) + 5)})
    add("header_not_number", "POST", H2, body, {"Inference-Header-Content-Length": "abc"})
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32) | {"parameters": {"binary_data_size": -4}}]},
                        F32)
    add("bin_negative_size", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32) | {"parameters": {"binary_data_size": "12"}}]},
                        F32)
    add("bin_size_string", "POST", H2, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("x", "FP32", [3], F32) | {"parameters": {"binary_data_size": 12.0}}]},
                        F32)
    add("bin_size_float", "POST", H2, body, hdr)
    bad_bytes = struct.pack("<I", 99) + b"ab"
    body, hdr = _binary({"inputs": [_bin_input("input", "BYTES", [1], bad_bytes)]}, bad_bytes)
    add("bin_bytes_malformed", "POST", ECHO, body, hdr)
    body, hdr = _binary({"inputs": [_bin_input("input", "BYTES", [2], _bytes_blob([b"a"]))]}, _bytes_blob([b"a"]))
    add("bin_bytes_too_few", "POST", ECHO, body, hdr)
    body, _ = _binary({"inputs": [_x([1])]})
    add("header_zero", "POST", H2, body, {"Inference-Header-Content-Length": "0"})
    add("header_negative", "POST", H2, body, {"Inference-Header-Content-Length": "-5"})
    add("header_spaces", "POST", H2, body, {"Inference-Header-Content-Length": f" {len(body)}"})
    add("bad_json_truncated", "POST", H2, '{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[1,2,5]')
    add("bad_json_array", "POST", H2, '{"inputs":[1 2]}')
    add("bad_json_colon", "POST", H2, '{"inputs" [1]}')
    add("bad_json_name", "POST", H2, '{"inputs":[], }')
    add("bad_json_value", "POST", H2, '{"inputs":[tru]}')
    add("bad_json_trailing", "POST", H2, '{"inputs":[]} x')
    add("bad_json_string", "POST", H2, '{"inputs":[], "id": "abc')
    add("bad_json_escape", "POST", H2, '{"id":"a\\qb","inputs":[]}')
    add("bad_json_blank", "POST", H2, "   ")
    # the generate extension
    gen, stream = "/v2/models/tiny_llm/generate", "/v2/models/tiny_llm/generate_stream"
    add("gen_llm", "POST", gen, {"text_input": "hello there", "max_tokens": 3})
    add("gen_llm_streamed_model", "POST", gen, {"text_input": "hello there", "max_tokens": 3, "stream": True})
    add("gen_stream_llm", "POST", stream, {"text_input": "hello there", "max_tokens": 3})
    add("gen_stream_llm_tokens", "POST", stream, {"text_input": "hi", "max_tokens": 4, "stream": True, "id": "g1"})
    add("gen_stream_missing_input", "POST", stream, {"text_input": "hi"})
    add("gen_missing_input", "POST", gen, {"text_input": "hi"})
    add("gen_bad_value", "POST", stream, {"text_input": "hi", "max_tokens": "x"})
    add("gen_empty_body", "POST", gen, b"")
    add("gen_not_object", "POST", "/v2/models/saved_model_half_plus_three/generate", [1])
    add("gen_get", "GET", gen)
    add("gen_unknown_model", "POST", "/v2/models/no_such_model/generate", {})
    add("gen_array", "POST", "/v2/models/half_plus_two/generate", {"x": [1, 2, 5]})
    add("gen_scalar", "POST", "/v2/models/half_plus_two/generate", {"x": 3})
    add("gen_stream_params", "POST", "/v2/models/half_plus_two/generate_stream", {"x": [1, 2], "id": "q", "f": 1.5})
    add("gen_empty_array", "POST", "/v2/models/saved_model_half_plus_three/generate", {"x": []})
    add("gen_not_number", "POST", "/v2/models/half_plus_two/generate", {"x": "a"})
    add("gen_fp16", "POST", "/v2/models/half_plus_two/generate", {"x_half": [1]})
    add("gen_bad_param", "POST", "/v2/models/saved_model_half_plus_three/generate", {"x": [1], "bad": [1]})
    add("gen_ensemble", "POST", "/v2/models/multi_tensor/generate", {"tag": ["abc"], "signal": [1, 2, 3, 4],
                                                                     "count": [2]})
    add("gen_bad_shape", "POST", "/v2/models/multi_tensor/generate", {"tag": ["abc"], "signal": [1, 2, 3],
                                                                      "count": [2]})
    return c


_ODD_VALUES = (None, True, False, 0, -1, 1.5, 2**64, -2**63 - 1, "", "x", [], {}, [1], [[1]], {"a": 1}, "FP32",
               "BYTES", [None], 1e308)


def _mutated(value, rng: random.Random):
    """``value`` with one member or element (at some depth) replaced by an odd value, or removed."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key, value = rng.choice(list(value)), dict(value)
        if rng.random() < 0.2:
            del value[key]
        else:
            value[key] = _mutated(value[key], rng)
        return value
    if isinstance(value, list) and value and rng.random() < 0.7:
        value = list(value)
        i = rng.randrange(len(value))
        value[i] = _mutated(value[i], rng)
        return value
    return rng.choice(_ODD_VALUES)


def _fuzzed(corpus, seed: int = 1, rounds: int = 3) -> list:
    """Each JSON POST of the corpus, mutated (seeded: the same requests every run). Left out: any
    asking for a classification, since Triton 2.51's own HTTP crashes on an empty one
    (test_v2_http_clients.py::test_classification_of_an_empty_output)."""
    rng, out = random.Random(seed), []
    for r in range(rounds):
        for name, method, path, body, headers in corpus:
            if method != "POST" or not body or headers or name.startswith("bad_json"):
                continue
            mutated = _j(_mutated(json.loads(body), rng))
            if b"classification" not in mutated:
                out.append((f"fuzz{r}_{name}", method, path, mutated, {}))
    return out


CORPUS = _corpus()
CORPUS += _fuzzed(CORPUS)
_NUMBERS = re.compile(rb"\d+")
_PARAMS = re.compile(rb',"parameters":(\{[^{}]*\}),"outputs"')
_FLOAT = re.compile(rb"-?\d+\.\d+(?:e-?\d+)?|-?\d+e-?\d+")


def _comparable(name: str, body: bytes):
    name = name.split("_", 1)[1] if name.startswith("fuzz") else name
    if name.startswith("stats_") and body.startswith(b'{"model_stats"'):
        return _NUMBERS.sub(b"0", body)
    if name == "config_multi_tensor":
        return json.loads(body)
    params = _PARAMS.search(body) if name.startswith(("mt_json", "bin_bytes_ensemble")) else None
    if params:
        body = body[:params.start()] + b',"outputs"' + body[params.end():] + json.dumps(
            json.loads(params.group(1)), sort_keys=True).encode()
    return _FLOAT.sub(lambda m: repr(float(m.group())).encode(), body)


def _health_body(path: str, status: int, body: bytes) -> bytes:
    """Seed 001's health objects where Triton's body is empty."""
    if body or status != 200:
        return body
    if path in ("/v2/health/live", "/v2/health/ready"):
        return b'{"%s":true}' % path.rsplit("/", 1)[1].encode()
    return body


def test_corpus_size():
    assert len(CORPUS) >= 400, len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[c[0] for c in CORPUS])
def test_same_answer_as_triton(triton, gateway, case):
    name, method, path, body, headers = case
    want_status, _, want = http_call(triton.http_url, method, path, body, headers)
    want = _health_body(path, want_status, want)
    got_status, _, got = http_call(gateway.url("v2_http"), method, path, body, headers)
    assert _comparable(name, got) == _comparable(name, want)
    assert got_status == (400 if want_status == 500 else want_status)
