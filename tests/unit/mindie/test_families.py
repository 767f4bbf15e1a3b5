"""Family codecs without a network: validation messages (MindIE's texts), plans and encodings."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from gateway.core.errors import ErrorKind, GatewayError, check_table
from gateway.dialects.mindie import errors, native, openai, tgi, triton_generate, vllm
from gateway.dialects.mindie import validate as v
from gateway.llm.served import ServedModels, ServedModelsSettings
from gateway.llm.types import Done, Token
from tests.fakes import FakeUpstream, trtllm_meta


@pytest.fixture
def catalog():
    return ServedModels(FakeUpstream(metas=[trtllm_meta("tiny_llm")]), ServedModelsSettings())


DONE = Done("length", True, "a b", 2, 2, (1, 2), 7, 0.01, 0.05)


def test_error_table_renders_every_kind():
    check_table(errors.TABLE, "mindie")
    assert errors.envelope(GatewayError(ErrorKind.INVALID_ARGUMENT, "x")) == (
        422, {"error": "x", "error_type": "Input Validation Error"})


INVALID = [
    (native.plan, {"inputs": "hi", "parameters": {"top_p": 1.5}}, "Parameter top_p must be in (0.0,1.0], got 1.5."),
    (native.plan, {"inputs": "hi", "parameters": {"max_new_tokens": 0}},
     "Parameter max_new_tokens must be in (0,2147483647], got 0."),
    (native.plan, {"inputs": "hi", "parameters": {"temperature": 0}},
     "Parameter temperature must be in (0.0,FLT_MAX], got 0."),
    (native.plan, {"inputs": "hi", "parameters": {"priority": 6}}, "Parameter priority must be in [1,5], got 6."),
    (native.plan, {"inputs": "hi", "parameters": {"timeout": 70000}},
     "Parameter timeout must be in (0,65535], got 70000."),
    (native.plan, {"inputs": "hi", "input_id": [1]}, "Input conflict."),
    (native.plan, {"parameters": {}}, "Parameter inputs is required."),
    (tgi.plan, {"inputs": "hi", "parameters": {"seed": -1}}, "Parameter seed must be in [0,9223372036854775807], got -1."),
    (tgi.plan, {"inputs": "hi", "parameters": {"typical_p": 0}}, "Parameter typical_p must be in (0.0,1.0], got 0."),
    (tgi.plan, {"inputs": "hi", "stream": True, "parameters": {"decoder_input_details": True}},
     "decoder_input_details == true is not supported when streaming tokens"),
    (tgi.plan, {"inputs": "hi", "parameters": {"stop": [""]}}, "Each stop string must be 1 to 1024 characters, got 0."),
    (tgi.plan, {"inputs": "hi", "parameters": {"do_sample": "yes"}}, "Parameter do_sample must be a bool, got 'yes'."),
    (vllm.plan, {"prompt": "hi", "temperature": 2.5}, "Parameter temperature must be in [0.0,2.0], got 2.5."),
    (vllm.plan, {"prompt": "hi", "repetition_penalty": 3}, "Parameter repetition_penalty must be in (0.0,2.0], got 3."),
    (vllm.plan, {"prompt": "hi", "n": 2, "best_of": 1}, "Parameter best_of must be greater than or equal to n, got 1."),
    (vllm.plan, {"prompt": "hi", "presence_penalty": -3}, "Parameter presence_penalty must be in [-2.0,2.0], got -3."),
    (openai.plan_chat, {"messages": [{"role": "user", "content": "x"}]}, "Parameter model is required and must be a string."),
    (openai.plan_chat, {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, "Model gpt-9 not found."),
    (openai.plan_chat, {"model": "tiny_llm", "messages": []}, "Parameter messages is required and must be a non-empty list."),
    (openai.plan_chat, {"model": "tiny_llm", "messages": [{"role": "robot", "content": "x"}]},
     "Each message must have a role in ['system', 'user', 'assistant', 'tool']."),
    (openai.plan_completions, {"model": "tiny_llm", "prompt": "x", "top_k": 0}, "Parameter top_k must be in (0,2147483647], got 0."),
    (triton_generate.plan, {"text_input": "x", "id": "bad id"}, "Parameter id must match ^[a-zA-Z0-9_-]{1,256}$."),
    (triton_generate.plan, {"text_input": "x", "parameters": {"batch_size": 0}},
     "Parameter batch_size must be in (0,2147483647], got 0."),
]


@pytest.mark.parametrize(("planner", "body", "message"), INVALID)
async def test_invalid_requests_get_mindie_messages(catalog, planner, body, message):
    with pytest.raises(GatewayError) as e:
        await planner(body, catalog, "1")
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT
    assert e.value.message == message


async def test_defaults_twenty_new_tokens_and_maxitertimes(catalog):
    assert (await native.plan({"inputs": "x"}, catalog, "1")).req.max_tokens == 20
    assert (await tgi.plan({"inputs": "x"}, catalog, "1")).req.max_tokens == 20
    assert (await triton_generate.plan({"text_input": "x"}, catalog, "1", "tiny_llm")).req.max_tokens == 20
    assert (await vllm.plan({"prompt": "x"}, catalog, "1")).req.max_tokens == 512
    chat = {"model": "llama2_7b", "messages": [{"role": "user", "content": "x"}]}
    assert (await openai.plan_chat(chat, catalog, "1")).req.max_tokens == 512


async def test_triton_accepts_flat_keys_and_nested_parameters_win(catalog):
    plan = await triton_generate.plan({"text_input": "x", "max_tokens": 7, "temperature": 0.5,
                                       "parameters": {"temperature": 0.25}}, catalog, "1", "tiny_llm")
    assert plan.req.max_tokens == 7 and plan.req.sampling.temperature == 0.25


async def test_top_k_minus_one_means_off_for_openai_and_vllm(catalog):
    assert (await vllm.plan({"prompt": "x", "top_k": -1}, catalog, "1")).req.sampling.top_k is None


def test_tgi_stream_final_event_is_the_last_tokens_and_compat_array():
    """MindIE: one event per token, the last token's event the final one (issue 45, item 7)."""
    enc = tgi.TgiEncoder(details=True, prefix_text="", compat=True)
    assert enc.token(Token("a", (4,))) == b""  # held until it is known not to be the last
    assert enc.token(Token(" b", (5,))) == (
        b'data: {"token":{"id":4,"text":"a","logprob":null,"special":false},"generated_text":null,"details":null}\n\n')
    assert enc.done(DONE) == (
        b'data: {"token":{"id":5,"text":" b","logprob":null,"special":false},"generated_text":"a b",'
        b'"details":{"prompt_tokens":2,"finish_reason":"length","generated_tokens":2,"seed":7}}\n\n')
    empty = tgi.TgiEncoder(details=False, prefix_text="", compat=False)  # no token at all: an end token
    assert empty.done(DONE) == (
        b'data: {"token":{"id":0,"text":"","logprob":null,"special":true},"generated_text":"a b","details":null}\n\n')
    body = enc.body(DONE)
    assert isinstance(body, list) and [t["text"] for t in body[0]["details"]["tokens"]] == ["a", " b"]


def test_vllm_framing_is_nul_terminated_json_and_prompt_space_text():
    enc = vllm.VllmEncoder("p")
    assert enc.token(Token(" b", (1,))) == b'{"text":[" b"]}\x00'
    assert enc.body(DONE) == {"text": ["p a b"]}
    err = enc.error(GatewayError(ErrorKind.DEADLINE_EXCEEDED, "x"))
    assert err == b'{"error":"Engine callback timeout: client timeout","error_type":"Incomplete Generation"}\x00'


def test_openai_final_chunk_has_usage_then_done():
    enc = openai.ChatEncoder("12", "m")
    out = enc.done(DONE).split(b"\n\n")
    final = orjson.loads(out[0][len(b"data: "):])
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    assert out[1] == b"data: [DONE]"


@pytest.mark.parametrize("rid, model", [("12", 'm"\\<\u2028>'), ("\x00content\x00", "m")])
def test_openai_chat_chunk_from_its_template_is_the_rendered_chunk(rid, model):
    """A text chunk is written from bytes rendered once per sequence around its content: the same
    bytes as the chunk rendered whole, whatever the text, the id or the model name."""
    enc = openai.ChatEncoder(rid, model, n=2)
    for text in ("", " word", 'q"\\\n\t\x01\u00e9\U0001f600\u2028<>'):
        for index in (0, 1):
            whole = b"data: " + orjson.dumps(enc.envelope(enc._choice(text, None, index=index))) + b"\n\n"
            assert enc.token(Token(text, (), index=index)) == whole
    assert sorted(enc.frames) == ([0, 1] if rid == "12" else [])  # the marker as the id: rendered whole


def test_triton_stream_has_no_space_after_data():
    enc = triton_generate.TritonEncoder("r", "m", details=False)
    assert enc.token(Token("a", (1,))).startswith(b'data:{"id":"r"')
    assert enc.done(DONE) == b""


# --- wire-format audit (docs/mindie.md, "Audit"): one test per fix ---


async def test_tgi_details_tokens_in_mindie_key_order_and_prefill_on_request(catalog):
    plan = await tgi.plan({"inputs": "Hi there", "parameters": {"details": True, "decoder_input_details": True}},
                          catalog, "1")
    body = plan.encoder.body(DONE)
    assert list(body["details"]) == ["prompt_tokens", "finish_reason", "generated_tokens", "prefill", "seed", "tokens"]
    assert [list(t) for t in body["details"]["tokens"]] == [["id", "logprob", "special", "text"]] * 2
    prefill = body["details"]["prefill"]
    assert [t["text"] for t in prefill] == ["Hi", " there"] and all(t["special"] is False for t in prefill)
    without = await tgi.plan({"inputs": "Hi there", "parameters": {"details": True}}, catalog, "1")
    assert without.encoder.body(DONE)["details"]["prefill"] == []


async def test_tgi_return_full_text_prepends_the_inputs_as_sent_not_truncated(catalog):
    plan = await tgi.plan({"inputs": "one two three", "parameters": {"truncate": 1, "return_full_text": True}},
                          catalog, "1")
    assert plan.req.prompt == "three"
    assert plan.encoder.body(DONE) == {"generated_text": "one two threea b"}


def test_native_stream_final_event_is_the_last_tokens_with_its_ids():
    enc = native.NativeEncoder(details=True)
    assert enc.token(Token("a", (4,), prefill_ms=30)) == b""
    assert enc.token(Token(" b", (5,), decode_ms=15)) == (
        b'data: {"prefill_time":30,"decode_time":null,"token":{"id":[4],"text":"a"}}\n\n')
    assert enc.done(DONE) == (
        b'data: {"decode_time":15,"prefill_time":null,"generated_text":"a b",'
        b'"details":{"finish_reason":"length","generated_tokens":2,"seed":7},"token":{"id":[5],"text":null}}\n\n')


def test_native_stream_final_details_have_no_token_ids_but_the_answer_does():
    enc = native.NativeEncoder(details=True)
    final = orjson.loads(enc.done(DONE)[len(b"data: "):])
    assert final["details"] == {"finish_reason": "length", "generated_tokens": 2, "seed": 7}
    assert enc.body(DONE)["details"] == {"finish_reason": "length", "generated_tokens": 2,
                                         "generated_token_ids": [1, 2], "seed": 7}


def test_triton_details_per_event_as_seed_004_and_arrays_in_the_answer():
    enc = triton_generate.TritonEncoder("a123", "m", details=True)
    event = orjson.loads(enc.token(Token("am", (1,), prefill_ms=27, queue_us=10))[len(b"data:"):])
    assert event["details"] == {"generated_tokens": 1, "first_token_cost": None, "decode_cost": None,
                                "batch_size": 1, "queue_wait_time": 10}  # seed 004's key order
    # MindIE Server writes the engine timings (ms) after details: prefill_time on the first event
    assert list(event) == ["id", "model_name", "model_version", "text_output", "details", "prefill_time",
                           "decode_time"]
    assert (event["prefill_time"], event["decode_time"]) == (27, None)
    second = orjson.loads(enc.token(Token(" x", (2,), decode_ms=15))[len(b"data:"):])
    assert (second["prefill_time"], second["decode_time"], second["details"]["queue_wait_time"]) == (None, 15, 0)
    last = orjson.loads(enc.done(DONE)[len(b"data:"):])
    assert list(last["details"])[0] == "finish_reason" and last["details"]["finish_reason"] == "length"
    whole = enc.body(DONE)["details"]
    assert list(whole) == ["finish_reason", "generated_tokens", "first_token_cost", "decode_cost", "batch_size",
                           "queue_wait_time"]
    # per-iteration arrays, one entry per generated token: the gateway's wait first, then 0
    done = replace(DONE, queue_us=40, completion_tokens=3)
    whole = triton_generate.TritonEncoder("a123", "m", details=True).body(done)["details"]
    assert whole["batch_size"] == [1, 1, 1] and whole["queue_wait_time"] == [40, 0, 0]


@pytest.mark.parametrize(("prompt", "message"), [
    ([1, 2], "Model tiny_llm does not take token ids: it has no input_ids input and output_ids output."),
    (["a", "b"], "All elements of the prompt array must be integers."),
    ([], "Prompt array cannot be empty."),
    ([1, 2**31], "Data element must be in range [0, 1048576], but got 2147483648."),
    (5, "The type of prompt is abnormal,prompt must be str or integer list."),
])
async def test_completions_prompt_lists(catalog, prompt, message):
    with pytest.raises(GatewayError) as e:
        await openai.plan_completions({"model": "tiny_llm", "prompt": prompt}, catalog, "1")
    assert e.value.message == message


async def test_stop_token_ids_type_checked_and_out_of_range_values_dropped(catalog):
    with pytest.raises(GatewayError, match="stop_token_ids must be a list of integers"):
        await vllm.plan({"prompt": "x", "stop_token_ids": ["a"]}, catalog, "1")
    assert v.stop_token_ids({"stop_token_ids": [-1, 5, 2**31]}) == (5,)
    await vllm.plan({"prompt": "x", "stop_token_ids": [-1, 2**40]}, catalog, "1")  # dropped, not rejected


async def test_chat_prompt_length_is_limited_before_and_after_the_template(catalog):
    from gateway.core import bounded

    saved = bounded.LIMITS.max_prompt_chars
    bounded.LIMITS.max_prompt_chars = 12
    try:
        messages = [{"role": "user", "content": "x" * 7}, {"role": "user", "content": [{"type": "text", "text": "y" * 6}]}]
        with pytest.raises(GatewayError, match="Parameter messages must be at most 12 characters, got 13."):
            await openai.plan_chat({"model": "tiny_llm", "messages": messages}, catalog, "1")
        # the contents fit, the rendered prompt (the template's own text added) does not
        with pytest.raises(GatewayError, match="Parameter messages must be at most 12 characters, got"):
            await openai.plan_chat({"model": "tiny_llm", "messages": messages[:1]}, catalog, "1")
        bounded.LIMITS.max_prompt_chars = 10_000
        assert (await openai.plan_chat({"model": "tiny_llm", "messages": messages}, catalog, "1")).req.prompt
    finally:
        bounded.LIMITS.max_prompt_chars = saved
