"""MindIE-style API with the originals' official clients: the openai SDK and text-generation."""

from __future__ import annotations

import openai
import pytest
from text_generation import Client
from text_generation.errors import UnknownError

PROMPT = [{"role": "system", "content": "You are a helpful assistant."}]


@pytest.fixture(scope="module")
def oai(gateway):
    with openai.OpenAI(base_url=gateway.url("mindie_http") + "/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def tgi(gateway):
    return Client(gateway.url("mindie_http"), timeout=30)


def test_seed_chat_request_non_stream(oai):
    r = oai.chat.completions.create(model="llama2_7b", messages=PROMPT, max_tokens=20, presence_penalty=1.03,
                                    frequency_penalty=1.0, seed=None, temperature=0.5, top_p=0.95)
    assert r.object == "chat.completion" and r.id.isdigit() and r.model == "llama2_7b"
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens == len(choice.message.content.split())
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_token_by_token_with_usage_on_the_last_chunk(oai):
    chunks = list(oai.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=4, stream=True))
    texts = [c.choices[0].delta.content for c in chunks]
    assert texts[0] == "" and len([t for t in texts if t]) == 4
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 4
    full = oai.chat.completions.create(model="tiny_llm", messages=PROMPT, max_tokens=4)
    assert "".join(texts) == full.choices[0].message.content


def test_completions_stream_and_not(oai):
    whole = oai.completions.create(model="tiny_llm", prompt="Once upon a time", max_tokens=50)
    assert whole.choices[0].finish_reason == "stop"  # tiny_llm's natural end (8..24 tokens) < 50
    assert whole.usage.prompt_tokens == 4
    parts = list(oai.completions.create(model="tiny_llm", prompt="Once upon a time", max_tokens=50, stream=True))
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    assert parts[-1].choices[0].finish_reason == "stop"


def test_stop_sequence_is_cut_and_reported_as_stop(oai):
    full = oai.completions.create(model="tiny_llm", prompt="stop test", max_tokens=30).choices[0].text
    word = full.split()[3]
    cut = oai.completions.create(model="tiny_llm", prompt="stop test", max_tokens=30, stop=[word])
    assert cut.choices[0].text == full[: full.index(word)] and cut.choices[0].finish_reason == "stop"


def test_openai_errors_have_mindie_envelope_and_status(oai):
    with pytest.raises(openai.UnprocessableEntityError) as e:
        oai.chat.completions.create(model="no_such_model", messages=PROMPT)
    assert e.value.status_code == 422 and e.value.body == "Model no_such_model not found."
    with pytest.raises(openai.UnprocessableEntityError) as e:
        oai.chat.completions.create(model="tiny_llm", messages=PROMPT, top_p=1.5)
    assert e.value.body == "Parameter top_p must be in (0.0,1.0], got 1.5."


def test_models_list_and_alias(oai):
    ids = [m.id for m in oai.models.list()]
    assert "tiny_llm" in ids and "llama2_7b" in ids
    assert oai.models.retrieve("llama2_7b").owned_by == "MindIE Server"


def test_tgi_client_generate_with_details(tgi):
    r = tgi.generate("My name is Olivier and I", max_new_tokens=5, seed=12)
    assert r.details.finish_reason.value == "length" and r.details.generated_tokens == 5
    assert r.details.seed == 12
    assert "".join(t.text for t in r.details.tokens) == r.generated_text


def test_tgi_client_generate_stream(tgi):
    """As MindIE's TGI family: five events for five tokens, the last carrying the fifth token and
    ``generated_text`` (issue 45, item 7); no special end token."""
    responses = list(tgi.generate_stream("My name is Olivier and I", max_new_tokens=5))
    assert len(responses) == 5 and not any(r.token.special for r in responses)
    text = "".join(r.token.text for r in responses)
    assert [r.generated_text is None for r in responses] == [True] * 4 + [False]
    assert responses[-1].generated_text == text and responses[-1].token.text != ""
    assert responses[-1].details.finish_reason.value == "length"
    assert text == tgi.generate("My name is Olivier and I", max_new_tokens=5).generated_text


def test_tgi_client_sees_validation_error(tgi):
    with pytest.raises(UnknownError, match="Parameter max_new_tokens"):
        tgi.generate("hi", max_new_tokens=-1)


def test_tgi_client_decoder_input_details_parses_prefill(tgi):
    r = tgi.generate("My name is Olivier", max_new_tokens=2, decoder_input_details=True)
    assert [t.text for t in r.details.prefill] == ["My", " name", " is", " Olivier"]
    assert all(t.logprob is None for t in r.details.prefill)
