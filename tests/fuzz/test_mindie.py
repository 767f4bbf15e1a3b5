"""MindIE request checks (validate.py and every family's plan: native, TGI, vLLM, OpenAI chat and
completions, Triton generate): any JSON object becomes a plan or a GatewayError with a bounded
text; valid requests keep their values."""

from __future__ import annotations

import asyncio
import inspect
import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import GatewayError
from gateway.dialects.mindie import http, native, openai, tgi, triton_generate, vllm
from gateway.llm.served import ServedModels, ServedModelsSettings
from tests.fakes import FakeUpstream, trtllm_meta

from .profile import FUZZ, clean
from .strategies import BIG_VALUES, json_values

LOOP = asyncio.new_event_loop()
CATALOG = ServedModels(FakeUpstream(metas=[trtllm_meta("tiny_llm")]), ServedModelsSettings())


@pytest.fixture(scope="module", autouse=True)
def _close_loop():
    yield
    LOOP.close()


PLANNERS = {
    "native": native.plan, "tgi": tgi.plan, "vllm": vllm.plan, "chat": openai.plan_chat,
    "completions": openai.plan_completions, "triton_generate": triton_generate.plan,
}
KEYS = ["inputs", "input_id", "prompt", "text_input", "model", "messages", "stream", "parameters", "max_tokens",
        "max_new_tokens", "temperature", "top_k", "top_p", "typical_p", "seed", "repetition_penalty",
        "presence_penalty", "frequency_penalty", "stop", "stop_words", "stop_token_ids", "n", "best_of",
        "details", "decoder_input_details", "return_full_text", "truncate", "adapter_id", "priority", "timeout",
        "batch_size", "id", "chat_template_kwargs", "ignore_eos", "do_sample", "watermark", "tool_call_id"]
VALID = {"inputs": "hi", "prompt": "hi", "text_input": "hi", "model": "tiny_llm",
         "messages": [{"role": "user", "content": "hi"}]}


def _plan(name: str, body) -> object | None:
    try:
        return LOOP.run_until_complete(PLANNERS[name](body, CATALOG, "1"))
    except GatewayError as e:
        clean(e)
        return None


bodies = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), json_values, max_size=6)
params = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6)


@FUZZ
@given(st.binary(max_size=200))
def test_any_body_is_json_or_a_clean_error(raw):
    try:
        body = http.json_body(SimpleNamespace(body=raw))
        if inspect.isawaitable(body):  # parsed off the event loop where the body is large
            body = LOOP.run_until_complete(body)
    except GatewayError as e:
        clean(e)
        return
    for name in PLANNERS:
        _plan(name, body)


@FUZZ
@given(st.sampled_from(sorted(PLANNERS)), bodies)
def test_any_json_object_plans_or_fails_cleanly(name, body):
    _plan(name, body)


@FUZZ
@given(st.sampled_from(sorted(PLANNERS)), params, st.booleans())
def test_any_parameters_on_a_valid_request_plan_or_fail_cleanly(name, p, nested):
    body = {**VALID, "parameters": p} if nested else {**p, **VALID}
    _plan(name, body)


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(["role", "content", "tool_call_id", "name", "type", "text"]),
                                json_values | st.sampled_from(["user", "system", "assistant", "tool", "text"]),
                                max_size=4) | json_values, max_size=4),
       st.dictionaries(st.sampled_from(["messages", "add_generation_prompt", "self", "tools", "bos_token"])
                       | st.text(max_size=10), json_values, max_size=3))
def test_any_chat_messages_plan_or_fail_cleanly(messages, kwargs):
    _plan("chat", {"model": "tiny_llm", "messages": messages, "chat_template_kwargs": kwargs})


@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("value", BIG_VALUES.values(), ids=BIG_VALUES.keys())
def test_error_texts_never_echo_a_large_value(name, value):
    for key in KEYS:
        _plan(name, {**VALID, key: value})
        _plan(name, {**VALID, "parameters": {key: value}})


@FUZZ
@given(st.text(min_size=1, max_size=50), st.integers(1, 2**31 - 1), st.floats(0.01, 2.0), st.floats(0.01, 1.0),
       st.lists(st.text(min_size=1, max_size=10), max_size=3))
def test_valid_requests_keep_their_values(prompt, max_tokens, temperature, top_p, stop):
    p = _plan("vllm", {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
                       "stop": stop})
    assert p is not None
    req = p.req
    assert (req.prompt, req.max_tokens, req.sampling.temperature, req.sampling.top_p, req.stop) == (
        prompt, max_tokens, temperature, top_p, tuple(stop))
    body = json.loads(json.dumps({"inputs": prompt, "parameters": {"max_new_tokens": max_tokens, "top_p": top_p}}))
    req = _plan("tgi", body).req
    assert (req.prompt, req.max_tokens, req.sampling.top_p) == (prompt, max_tokens, top_p)


def test_chat_template_kwargs_cannot_replace_the_messages():
    """Found by the fuzzer: {"chat_template_kwargs": {"messages": 1}} was a TypeError (500)."""
    for key in ("messages", "add_generation_prompt", "self"):
        body = {"model": "tiny_llm", "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {key: 1}}
        try:
            LOOP.run_until_complete(openai.plan_chat(body, CATALOG, "1"))
        except GatewayError as e:
            clean(e)
