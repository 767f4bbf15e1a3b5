"""Every LLM family against a repository shaped exactly like TensorRT-LLM's inflight_batcher_llm
(model_repository_trtllm/: preprocessing, tensorrt_llm, postprocessing, ensemble, tensorrt_llm_bls
as python stand-ins with the model's own BPE tokenizer), behind config/docker-llm.yaml's MindIE
section: text through the ensemble, token ids and streams through its tensorrt_llm step.

Its own Triton (the session one serves model_repository/, whose default model the other tests
rely on) and its own gateway, started once for this module.
"""

from __future__ import annotations

import json
import queue

import numpy as np
import openai
import pytest
import requests
import tritonclient.grpc as grpcclient
import yaml

from gateway.dialects import LISTENERS
from gateway.llm.hf import REPLACEMENT, load
from gateway.local import localtriton
from gateway.settings import LocalTriton
from tests.support import ROOT, free_port, gateway_config, start_gateway, stop_gateway

TOKENIZER = ROOT / "model_repository_trtllm" / "tokenizer"
WEATHER = "The weather in Paris is mild today: café au lait, 東京 is far away 🙂."  # the stand-in's reply


@pytest.fixture(scope="module")
def trtllm(tmp_path_factory):
    work = tmp_path_factory.mktemp("triton-trtllm")
    cfg = LocalTriton(venv=str(ROOT / ".venv-triton"), model_repository=str(ROOT / "model_repository_trtllm" / "models"),
                      workdir=str(ROOT / ".run" / "test-triton"), http_port=free_port(), grpc_port=free_port(),
                      metrics_port=free_port(), startup_timeout_s=180)
    tp = localtriton.start(cfg, ROOT, log_path=work / "triton.log")
    yield tp
    # after concurrent ensemble requests (n > 1) Triton can keep the ensemble "live" at shutdown
    # and wait out its exit timeout; nothing is in flight by then, so it is not waited for
    tp.stop(timeout=3)


@pytest.fixture(scope="module")
def gw(trtllm, tmp_path_factory):
    """config/docker-llm.yaml's MindIE section as it is, but for where the tokenizer is mounted."""
    mindie = yaml.safe_load((ROOT / "config" / "docker-llm.yaml").read_text())["dialects"]["mindie"]
    for options in mindie["models"].values():
        assert options.pop("tokenizer_dir") == "/tokenizer"
        options["tokenizer_dir"] = str(TOKENIZER)
    ports = {name: free_port() for name in LISTENERS}
    g = start_gateway(gateway_config(trtllm.grpc_target, ports, {"dialects": {"mindie": mindie}}),
                      tmp_path_factory.mktemp("gw-trtllm"))
    yield g
    stop_gateway(g)


@pytest.fixture(scope="module")
def oai(url):
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def tok():
    return load(str(TOKENIZER))


@pytest.fixture(scope="module")
def url(gw):
    return gw.url("mindie_http")


def direct_ensemble(trtllm, prompt: str, max_tokens: int, stream: bool = False) -> list[str]:
    """The ensemble's own answer, straight from Triton (decoupled, so a stream call even unstreamed):
    the text of each response."""
    out: queue.Queue = queue.Queue()
    values = {"text_input": np.array([[prompt.encode()]], dtype=object), "max_tokens": np.array([[max_tokens]], np.int32),
              "exclude_input_in_output": np.array([[True]]), "stream": np.array([[stream]])}
    inputs = []
    for name, arr in values.items():
        t = grpcclient.InferInput(name, list(arr.shape), "BYTES" if arr.dtype == object else
                                  ("INT32" if arr.dtype == np.int32 else "BOOL"))
        t.set_data_from_numpy(arr)
        inputs.append(t)
    client = grpcclient.InferenceServerClient(trtllm.grpc_target)
    texts = []
    try:
        client.start_stream(callback=lambda result, error: out.put(error or result))
        client.async_stream_infer("ensemble", inputs, enable_empty_final_response=True)
        while True:
            r = out.get(timeout=30)
            assert not isinstance(r, Exception), r
            if r.as_numpy("text_output") is not None:
                texts.append(r.as_numpy("text_output").reshape(-1)[0].decode())
            if r.get_response().parameters["triton_final_response"].bool_param:
                return texts
    finally:
        client.stop_stream()
        client.close()


def test_text_goes_through_the_ensemble_as_triton_answers_it(trtllm, url, tok):
    prompt = "How is the weather?"
    [direct] = direct_ensemble(trtllm, prompt, 64)
    assert direct == WEATHER
    r = requests.post(url + "/infer", json={"inputs": prompt, "parameters": {"max_new_tokens": 64, "details": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["generated_text"] == direct
    assert body["details"]["finish_reason"] == "eos_token"
    assert body["details"]["generated_tokens"] == len(tok.ids(direct))


def test_token_ids_go_to_the_tensorrt_llm_step_and_are_decoded_where_text_is_answered(url, tok):
    ids = list(tok.prompt_ids("How is the weather?"))
    native = requests.post(url + "/infer_token", json={"input_id": ids, "parameters": {"max_new_tokens": 64}})
    assert native.status_code == 200, native.text
    assert native.json()["generated_text"] == WEATHER
    completion = requests.post(url + "/v1/completions", json={"model": "llama2_7b", "prompt": ids, "max_tokens": 64})
    assert completion.status_code == 200, completion.text
    assert completion.json()["choices"][0]["text"] == WEATHER
    assert completion.json()["usage"] == {"prompt_tokens": len(ids), "completion_tokens": len(tok.ids(WEATHER)),
                                          "total_tokens": len(ids) + len(tok.ids(WEATHER))}
    token = requests.post(url + "/v2/models/ensemble/infer", json={
        "inputs": [{"name": "input0", "shape": [len(ids)], "datatype": "UINT32", "data": ids}],
        "outputs": [{"name": "output0"}], "parameters": {"max_new_tokens": 64}})
    assert token.status_code == 200, token.text
    assert token.json()["outputs"][0]["data"] == list(tok.ids(WEATHER))


def test_streams_never_cut_a_character(trtllm, url):
    # the ensemble's own stream decodes each response on its own: a character spanning two is lost
    assert REPLACEMENT in "".join(direct_ensemble(trtllm, "weather?", 64, stream=True))
    r = requests.post(url + "/infer", json={"inputs": "weather?", "stream": True, "parameters": {"max_new_tokens": 64}},
                      stream=True)
    events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith(b"data:")]
    texts = [e["token"]["text"] for e in events if e["token"].get("text")]
    # MindIE's final event is the last token's, with its text null and the whole text in generated_text
    assert events[-1]["token"]["text"] is None and events[-1]["generated_text"] == WEATHER
    assert all(REPLACEMENT not in t for t in texts) and WEATHER.startswith("".join(texts)) and texts
    assert len(texts) < len(load(str(TOKENIZER)).ids(WEATHER))  # some events hold several ids


@pytest.mark.parametrize("path,body,text_of", [
    ("/generate", {"inputs": "weather?", "parameters": {"max_new_tokens": 64}}, lambda b: b["generated_text"]),
    ("/generate", {"prompt": "weather?", "max_tokens": 64}, lambda b: b["text"][0].split(" ", 1)[1]),
    ("/v2/models/ensemble/generate", {"text_input": "weather?", "parameters": {"max_new_tokens": 64}},
     lambda b: b["text_output"]),
    ("/v2/models/tensorrt_llm_bls/generate", {"text_input": "weather?", "parameters": {"max_new_tokens": 64}},
     lambda b: b["text_output"]),
])
def test_every_text_family(url, path, body, text_of):
    r = requests.post(url + path, json=body)
    assert r.status_code == 200, r.text
    assert text_of(r.json()) == WEATHER


def test_openai_sdk_chat_with_the_models_template_and_exact_usage(oai, tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is machine learning?"}]
    r = oai.chat.completions.create(model="ensemble", messages=messages, max_tokens=64)
    text = r.choices[0].message.content
    assert text == "Machine learning is the study of programs that improve with experience."
    rendered = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"
    assert r.usage.prompt_tokens == len(tok.prompt_ids(rendered))
    assert r.usage.completion_tokens == len(tok.ids(text)) and r.choices[0].finish_reason == "stop"
    chunks = list(oai.chat.completions.create(model="tensorrt_llm_bls", messages=messages, max_tokens=5,
                                                 stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == tok.decode(tok.ids(text)[:5])
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 5


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_openai_sdk_function_calling_round_trip(oai):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = oai.chat.completions.create(model="ensemble", messages=messages, tools=TOOLS, max_tokens=64)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
    final = oai.chat.completions.create(model="ensemble", messages=messages, tools=TOOLS, max_tokens=64)
    assert final.choices[0].message.content == "The tool says: 18 degrees and sunny"
    assert final.choices[0].finish_reason == "stop" and not final.choices[0].message.tool_calls

    chunks = list(oai.chat.completions.create(model="ensemble", messages=messages[:1], tools=TOOLS, max_tokens=64,
                                                 stream=True))
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        (0, "get_weather", {"city": "Paris"})]
    assert deltas[0].id.startswith("call_") and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""



def test_n_choices_are_the_sequences_of_consecutive_seeds(oai, url, tok):
    prompt = "Say something."  # no key word: the stand-in's reply depends on the seed
    singles = [oai.completions.create(model="ensemble", prompt=prompt, max_tokens=64, temperature=0.7, seed=s)
               .choices[0].text for s in (40, 41)]
    r = oai.completions.create(model="ensemble", prompt=prompt, max_tokens=64, temperature=0.7, seed=40, n=2)
    assert [(c.index, c.text) for c in r.choices] == [(0, singles[0]), (1, singles[1])]
    assert r.usage.completion_tokens == sum(len(tok.ids(t)) for t in singles)
    chunks = list(oai.chat.completions.create(model="ensemble", messages=[{"role": "user", "content": prompt}],
                                              max_tokens=64, temperature=0.7, seed=40, n=2, stream=True))
    by_index = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            by_index[ch.index] += ch.delta.content or ""
    whole = oai.chat.completions.create(model="ensemble", messages=[{"role": "user", "content": prompt}],
                                        max_tokens=64, temperature=0.7, seed=40, n=2)
    assert [by_index[0], by_index[1]] == [c.message.content for c in whole.choices]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    vllm = requests.post(url + "/generate", json={"prompt": prompt, "max_tokens": 64, "temperature": 0.7, "seed": 40,
                                                  "n": 2}).json()
    assert vllm == {"text": [f"{prompt} {t}" for t in singles]}
