"""Tool calls read from a model's text (hermes, llama3_json, mistral): whole answers and streams."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import GatewayError
from gateway.llm.tools import ToolStream, check, parse

CALL = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}
ANSWERS = {
    "hermes": "Let me look.\n<tool_call>\n" + json.dumps(CALL, ensure_ascii=False) + "\n</tool_call>",
    "llama3_json": "<|python_tag|>" + json.dumps({"name": CALL["name"], "parameters": CALL["arguments"]}),
    "mistral": "Let me look.[TOOL_CALLS] " + json.dumps([CALL]),
}


@pytest.mark.parametrize("parser", sorted(ANSWERS))
def test_whole_answer_gives_content_and_calls_with_ids(parser):
    content, calls = parse(parser, ANSWERS[parser])
    assert content == (None if parser == "llama3_json" else "Let me look.")
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(CALL["name"], CALL["arguments"])]
    assert calls[0].id.startswith("call_") and calls[0].openai(0)["index"] == 0
    assert calls[0].openai()["function"]["arguments"] == json.dumps(CALL["arguments"], ensure_ascii=False)


@pytest.mark.parametrize("parser", sorted(ANSWERS))
def test_plain_text_and_broken_calls_are_content(parser):
    assert parse(parser, "Just text.") == ("Just text.", [])
    broken = {"hermes": "<tool_call>{not json</tool_call>", "llama3_json": "{not json", "mistral": "[TOOL_CALLS] [{"}
    assert parse(parser, broken[parser]) == (broken[parser], [])


@pytest.mark.parametrize("parser", sorted(ANSWERS))
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_a_stream_in_any_pieces_reads_as_the_whole_answer(parser, cuts):
    text = ANSWERS[parser]
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    stream = ToolStream(parser)
    shown = "".join(stream.feed(text[a:b]) for a, b in zip(points, points[1:], strict=False))
    rest, calls = stream.end()
    content, whole = parse(parser, text)
    assert (shown + rest).strip() == (content or "")
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in whole]


@given(st.text(alphabet="ab<{[ _", max_size=30))
def test_text_that_is_no_call_streams_unchanged(text):
    for parser in ANSWERS:
        stream = ToolStream(parser)
        shown = stream.feed(text)
        rest, calls = stream.end()
        if not calls:
            assert shown + rest == text


def test_unknown_parser_is_refused():
    with pytest.raises(GatewayError, match="unknown tool_parser"):
        check("nope")
