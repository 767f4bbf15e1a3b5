"""The model's own tokenizer (a real byte-level BPE made in-repo with the tokenizers library):
counts, incremental detokenization that never cuts a character, the chat template as Hugging
Face renders it, and the token model's ids decoded by the generation core."""

from __future__ import annotations

import json
from dataclasses import replace

import jinja2
import numpy as np
import pytest

from gateway.core.errors import GatewayError
from gateway.core.tensors import InferResponse, ModelMetadata, Tensor, TensorSpec
from gateway.llm import tokenizers
from gateway.llm.hf import REPLACEMENT, load
from gateway.llm.served import ModelOptions, ServedModels, ServedModelsSettings
from gateway.llm.service import GenerationService
from gateway.llm.types import Done, GenerateRequest, Token
from gateway.tools.maketokenizer import build
from tests.fakes import FakeUpstream, trtllm_meta
from tests.support import ROOT

TOKENIZER_DIR = str(ROOT / "model_repository_trtllm" / "tokenizer")
TEXT = "Paris: café au lait, 東京 is far away 🙂."


@pytest.fixture(scope="module")
def tok():
    return load(TOKENIZER_DIR)


def test_the_committed_tokenizer_is_what_the_tool_makes(tmp_path):
    build(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (ROOT / "model_repository_trtllm" / "tokenizer" / name).read_bytes()


def test_hf_prefix_names_the_directory_and_counts_are_the_tokenizers(tok):
    assert tokenizers.tokenizer(f"hf:{TOKENIZER_DIR}") is tok
    ids = tok.ids(TEXT)
    assert tok.count(TEXT) == len(ids) and tok.decode(ids) == TEXT
    assert len(ids) != len(TEXT.split()) and len(ids) != (len(TEXT) + 3) // 4  # neither guess
    with pytest.raises(GatewayError, match="cannot be loaded"):
        tokenizers.tokenizer("hf:/nonexistent/dir")


def test_detokenizer_never_cuts_a_character_across_events(tok):
    ids = tok.ids(TEXT)
    assert any(REPLACEMENT in tok.decode([i]) for i in ids)  # some ids alone are part of a character
    detok = tok.detokenizer()
    pieces = [detok.feed([i]) for i in ids] + [detok.flush()]
    assert all(REPLACEMENT not in p for p in pieces)
    assert "".join(pieces) == TEXT
    assert "東" in pieces or any(p.endswith("東") or p.startswith("東") for p in pieces)


def test_chat_template_is_the_tokenizers_and_renders_as_hugging_face(tok):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Météo",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                              "required": ["city"]}}}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"}]
    catalog = ServedModels(FakeUpstream(), ServedModelsSettings(models={"llm": ModelOptions(tokenizer_dir=TOKENIZER_DIR)}))
    tpl = catalog._template(catalog._specs["llm"], tok)
    got = tpl.render(messages, request_tools=tools)
    # Hugging Face's apply_chat_template, written out: its environment, filter and variables
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    want = env.from_string(tok.chat_template).render(messages=messages, tools=tools, add_generation_prompt=True,
                                                      **tok.special_tokens)
    assert got == want
    assert '"description": "Météo"' in got and got.endswith("<|im_start|>assistant\n")
    assert "<tools>" not in tpl.render(messages)
    for taken in ("tools", "eos_token", "add_generation_prompt"):  # chat_template_kwargs may not replace them
        with pytest.raises(GatewayError, match=f"may not set {taken}"):
            tpl.render(messages, **{taken: "x"})


def _ids_response(ids: list[int]) -> InferResponse:
    return InferResponse("tensorrt_llm", "1", [Tensor("output_ids", np.array(ids, dtype=np.int32).reshape(1, 1, -1))])


def _token_meta() -> ModelMetadata:
    ins = tuple(TensorSpec(n, "INT32", (-1, 1)) for n in ("input_ids", "input_lengths", "request_output_len",
                                                           "streaming", "exclude_input_in_output"))
    return ModelMetadata("tensorrt_llm", ("1",), "python", ins, (TensorSpec("output_ids", "INT32", (-1, -1, -1)),),
                         max_batch_size=8, decoupled=True)


async def test_token_prompt_goes_to_the_token_model_and_its_ids_are_decoded(tok):
    ids = tok.ids(TEXT)
    up = FakeUpstream([_ids_response([i]) for i in ids], metas=[trtllm_meta("llm"), _token_meta()])
    settings = ServedModelsSettings(models={"llm": ModelOptions(tokenizer_dir=TOKENIZER_DIR, token_model="tensorrt_llm")})
    model = await ServedModels(up, settings).resolve("llm")
    req = GenerateRequest("llm", "", 64, prompt_ids=(5, 6, 7), stream=True)
    events = [ev async for ev in GenerationService(up).generate(req, model)]
    infer = up.requests[0][0]
    assert infer.model == "tensorrt_llm"
    sent = {t.name: t.data for t in infer.inputs}
    assert sent["input_ids"].tolist() == [[5, 6, 7]] and sent["streaming"].tolist() == [[True]]
    texts = [e.text for e in events if isinstance(e, Token)]
    assert "".join(texts) == TEXT and all(REPLACEMENT not in t for t in texts)
    done = events[-1]
    assert isinstance(done, Done) and done.completion_tokens == len(ids) and done.prompt_tokens == 3


async def test_streamed_text_prompt_is_tokenized_here_and_counted_exactly(tok):
    prompt = "Tell me about the weather, s'il vous plaît"
    up = FakeUpstream([_ids_response(tok.ids(" ok"))], metas=[trtllm_meta("llm"), _token_meta()])
    settings = ServedModelsSettings(models={"llm": ModelOptions(tokenizer_dir=TOKENIZER_DIR, token_model="tensorrt_llm")})
    model = await ServedModels(up, settings).resolve("llm")
    events = [ev async for ev in GenerationService(up).generate(GenerateRequest("llm", prompt, 8, stream=True), model)]
    sent = {t.name: t.data for t in up.requests[0][0].inputs}
    assert sent["input_ids"].tolist() == [list(tok.prompt_ids(prompt))]
    assert events[-1].prompt_tokens == tok.prompt_count(prompt) == len(tok.prompt_ids(prompt))


async def test_max_seq_len_is_counted_with_the_tokenizer(tok):
    prompt = "What is machine learning, naïvely?"
    n = tok.prompt_count(prompt)
    up = FakeUpstream([_ids_response(tok.ids(" ok"))], metas=[trtllm_meta("llm"), _token_meta()])
    settings = ServedModelsSettings(models={"llm": ModelOptions(tokenizer_dir=TOKENIZER_DIR, max_seq_len=n + 3)})
    model = await ServedModels(up, settings).resolve("llm")
    [ev async for ev in GenerationService(up).generate(GenerateRequest("llm", prompt, 100), model)]
    assert {t.name: t.data for t in up.requests[0][0].inputs}["max_tokens"].tolist() == [[3]]  # cut to what is left
    settings = ServedModelsSettings(models={"llm": ModelOptions(tokenizer_dir=TOKENIZER_DIR, max_seq_len=n)})
    model = await ServedModels(up, settings).resolve("llm")
    with pytest.raises(GatewayError, match=f"The input is {n} tokens"):
        [ev async for ev in GenerationService(up).generate(GenerateRequest("llm", prompt, 1), model)]


async def test_prefill_decode_phases_of_an_ensemble_go_to_its_token_model(tok):
    from gateway.llm.pd import Handoff, PhasedGeneration

    meta = _token_meta()
    meta = replace(meta, inputs=(*meta.inputs, TensorSpec("context_phase_params", "UINT8", (-1, -1))),
                   outputs=(*meta.outputs, TensorSpec("context_phase_params", "UINT8", (-1, -1))))
    first = InferResponse("tensorrt_llm", "1", [
        Tensor("output_ids", np.array(tok.ids(" Paris"), dtype=np.int32).reshape(1, 1, -1)),
        Tensor("context_phase_params", np.frombuffer(b"state", dtype=np.uint8).reshape(1, -1))])
    up = FakeUpstream([first], metas=[trtllm_meta("llm"), meta])
    settings = ServedModelsSettings(models={"llm": ModelOptions(tokenizer_dir=TOKENIZER_DIR, token_model="tensorrt_llm")})
    model = await ServedModels(up, settings).resolve("llm")
    prompt = "weather in Paris?"
    events = [ev async for ev in PhasedGeneration(up).context(GenerateRequest("llm", prompt, 8), model)]
    infer = up.requests[0][0]
    assert infer.model == "tensorrt_llm" and infer.parameters["request_type"] == "context_only"
    assert {t.name: t.data for t in infer.inputs}["input_ids"].tolist() == [list(tok.prompt_ids(prompt))]
    assert [e.text for e in events if isinstance(e, Token)] == [" Paris"] and isinstance(events[-1], Handoff)


def test_pieces_are_each_token_decoded_alone(tok):
    ids = tok.ids(TEXT)
    pieces = tok.pieces(TEXT)
    assert len(pieces) == len(ids) == tok.count(TEXT)
    assert pieces == [tok.decode([i], skip_special_tokens=False) for i in ids]
    assert "".join(tok.pieces("Paris au lait, far away.")) == "Paris au lait, far away."  # ASCII: no token splits a character


def test_a_long_text_is_encoded_as_a_short_one_is():
    from gateway.llm import hf

    tok = hf.load(TOKENIZER_DIR)
    text = "café au lait, 東京 🙂 and plain words. " * (hf.RELEASE_GIL_CHARS // 20)
    assert len(text) > hf.RELEASE_GIL_CHARS  # encode_batch, which lets go of the GIL
    assert tok.prompt_ids(text) == tuple(tok._tok.encode(text, add_special_tokens=True).ids)
    assert tok.ids(text) == tuple(tok._tok.encode(text, add_special_tokens=False).ids)
    assert tok.count(text) == len(tok.ids(text)) and tok.prompt_count(text) == len(tok.prompt_ids(text))
