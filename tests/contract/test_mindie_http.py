"""MindIE-style API over plain HTTP: vLLM, Triton generate, native; golden stream transcripts per
family; validation envelopes; cancellation on disconnect; health and metrics."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import orjson
import pytest
import requests

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "mindie"
UPDATE = os.environ.get("MINDIE_UPDATE_GOLDEN") == "1"
VOLATILE = [(re.compile(rb'"id":"\d+"'), b'"id":"<id>"'), (re.compile(rb'"created":\d+'), b'"created":<created>'),
            (re.compile(rb'"seed":\d+'), b'"seed":<seed>'),
            (re.compile(rb'"(prefill_time|decode_time|queue_wait_time)":(\d+|\[[\d,]*\])'), rb'"\1":<time>')]


@pytest.fixture(scope="module")
def url(gateway):
    return gateway.url("mindie_http")


def normalise(raw: bytes) -> bytes:
    for pattern, repl in VOLATILE:
        raw = pattern.sub(repl, raw)
    return raw


STREAMS = {
    "openai_chat": ("/v1/chat/completions", {"model": "llama2_7b", "stream": True, "max_tokens": 3,
                                             "messages": [{"role": "user", "content": "Hello"}]}),
    "openai_completions": ("/v1/completions", {"model": "tiny_llm", "stream": True, "max_tokens": 3,
                                               "prompt": "Hello"}),
    "tgi_generate_stream": ("/generate_stream", {"inputs": "Hello", "parameters": {"max_new_tokens": 3,
                                                                                   "details": True}}),
    "tgi_compat_stream": ("/", {"inputs": "Hello", "stream": True, "parameters": {"max_new_tokens": 3}}),
    "vllm_stream": ("/generate", {"prompt": "Hello", "stream": True, "max_tokens": 3}),
    "triton_generate_stream": ("/v2/models/tiny_llm/generate_stream",
                               {"text_input": "Hello", "parameters": {"max_new_tokens": 3, "details": True}}),
    "native_stream": ("/infer", {"inputs": "Hello", "stream": True, "parameters": {"max_new_tokens": 3,
                                                                                  "details": True}}),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_stream_transcripts_match_golden(url, name):
    path, body = STREAMS[name]
    r = requests.post(url + path, json=body, stream=True, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    raw = normalise(b"".join(r.iter_content(None)))
    golden = GOLDEN / f"{name}.txt"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(raw)
    assert raw == golden.read_bytes()


def test_chunks_arrive_as_triton_produces_them(url):
    """15 ms per token in tiny_llm: chunks must arrive spread out, not all at the end."""
    r = requests.post(url + "/generate", json={"prompt": "timing", "stream": True, "max_tokens": 12},
                      stream=True, timeout=30)
    stamps = []
    for _ in r.iter_content(None):
        stamps.append(time.perf_counter())
    assert len(stamps) >= 6
    assert stamps[-1] - stamps[0] > 0.08


def test_vllm_non_stream_is_prompt_space_text(url):
    r = requests.post(url + "/generate", json={"prompt": "Hello", "max_tokens": 3})
    streamed = requests.post(url + "/generate", json={"prompt": "Hello", "max_tokens": 3, "stream": True}).content
    deltas = [orjson.loads(p)["text"][0] for p in streamed.split(b"\0") if p]
    assert r.json() == {"text": ["Hello " + "".join(deltas)]}


def test_triton_generate_flat_keys_and_nested_parameters(url):
    flat = requests.post(url + "/v2/models/tiny_llm/generate", json={"text_input": "Hi", "max_tokens": 4}).json()
    nested = requests.post(url + "/v2/models/tiny_llm/generate",
                           json={"id": "req_1", "text_input": "Hi", "parameters": {"max_new_tokens": 4,
                                                                                  "details": True}}).json()
    assert flat["text_output"] == nested["text_output"] and len(flat["text_output"].split()) == 4
    assert nested["id"] == "req_1" and nested["model_version"] is None
    assert nested["details"]["finish_reason"] == "length" and nested["details"]["generated_tokens"] == 4


def test_native_defaults_to_twenty_new_tokens_with_details(url):
    # tiny_llm's natural length is 8..24; pick a prompt whose reply is longer than 20 words
    prompt = next(p for p in (f"p{i}" for i in range(100))
                  if len(requests.post(url + "/generate", json={"prompt": p, "max_tokens": 30}).json()["text"][0]
                         .split()) > 21)
    r = requests.post(url + "/infer", json={"inputs": prompt, "parameters": {"details": True, "seed": 5}}).json()
    assert r["details"]["generated_tokens"] == 20 and r["details"]["finish_reason"] == "length"
    assert r["details"]["seed"] == 5 and len(r["details"]["generated_token_ids"]) == 20


ERRORS = [
    ("/infer", {"inputs": "x", "parameters": {"top_p": 1.5}}, 422, "Parameter top_p must be in (0.0,1.0], got 1.5."),
    ("/generate", {"inputs": "x", "parameters": {"max_new_tokens": 0}}, 422,
     "Parameter max_new_tokens must be in (0,2147483647], got 0."),
    ("/generate", {"prompt": "x", "temperature": 3}, 422, "Parameter temperature must be in [0.0,2.0], got 3."),
    ("/v2/models/tiny_llm/generate", {"text_input": "x", "parameters": {"priority": 0}}, 422,
     "Parameter priority must be in [1,5], got 0."),
    ("/v2/models/nope/generate", {"text_input": "x"}, 404, "Model nope not found."),
    ("/v1/completions", {"model": "tiny_llm", "prompt": ["a", "b"]}, 422,
     "All elements of the prompt array must be integers."),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), ERRORS)
def test_validation_errors_have_mindie_envelope(url, path, body, status, message):
    r = requests.post(url + path, json=body)
    assert r.status_code == status
    assert r.json() == {"error": message, "error_type": "Input Validation Error" if status == 422 else "NotFoundError"}


def test_generate_without_prompt_or_inputs_has_mindie_nested_error(url):
    r = requests.post(url + "/generate", json={"text": "x"})
    assert r.status_code == 422 and r.json()["error_type"] == "Input Validation Error"
    assert orjson.loads(r.json()["error"])["error_type"] == "validation"
    # the nested object is serialized with ", " and ": " separators, as MindIE's (reference §1.3)
    assert r.json()["error"].startswith('{"Error": "`inputs` or `prompt` must be necessary')
    assert r.json()["error"].endswith('", "error_type": "validation"}')


def test_models_list_is_pretty_printed_with_indent_4(url):
    r = requests.get(url + "/v1/models")
    assert r.headers["content-type"] == "application/json"
    assert r.content.startswith(b'{\n    "object": "list",\n    "data": [\n        {\n            "id": ')
    rows = r.json()["data"]
    assert all(list(row) == ["id", "object", "root", "owned_by", "parent"] for row in rows)


def test_triton_generate_details_in_the_answer_and_per_event(url):
    body = {"id": "a123", "text_input": "Hi", "parameters": {"max_new_tokens": 2, "details": True}}
    whole = requests.post(url + "/v2/models/tiny_llm/generate", json=body).json()
    queue = whole["details"].pop("queue_wait_time")  # per iteration: the gateway's wait (µs), then 0
    assert len(queue) == 2 and queue[0] >= 0 and queue[1] == 0
    assert whole["details"] == {"finish_reason": "length", "generated_tokens": 2, "first_token_cost": None,
                                "decode_cost": None, "batch_size": [1, 1]}


def test_tgi_decoder_input_details_fills_prefill(url):
    r = requests.post(url + "/generate", json={"inputs": "My name is", "parameters": {
        "max_new_tokens": 2, "details": True, "decoder_input_details": True}}).json()
    assert [t["text"] for t in r["details"]["prefill"]] == ["My", " name", " is"]
    assert list(r["details"]["tokens"][0]) == ["id", "logprob", "special", "text"]


def test_body_not_json_and_unknown_route(url):
    r = requests.post(url + "/infer", data=b"{nope")
    assert r.status_code == 422 and r.json()["error"] == "Request body is not valid JSON."
    r = requests.get(url + "/no/such/route")
    assert r.status_code == 404 and r.json()["error_type"] == "NotFoundError"


def test_health_routes(url):
    for path in ("/health", "/v2/health/live", "/v2/health/ready", "/v2/models/tiny_llm/ready"):
        r = requests.get(url + path)
        assert r.status_code == 200 and r.content == b"", path
    assert requests.get(url + "/v2/models/nope/ready").status_code == 404
    assert requests.get(url + "/info").json()["models"][0]["model_id"] == "tiny_llm"


def test_disconnect_cancels_the_triton_request(gateway, triton, url):
    body = orjson.dumps({"model": "tiny_llm", "stream": True, "max_tokens": 1000,
                         "messages": [{"role": "user", "content": "cancel me please"}]})
    port = gateway.port("mindie_http")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while got.count(b"data: ") < 3:
            got += s.recv(65536)
    rid = re.search(rb'"id":"(\d+)"', got).group(1).decode()
    needle = f"tiny_llm: request {rid} cancelled after"
    deadline = time.monotonic() + 10
    while needle not in triton.log_tail(400):
        assert time.monotonic() < deadline, "tiny_llm never saw the cancellation:\n" + triton.log_tail(20)
        time.sleep(0.2)
    # and the gateway keeps serving
    assert requests.post(url + "/generate", json={"prompt": "after", "max_tokens": 2}).status_code == 200


def test_mindie_metrics_on_the_admin_listener(gateway, url):
    requests.post(url + "/generate", json={"prompt": "metrics", "max_tokens": 3})
    text = requests.get(gateway.url("admin_http") + "/metrics").text
    for name in ("time_to_first_token_seconds_bucket", "time_per_output_token_seconds_count",
                 "request_received_total", "request_success_total", "generation_tokens_total",
                 "prompt_tokens_total", "request_generation_tokens_sum"):
        assert f'{name}{{' in text and 'model_name="tiny_llm"' in text, name
