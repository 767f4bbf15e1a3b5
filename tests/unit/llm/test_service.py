"""The generation core against a scripted upstream: tensors, stops, counts, finish reasons, cancel."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from gateway.core.errors import ErrorKind, GatewayError
from gateway.llm.served import ModelOptions, ServedModels, ServedModelsSettings
from gateway.llm.service import GenerationService
from gateway.llm.types import EOS, LENGTH, STOP_SEQUENCE, Done, GenerateRequest, Sampling, Token
from tests.fakes import FakeUpstream, text_response, trtllm_meta, vllm_meta


async def run(upstream, req, **catalog):
    model = await ServedModels(upstream, ServedModelsSettings(**catalog)).resolve(req.model)
    return [ev async for ev in GenerationService(upstream).generate(req, model)]


def words(*ws):
    return [text_response(w) for w in ws]


async def test_trtllm_tensors_have_batch_shapes_and_only_declared_inputs():
    up = FakeUpstream(words("a", " b"))
    req = GenerateRequest("llm", "hi", 5, Sampling(temperature=0.5, presence_penalty=1.0), stop=("x", "yz"),
                          stream=True)
    await run(up, req)
    infer, _ = up.requests[0]
    tensors = {t.name: t for t in infer.inputs}
    assert tensors["text_input"].shape == (1, 1) and tensors["text_input"].data[0, 0] == b"hi"
    assert tensors["max_tokens"].data.dtype == np.int32 and tensors["max_tokens"].data[0, 0] == 5
    assert tensors["temperature"].data.dtype == np.float32
    assert tensors["seed"].data.dtype == np.uint64  # generated when none given
    assert tensors["exclude_input_in_output"].data[0, 0]
    assert tensors["stop_words"].shape == (1, 2)
    assert "presence_penalty" not in tensors  # the model does not declare it


async def test_vllm_profile_sends_sampling_parameters_json():
    up = FakeUpstream(words("a"), metas=[vllm_meta()])
    req = GenerateRequest("vllm_model", "hi", 7, Sampling(top_k=3, seed=11), stop=("z",))
    await run(up, req)
    tensors = {t.name: t for t in up.requests[0][0].inputs}
    assert tensors["text_input"].shape == (1,)
    params = orjson.loads(tensors["sampling_parameters"].data[0])
    assert params == {"max_tokens": 7, "seed": 11, "top_k": 3, "stop": ["z"]}
    assert tensors["return_finish_reason"].data[0]


async def test_tokens_then_done_with_counts_and_length_reason():
    up = FakeUpstream(words("one", " two", " three"))
    events = await run(up, GenerateRequest("llm", "a b", 3, stream=True))
    assert [e.text for e in events if isinstance(e, Token)] == ["one", " two", " three"]
    done = events[-1]
    assert isinstance(done, Done)
    assert (done.text, done.prompt_tokens, done.completion_tokens) == ("one two three", 2, 3)
    assert done.finish_reason == LENGTH and done.finish_derived and done.openai_reason == "length"


async def test_fewer_tokens_than_the_limit_is_eos():
    done = (await run(FakeUpstream(words("one")), GenerateRequest("llm", "p", 10)))[-1]
    assert done.finish_reason == EOS and done.openai_reason == "stop"


async def test_stop_string_across_tokens_is_held_back_cut_and_cancels_upstream():
    up = FakeUpstream(words("one", " tw", "o three", " four"))
    events = await run(up, GenerateRequest("llm", "p", 10, stop=("two",), stream=True))
    assert "".join(e.text for e in events if isinstance(e, Token)) == "one "
    assert events[-1].finish_reason == STOP_SEQUENCE
    assert up.consumed == 3 and up.closed == 1  # stopped reading: the stream was closed early


async def test_model_reported_counts_and_finish_reason_win():
    up = FakeUpstream([text_response("x y z", num_input_tokens=9, num_output_tokens=4, finish_reason="length")])
    done = (await run(up, GenerateRequest("llm", "p", 100)))[-1]
    assert (done.prompt_tokens, done.completion_tokens, done.finish_reason) == (9, 4, LENGTH)
    assert not done.finish_derived


async def test_given_seed_is_passed_and_reported():
    up = FakeUpstream(words("a"))
    done = (await run(up, GenerateRequest("llm", "p", 2, Sampling(seed=42))))[-1]
    seed = {t.name: t for t in up.requests[0][0].inputs}["seed"].data[0, 0]
    assert seed == 42 and done.seed == 42


async def test_upstream_error_propagates_as_gateway_error():
    up = FakeUpstream([text_response("a"), GatewayError(ErrorKind.UPSTREAM_FAILED, "boom")])
    with pytest.raises(GatewayError, match="boom"):
        await run(up, GenerateRequest("llm", "p", 5))
    assert up.closed == 1


async def test_closing_the_generation_closes_the_upstream_stream():
    up = FakeUpstream(words("a", " b", " c"))
    model = await ServedModels(up, ServedModelsSettings()).resolve("llm")
    gen = GenerationService(up).generate(GenerateRequest("llm", "p", 5, stream=True), model)
    assert isinstance(await anext(gen), Token)
    await gen.aclose()
    assert up.closed == 1 and up.consumed == 1


async def test_catalog_aliases_profiles_and_unknown_models():
    up = FakeUpstream(metas=[trtllm_meta("tiny_llm"), vllm_meta("v")])
    cat = ServedModels(up, ServedModelsSettings(models={"tiny_llm": ModelOptions(max_tokens=9)}))
    assert await cat.served() == ["tiny_llm", "v"]
    alias = await cat.resolve("llama2_7b")
    assert alias.spec.name == "tiny_llm" and alias.spec.max_tokens == 9 and alias.profile.name == "trtllm"
    assert (await cat.resolve("v")).profile.name == "vllm"
    with pytest.raises(GatewayError) as e:
        await cat.resolve("nope")
    assert e.value.kind is ErrorKind.NOT_FOUND and e.value.message == "Model nope not found."


async def test_non_llm_models_are_not_exposed():
    from gateway.core.tensors import ModelMetadata, TensorSpec

    plain = ModelMetadata("half", ("1",), "python", (TensorSpec("x", "FP32", (-1,)),),
                          (TensorSpec("y", "FP32", (-1,)),))
    up = FakeUpstream(metas=[plain, trtllm_meta("tiny_llm")])
    assert await ServedModels(up, ServedModelsSettings()).served() == ["tiny_llm"]


async def test_resolving_a_named_model_looks_at_that_model_only():
    from gateway.core.tensors import ModelMetadata, TensorSpec

    plain = ModelMetadata("half", ("1",), "python", (TensorSpec("x", "FP32", (-1,)),),
                          (TensorSpec("y", "FP32", (-1,)),))
    up = FakeUpstream(metas=[trtllm_meta("tiny_llm"), vllm_meta("v"), plain])
    looked_up = []
    real = up.model_metadata

    async def spy(model, version=""):
        looked_up.append(model)
        return await real(model, version)

    up.model_metadata = spy
    cat = ServedModels(up, ServedModelsSettings())
    assert (await cat.resolve("llama2_7b")).spec.name == "tiny_llm"
    assert looked_up == ["tiny_llm"]  # no walk over the whole repository on the request path
    with pytest.raises(GatewayError) as e:
        await cat.resolve("half")  # exists, but is not a text LLM
    assert e.value.kind is ErrorKind.NOT_FOUND and e.value.message == "Model half not found."
