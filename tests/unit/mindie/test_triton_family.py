"""MindIE's Triton family and token-id prompts without a network: token inference's checks (MindIE
Server's texts, in its order), TensorRT-LLM's token tensors, per-event timings, stopInfer, and the
OpenAI fields MindIE checks (logprobs, tools, response_format)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import orjson
import pytest

from gateway.core.errors import GatewayError
from gateway.core.tensors import InferResponse, Tensor, TensorSpec
from gateway.dialects.mindie import native, openai, triton_token
from gateway.dialects.mindie.running import Running
from gateway.llm.served import ServedModels, ServedModelsSettings
from gateway.llm.service import GenerationService
from gateway.llm.types import Done, GenerateRequest, Token
from tests.fakes import FakeUpstream, text_response, trtllm_meta

TOKEN_INPUTS = ("input_ids", "input_lengths", "request_output_len")


def token_meta(name="tiny_llm", extra: tuple[str, ...] = ()):
    meta = trtllm_meta(name, extra=TOKEN_INPUTS + extra)
    return replace(meta, outputs=meta.outputs + (TensorSpec("output_ids", "INT32", (-1, -1, -1)),))


@pytest.fixture
def catalog():
    return ServedModels(FakeUpstream(metas=[token_meta()]), ServedModelsSettings())


def body(**over):
    out = {"id": "42", "inputs": [{"name": "input0", "shape": [1, 3], "datatype": "UINT32", "data": [396, 319, 7]}],
           "outputs": [{"name": "output0"}], "parameters": {"max_new_tokens": 4}}
    out.update(over)
    return out


def inp(**over):
    return [{"name": "input0", "shape": [1, 3], "datatype": "UINT32", "data": [396, 319, 7], **over}]


# MindIE Server's checks, in its order (single_req_triton_token_infer_interface.cpp)
TOKEN_INVALID = [
    (body(inputs=None), "Req should contain 'inputs' and the type should be array."),
    (body(inputs=[]), "Inputs count must be 1."),
    (body(inputs=inp() * 2), "Inputs count must be 1."),
    (body(inputs=inp(name=3)), "Cannot find name in inputs or its type is not string"),
    (body(inputs=inp(name="n" * 257)), "The length of name set in inputs exceeds 256."),
    (body(inputs=inp(shape=None)), "Cannot find shape in inputs or its type is not array"),
    (body(inputs=inp(shape=[1, -3])), "Shape element must be integer type."),
    (body(inputs=inp(shape=[2, 3])), "Shape must be at most two-dimensional, and the last element's value must be "
                                     "in (0,1048576]."),
    (body(inputs=inp(shape=[1, 1, 3])), "Shape must be at most two-dimensional, and the last element's value must "
                                        "be in (0,1048576]."),
    (body(inputs=inp(datatype=None)), "Cannot find datatype in inputs or its type is not string"),
    (body(inputs=inp(datatype="INT32")), "Unsupported datatype, got INT32."),
    (body(inputs=inp(data="x")), "Cannot find data in inputs or its type is not array"),
    (body(inputs=inp(data=[1, 2])), "Data size should be 3, got 2."),
    (body(inputs=inp(data=[1, 2, 3.5])), "Data element must be integer type."),
    (body(inputs=inp(shape=[0], data=[])), "Inputs token length must be in (0, 1048576]"),
    (body(inputs=inp(data=[1, 2, 2**31])), "Data element must be in range [0, 1048576], but got 2147483648."),
    (body(id=7), "id must be string type."),
    (body(id="bad id"), "The id can contain only digits, letters, underscores(_), hyphens(-) and no more than 256 "
                        "words in length."),
    (body(outputs=None), "Req should contain 'outputs' and the type should be array."),
    (body(outputs=[{"name": "a"}, {"name": "b"}]), "Outputs size should be 1, got 2."),
    (body(outputs=[{}]), "Outputs name must be non-empty string."),
    (body(parameters={"top_p": 1.5}), "Parameter top_p must be in (0.0,1.0], got 1.5."),
]


@pytest.mark.parametrize(("req", "message"), TOKEN_INVALID)
async def test_token_inference_checks_in_mindie_order_with_its_texts(catalog, req, message):
    with pytest.raises(GatewayError) as e:
        await triton_token.plan(req, catalog, "1", path_model="tiny_llm")
    assert e.value.message == message and e.value.kind.value == "invalid_argument"


async def test_token_inference_plan_and_answer(catalog):
    plan = await triton_token.plan(body(), catalog, "9", path_model="tiny_llm")
    assert plan.req.prompt_ids == (396, 319, 7) and plan.req.prompt == "" and plan.req.max_tokens == 4
    done = Done("length", True, "a b", 3, 2, (5, 11), 7, 0.01, 0.05)
    assert plan.encoder.body(done) == {"id": "42", "outputs": [
        {"name": "output0", "shape": [1, 2], "datatype": "UINT32", "data": [5, 11]}]}
    # shape [N]; no id: the request id; an empty output name is MindIE's output0; input parameters win
    plain = body(inputs=[{"name": "x", "shape": [3], "datatype": "UINT32", "data": [1, 2, 3],
                          "parameters": {"max_new_tokens": 2}}], outputs=[{"name": ""}])
    del plain["id"]
    plan = await triton_token.plan(plain, catalog, "9", path_model="tiny_llm")
    assert plan.req.max_tokens == 2
    assert plan.encoder.body(done)["id"] == "9" and plan.encoder.body(done)["outputs"][0]["name"] == "output0"


async def test_token_ids_need_a_model_with_the_token_contract():
    text_only = ServedModels(FakeUpstream(metas=[trtllm_meta("tiny_llm")]), ServedModelsSettings())
    message = "Model tiny_llm does not take token ids: it has no input_ids input and output_ids output."
    for planner, req in ((triton_token.plan, body()), (native.plan, {"input_id": [1, 2]})):
        with pytest.raises(GatewayError) as e:
            await planner(req, text_only, "1", path_model="tiny_llm")
        assert e.value.message == message


@pytest.mark.parametrize(("value", "message"), [
    (None, "Input_id should not be empty"),
    ("1 2", "Parameter input_id must be an array"),
    ([1, "2"], "Parameter input_id must be integer"),
    ([1, -2], "Data element in param input_id is invalid"),
    ([], "Inputs token length must be in (0, 1048576]"),
])
async def test_native_input_id_checks(catalog, value, message):
    with pytest.raises(GatewayError) as e:
        await native.plan({"input_id": value}, catalog, "1")
    assert e.value.message == message


async def test_token_prompts_of_every_family_become_input_ids(catalog):
    assert (await native.plan({"input_id": [5, 6]}, catalog, "1")).req.prompt_ids == (5, 6)
    plan = await openai.plan_completions({"model": "tiny_llm", "prompt": [5, 6, 7]}, catalog, "1")
    assert plan.req.prompt_ids == (5, 6, 7) and plan.req.prompt == ""


def ids_response(text: str, ids: list[int]) -> InferResponse:
    outs = [Tensor("text_output", np.array([[text.encode()]], dtype=object), "BYTES"),
            Tensor("output_ids", np.array(ids, dtype=np.int32).reshape(1, 1, -1))]
    return InferResponse("tiny_llm", "1", outs)


async def test_token_tensors_and_the_models_own_ids():
    up = FakeUpstream([ids_response("a", [4]), ids_response(" b", [9])], metas=[token_meta()])
    model = await ServedModels(up, ServedModelsSettings()).resolve("tiny_llm")
    req = GenerateRequest("tiny_llm", "", 5, prompt_ids=(396, 319, 7))
    events = [ev async for ev in GenerationService(up).generate(req, model)]
    infer, _ = up.requests[0]
    tensors = {t.name: t for t in infer.inputs}
    assert "text_input" not in tensors and "max_tokens" not in tensors
    assert tensors["input_ids"].data.dtype == np.int32 and tensors["input_ids"].data.tolist() == [[396, 319, 7]]
    assert tensors["input_lengths"].data.tolist() == [[3]]
    assert tensors["request_output_len"].data.tolist() == [[5]]
    toks, done = events[:-1], events[-1]
    assert [t.ids for t in toks] == [(4,), (9,)]
    assert done.token_ids == (4, 9) and done.completion_tokens == 2 and done.prompt_tokens == 3


async def test_each_token_event_carries_mindies_timings():
    up = FakeUpstream([text_response("a"), text_response(" b"), text_response(" c")], metas=[token_meta()])
    model = await ServedModels(up, ServedModelsSettings()).resolve("tiny_llm")
    events = [ev async for ev in GenerationService(up).generate(GenerateRequest("tiny_llm", "hi", 5), model)]
    first, *rest = [ev for ev in events if isinstance(ev, Token)]
    assert first.prefill_ms is not None and first.decode_ms is None and first.queue_us >= 0
    assert all(t.prefill_ms is None and t.decode_ms is not None and t.queue_us == 0 for t in rest)
    assert events[-1].events == 3


async def test_stop_cancels_the_tracked_task_once():
    running = Running()
    started = asyncio.Event()

    async def handler():
        with running.track("77", "user-id") as entry:
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                return "stopped" if entry.absorb() else "cancelled"

    task = asyncio.create_task(handler())
    await started.wait()
    assert running.stop("user-id") is True
    assert await task == "stopped"
    assert running.stop("user-id") is False and running.stop("77") is False  # finished: not found


CHAT = {"model": "tiny_llm", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("extra", "message"), [
    ({"logprobs": True}, "logprobs/top_logprobs are not supported by this endpoint"),
    ({"top_logprobs": 2}, "logprobs/top_logprobs are not supported by this endpoint"),
    ({"top_logprobs": 21}, "Parameter top logprobs must be in [0, 20], got 21."),
    ({"logprobs": False, "top_logprobs": 1},
     "Value error, when using top_logprobs, logprobs must be true or null in chat completions"),
    ({"logprobs": "yes"}, "Parameter logprobs must be a bool, got 'yes'."),
    ({"tool_choice": "maybe"}, "Parameter tool_choice string not in [none, auto, required]"),
    ({"tool_choice": 3}, "Parameter tool_choice not string or object"),
    ({"tools": {"type": "function"}}, "Tools not array"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]},
     "function/tool calls are not supported by this endpoint"),
    ({"response_format": "json"}, "Parameter response_format must be an object"),
    ({"response_format": {}}, "Parameter response_format must contain 'type' field"),
    ({"response_format": {"type": "xml"}},
     "Parameter response_format.type must be 'json_object', 'json_schema' or 'text', got 'xml'"),
    ({"response_format": {"type": "json_schema"}},
     "Parameter response_format.json_schema is required when type is 'json_schema'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
     "Parameter response_format.json_schema.name is required"),
    ({"response_format": {"type": "json_object"}},
     "structured output (response_format) is not supported by this endpoint"),
])
async def test_openai_fields_mindie_checks_are_checked_or_refused(catalog, extra, message):
    with pytest.raises(GatewayError) as e:
        await openai.plan_chat({**CHAT, **extra}, catalog, "1")
    assert e.value.message == message and e.value.kind.value == "invalid_argument"


async def test_openai_fields_accepted_where_mindie_accepts_them(catalog):
    for extra in ({"logprobs": False}, {"tool_choice": "none"}, {"tools": []}, {"response_format": {"type": "text"}}):
        plan = await openai.plan_chat({**CHAT, **extra}, catalog, "1")
        assert plan.req.response_format is None
    with pytest.raises(GatewayError, match="logprobs should be in range"):
        await openai.plan_completions({"model": "tiny_llm", "prompt": "x", "logprobs": 30}, catalog, "1")
    with pytest.raises(GatewayError, match="^logprobs/top_logprobs are not supported by this endpoint$"):
        await openai.plan_completions({"model": "tiny_llm", "prompt": "x", "logprobs": 2}, catalog, "1")


async def test_response_format_goes_to_the_models_guided_decoding():
    meta = token_meta(extra=("guided_decoding_guide_type", "guided_decoding_guide"))
    up = FakeUpstream([text_response("{}")], metas=[meta])
    catalog = ServedModels(up, ServedModelsSettings())
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    plan = await openai.plan_chat({**CHAT, "response_format": fmt}, catalog, "1")
    assert plan.req.response_format == fmt
    _ = [ev async for ev in GenerationService(up).generate(plan.req, plan.model)]
    tensors = {t.name: t for t in up.requests[0][0].inputs}
    assert tensors["guided_decoding_guide_type"].data.tolist() == [[b"json_schema"]]
    assert orjson.loads(tensors["guided_decoding_guide"].data[0, 0]) == schema
    plan = await openai.plan_completions({"model": "tiny_llm", "prompt": "x",
                                          "response_format": {"type": "json_object"}}, catalog, "1")
    assert plan.req.response_format == {"type": "json_object"}


def lp_meta():
    meta = token_meta(extra=("return_log_probs",))
    return replace(meta, outputs=meta.outputs + (TensorSpec("output_log_probs", "FP32", (-1, -1, -1)),))


def lp_response(text: str, lps: list[float]) -> InferResponse:
    outs = [Tensor("text_output", np.array([[text.encode()]], dtype=object), "BYTES"),
            Tensor("output_log_probs", np.array(lps, dtype=np.float32).reshape(1, 1, -1))]
    return InferResponse("tiny_llm", "1", outs)


async def test_logprobs_come_from_the_models_output_log_probs():
    up = FakeUpstream([lp_response("a", [-0.5]), lp_response(" bc d", [-0.25, -1.0])], metas=[lp_meta()])
    catalog = ServedModels(up, ServedModelsSettings())
    plan = await openai.plan_chat({**CHAT, "logprobs": True, "top_logprobs": 0}, catalog, "1")
    events = [ev async for ev in GenerationService(up).generate(plan.req, plan.model)]
    tensors = {t.name: t for t in up.requests[0][0].inputs}
    assert tensors["return_log_probs"].data.tolist() == [[True]]
    done = events[-1]
    assert done.logprobs == (("a", -0.5), (" bc", -0.25), (" d", -1.0))  # word pieces shared out
    content = plan.encoder.body(done)["choices"][0]["logprobs"]["content"]
    assert content[1] == {"token": " bc", "logprob": -0.25, "bytes": [32, 98, 99], "top_logprobs": []}
    chunk = orjson.loads(plan.encoder.token(events[0])[len(b"data: "):])
    assert chunk["choices"][0]["logprobs"]["content"] == [{"token": "a", "logprob": -0.5, "bytes": [97],
                                                            "top_logprobs": []}]
    plan = await openai.plan_completions({"model": "tiny_llm", "prompt": "x", "logprobs": 0}, catalog, "1")
    assert plan.encoder.body(done)["choices"][0]["logprobs"] == {
        "text_offset": [0, 1, 4], "token_logprobs": [-0.5, -0.25, -1.0], "tokens": ["a", " bc", " d"],
        "top_logprobs": [{"a": -0.5}, {" bc": -0.25}, {" d": -1.0}]}
    # alternatives are not reported by TensorRT-LLM: asked for, refused as MindIE refuses them
    for req in ({**CHAT, "top_logprobs": 2}, {"model": "tiny_llm", "prompt": "x", "logprobs": 1}):
        planner = openai.plan_chat if "messages" in req else openai.plan_completions
        with pytest.raises(GatewayError, match="^logprobs/top_logprobs are not supported by this endpoint$"):
            await planner(req, catalog, "1")


async def test_stop_infer_ends_a_whole_answer_as_incomplete_generation_and_closes_the_triton_call(catalog):
    from gateway.dialects.mindie import streaming, triton_generate

    hold = asyncio.Event()
    up = FakeUpstream([text_response("a")], metas=[token_meta()], hold=hold)
    plan = await triton_generate.plan({"id": "s1", "text_input": "x"}, ServedModels(up, ServedModelsSettings()), "5",
                                      path_model="tiny_llm")
    running = Running()

    async def handler():
        with running.track(plan.req.request_id, plan.encoder.rid) as entry:
            return await streaming.whole(GenerationService(up), plan, entry)

    task = asyncio.create_task(handler())
    while not up.requests:  # the request reached the upstream and waits there
        await asyncio.sleep(0)
    assert running.stop("s1")
    with pytest.raises(GatewayError) as e:
        await task
    assert e.value.kind.value == "cancelled" and e.value.message == streaming.STOPPED
    assert up.closed == 1  # the ModelStreamInfer call was closed: Triton cancels the request
