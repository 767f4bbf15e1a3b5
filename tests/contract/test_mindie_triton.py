"""MindIE's Triton family against the real Triton + tiny_llm: token inference, metadata, config,
getSlotCount, stopInfer; token-id prompts in every family that takes them; the per-event timings.

Expected token ids are derived from tiny_llm's source (its VOCAB and generation walk), not from an
answer of the gateway.
"""

from __future__ import annotations

import ast
import zlib
from pathlib import Path

import orjson
import pytest
import requests

MODEL_PY = Path(__file__).resolve().parents[2] / "model_repository" / "tiny_llm" / "1" / "model.py"


def _vocab() -> list[str]:
    for node in ast.parse(MODEL_PY.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "VOCAB":
            return ast.literal_eval(node.value.func.value).split()  # VOCAB = ("...").split()
    raise AssertionError("VOCAB not found in tiny_llm")


VOCAB = _vocab()


def tiny_llm_ids(prompt_ids: list[int], limit: int) -> list[int]:
    """tiny_llm's reply to a token-id prompt: the prompt read as ``ids:<id>,...``, a walk through VOCAB."""
    prompt = "ids:" + ",".join(map(str, prompt_ids))
    h = zlib.crc32(prompt.encode())
    natural = 8 + h % 17
    return [(h + 7 * i) % len(VOCAB) for i in range(min(natural, limit))]


def words(ids: list[int]) -> str:
    return "".join(VOCAB[i] if n == 0 else " " + VOCAB[i] for n, i in enumerate(ids))


@pytest.fixture(scope="module")
def url(gateway):
    return gateway.url("mindie_http")


DOC_IDS = [396, 319, 13996, 29877, 29901, 29907, 3333, 20718, 316, 23924]  # MindIE's documented example
DOC_BODY = {"id": "42", "inputs": [{"name": "input0", "shape": [1, 10], "datatype": "UINT32", "data": DOC_IDS}],
            "outputs": [{"name": "output0"}],
            "parameters": {"temperature": 0.5, "top_k": 10, "top_p": 0.95, "do_sample": True, "seed": None,
                           "repetition_penalty": 1.03, "max_new_tokens": 20, "watermark": True, "priority": 5,
                           "timeout": 10}}


def test_token_inference_answers_as_mindie_documents(url):
    r = requests.post(url + "/v2/models/tiny_llm/infer", json=DOC_BODY, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    want = tiny_llm_ids(DOC_IDS, 20)  # temperature > 0 with a seed: tiny_llm's walk depends on the seed
    body = r.json()
    assert list(body) == ["id", "outputs"] and body["id"] == "42"
    out = body["outputs"][0]
    assert list(out) == ["name", "shape", "datatype", "data"]
    assert out["name"] == "output0" and out["datatype"] == "UINT32" and out["shape"] == [1, len(out["data"])]
    assert all(0 <= i < len(VOCAB) for i in out["data"]) and len(out["data"]) == len(want)


def test_token_inference_is_tiny_llms_walk_byte_for_byte(url):
    ids = [5, 6, 7]
    body = {"inputs": [{"name": "x", "shape": [3], "datatype": "UINT32", "data": ids}],
            "outputs": [{"name": "tokens"}], "id": "abc", "parameters": {"max_new_tokens": 4}}
    r = requests.post(url + "/v2/models/tiny_llm/infer", json=body, timeout=30)
    want = tiny_llm_ids(ids, 4)
    assert r.status_code == 200
    assert r.content == orjson.dumps({"id": "abc", "outputs": [{"name": "tokens", "shape": [1, len(want)],
                                                               "datatype": "UINT32", "data": want}]})
    # the alias reaches the same model; parameters inside the input (where MindIE Server reads them) win
    body["inputs"][0]["parameters"] = {"max_new_tokens": 2}
    r = requests.post(url + "/v2/models/llama2_7b/infer", json=body, timeout=30)
    assert r.json()["outputs"][0]["data"] == tiny_llm_ids(ids, 2)


@pytest.mark.parametrize(("body", "status", "message", "etype"), [
    ({**DOC_BODY, "inputs": []}, 422, "Inputs count must be 1.", "Input Validation Error"),
    ({**DOC_BODY, "inputs": [{**DOC_BODY["inputs"][0], "datatype": "FP32"}]}, 422, "Unsupported datatype, got FP32.",
     "Input Validation Error"),
    ({**DOC_BODY, "inputs": [{**DOC_BODY["inputs"][0], "shape": [1, 9]}]}, 422, "Data size should be 9, got 10.",
     "Input Validation Error"),
    ({**DOC_BODY, "outputs": []}, 422, "Outputs size should be 1, got 0.", "Input Validation Error"),
])
def test_token_inference_errors_are_mindies(url, body, status, message, etype):
    r = requests.post(url + "/v2/models/tiny_llm/infer", json=body, timeout=30)
    assert (r.status_code, r.json()) == (status, {"error": message, "error_type": etype})


@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("GET", "/config"), ("GET", "/getSlotCount"),
                                                ("POST", "/infer"), ("POST", "/stopInfer")])
def test_unknown_model_is_mindies_404(url, method, suffix):
    r = requests.request(method, url + "/v2/models/no_such" + suffix, json=DOC_BODY, timeout=30)
    assert (r.status_code, r.json()) == (404, {"error": "Model no_such not found.", "error_type": "NotFoundError"})


def test_server_model_and_config_metadata(url):
    r = requests.get(url + "/v2", timeout=30)
    assert r.status_code == 200
    assert r.content == orjson.dumps({"name": "MindIE Server", "version": "gateway", "extensions": {
        "max_iter_times": 512, "prefill_policy_type": 0, "decode_policy_type": 0, "max_prefill_batch_size": 8,
        "max_prefill_tokens": 512}})  # tiny_llm: max_tokens 512 (tests/config/mindie.yaml), max_batch_size 8
    r = requests.get(url + "/v2/models/llama2_7b", timeout=30)
    assert r.content == (b'{"name":"llama2_7b","platform":"MindIE Server","inputs":[{"name":"input0","shape":[-1],'
                         b'"datatype":"UINT32"}],"outputs":[{"name":"output0","shape":[-1],"datatype":"UINT32"}]}')
    r = requests.get(url + "/v2/models/tiny_llm/config", timeout=30)
    assert r.content == (b'{"model_name":"tiny_llm","input_datatype":"UINT32","output_datatype":"UINT32",'
                         b'"max_seq_len":512,"npu_mem_size":-1,"cpu_mem_size":0,"world_size":1,'
                         b'"model_weight_path":"tiny_llm","model_instance_type":"Standard"}')


def test_slot_count(url):
    r = requests.get(url + "/v2/models/tiny_llm/getSlotCount", timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["total_slots", "free_slots", "available_tokens_length"]
    assert body["total_slots"] == 1024 and 0 < body["free_slots"] <= 1024  # limits.max_inflight
    assert body["available_tokens_length"] == body["free_slots"] * 512


def _longest_prompt() -> str:
    """A prompt tiny_llm answers with its longest reply (24 tokens, about 360 ms)."""
    return next(p for p in (f"stop me {i}" for i in range(1000)) if zlib.crc32(p.encode()) % 17 == 16)


def test_stop_infer_ends_a_running_request_then_it_is_not_found(url):
    body = {"id": "stopme", "text_input": _longest_prompt(), "parameters": {"max_new_tokens": 24}}
    stream = requests.post(url + "/v2/models/tiny_llm/generate_stream", json=body, stream=True, timeout=30)
    chunks = stream.iter_content(None)
    first = next(chunks)
    assert first.startswith(b"data:")
    r = requests.post(url + "/v2/models/tiny_llm/stopInfer", json={"id": "stopme"}, timeout=30)
    assert (r.status_code, r.content) == (200, b'{"id":"stopme"}')  # MindIE echoes the body
    rest = first + b"".join(chunks)  # the stream ends where it was
    assert rest.count(b"data:") < 24
    r = requests.post(url + "/v2/models/tiny_llm/stopInfer", json={"id": "stopme"}, timeout=30)
    assert (r.status_code, r.json()) == (404, {"error": "RequestId is stopme not found.",
                                               "error_type": "NotFoundError"})


@pytest.mark.parametrize(("body", "message"), [
    ({}, "Not found id."),
    ({"id": 3}, "id must be string type."),
    ({"id": "a b"}, "The id can contain only digits, letters, underscores(_), hyphens(-) and no more than 256 "
                    "words in length."),
])
def test_stop_infer_checks(url, body, message):
    r = requests.post(url + "/v2/models/tiny_llm/stopInfer", json=body, timeout=30)
    assert (r.status_code, r.json()) == (422, {"error": message, "error_type": "Input Validation Error"})


@pytest.mark.parametrize("path", ["/infer", "/infer_token"])
def test_native_input_id_reaches_the_models_input_ids(url, path):
    ids = [11, 12, 13, 14]
    r = requests.post(url + path, json={"input_id": ids, "parameters": {"max_new_tokens": 5, "details": True}},
                      timeout=30)
    want = tiny_llm_ids(ids, 5)
    assert r.status_code == 200
    body = r.json()
    assert body["generated_text"] == words(want)
    assert body["details"]["generated_token_ids"] == want and body["details"]["generated_tokens"] == len(want)
    stream = requests.post(url + path, json={"input_id": ids, "stream": True, "parameters": {"max_new_tokens": 5}},
                           timeout=30).content
    events = [orjson.loads(e[len(b"data: "):]) for e in stream.split(b"\n\n") if e]
    # one event per token, the last token's event the final one (as MindIE: its ids, text null)
    assert [e["token"]["id"] for e in events] == [[i] for i in want]
    assert events[-1]["token"]["text"] is None and events[-1]["generated_text"] is not None


def test_completions_with_token_ids(url):
    ids = [7, 8]
    r = requests.post(url + "/v1/completions", json={"model": "tiny_llm", "prompt": ids, "max_tokens": 3},
                      timeout=30)
    want = tiny_llm_ids(ids, 3)
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["text"] == words(want)
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": len(want), "total_tokens": 2 + len(want)}


def test_stream_events_carry_mindies_timings(url):
    """Triton generate_stream with details: details.queue_wait_time (µs) and prefill_time/decode_time (ms)
    after details; native stream: prefill_time/decode_time before the token (MindIE Server's layout)."""
    raw = requests.post(url + "/v2/models/tiny_llm/generate_stream", timeout=30,
                        json={"text_input": "Hello", "parameters": {"max_new_tokens": 3, "details": True}}).content
    events = [orjson.loads(e[len(b"data:"):]) for e in raw.split(b"\n\n") if e]
    first, second = events[0], events[1]
    assert list(first)[-2:] == ["prefill_time", "decode_time"]
    assert isinstance(first["prefill_time"], int) and first["prefill_time"] >= 0 and first["decode_time"] is None
    assert isinstance(first["details"]["queue_wait_time"], int) and first["details"]["queue_wait_time"] >= 0
    assert second["prefill_time"] is None and isinstance(second["decode_time"], int)
    whole = requests.post(url + "/v2/models/tiny_llm/generate", timeout=30,
                          json={"text_input": "Hello", "parameters": {"max_new_tokens": 3, "details": True}}).json()
    assert whole["details"]["batch_size"] == [1, 1, 1] and len(whole["details"]["queue_wait_time"]) == 3
    raw = requests.post(url + "/infer", timeout=30,
                        json={"inputs": "Hello", "stream": True, "parameters": {"max_new_tokens": 2}}).content
    native = [orjson.loads(e[len(b"data: "):]) for e in raw.split(b"\n\n") if e]
    assert list(native[0]) == ["prefill_time", "decode_time", "token"] and native[0]["prefill_time"] >= 0


def tiny_llm_log_prob(word: str) -> float:
    """tiny_llm's reported log probability of a token: -(id % 7) / 8, its id the word's VOCAB index."""
    return -(VOCAB.index(word.strip()) % 7) / 8


def test_logprobs_are_the_models_output_log_probs(url):
    assert len(set(VOCAB)) == len(VOCAB)  # a word names its id
    chat = {"model": "tiny_llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "logprobs": True}
    r = requests.post(url + "/v1/chat/completions", json=chat, timeout=30)
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert "".join(c["token"] for c in content) == choice["message"]["content"] and len(content) == 4
    assert all(c["logprob"] == tiny_llm_log_prob(c["token"]) and c["bytes"] == list(c["token"].encode())
               and c["top_logprobs"] == [] for c in content)
    raw = requests.post(url + "/v1/chat/completions", json={**chat, "stream": True}, timeout=30).content
    chunks = [orjson.loads(e[len(b"data: "):]) for e in raw.split(b"\n\n") if e and e != b"data: [DONE]"]
    streamed = [c for ch in chunks if (lp := ch["choices"][0]["logprobs"]) for c in lp["content"]]
    assert streamed == content
    body = {"model": "tiny_llm", "prompt": "Hello", "max_tokens": 3, "logprobs": 0}
    lp = requests.post(url + "/v1/completions", json=body, timeout=30).json()["choices"][0]["logprobs"]
    assert lp["token_logprobs"] == [tiny_llm_log_prob(t) for t in lp["tokens"]]
    assert lp["text_offset"] == [sum(len(t.encode()) for t in lp["tokens"][:i]) for i in range(3)]


def test_openai_fields_mindie_refuses_on_this_model(url):
    chat = {"model": "tiny_llm", "messages": [{"role": "user", "content": "hi"}]}
    for extra, message in (({"top_logprobs": 2}, "logprobs/top_logprobs are not supported by this endpoint"),
                           ({"tools": [{"type": "function", "function": {"name": "f"}}]},
                            "function/tool calls are not supported by this endpoint"),
                           ({"response_format": {"type": "json_object"}},
                            "structured output (response_format) is not supported by this endpoint")):
        r = requests.post(url + "/v1/chat/completions", json={**chat, **extra}, timeout=30)
        assert (r.status_code, r.json()) == (422, {"error": message, "error_type": "Input Validation Error"})
    ok = requests.post(url + "/v1/chat/completions", json={**chat, "max_tokens": 2, "tool_choice": "none",
                                                           "response_format": {"type": "text"}}, timeout=30)
    assert ok.status_code == 200
