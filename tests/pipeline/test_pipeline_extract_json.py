"""The one LLM-answer parser (extraction and decision): what small local models
really send, and what it is read as."""

from __future__ import annotations

import json

import pytest

from services.pipeline.llm_json import LlmOutputInvalid, parse_object, remove_trailing_commas

OBJECT = {"facts": [{"content": "Alice likes green tea", "type": "fact"}], "entities": []}
TEXT = json.dumps(OBJECT)

RECOVERED = [
    # (case, answer, warnings expected)
    ("plain", TEXT, []),
    ("think block", f"<think>The user wants {{facts}}.\n</think>\n{TEXT}", []),
    ("two think blocks", f"<think>a</think><THINK>b {{</THINK> {TEXT}", []),
    ("lone closing think", f"reasoning without an opening tag {{x}}</think>{TEXT}", []),
    ("json fence", f"```json\n{TEXT}\n```", []),
    ("bare fence", f"```\n{TEXT}\n```", []),
    ("think then fence", f"<think>hmm</think>\n```json\n{TEXT}\n```", []),
    ("prose", f"Sure! Here is the JSON you asked for:\n{TEXT}\nLet me know.", ["prose"]),
    ("prose with braces", f"Note {{this}}: {TEXT} (done)", ["prose"]),
    ("trailing commas", TEXT[:-2] + ",]" + ",}", ["trailing commas"]),
    ("double-encoded", json.dumps(TEXT), ["double-encoded"]),
    ("double-encoded in a fence", "```json\n" + json.dumps(TEXT) + "\n```", ["double-encoded"]),
    ("triple-encoded", json.dumps(json.dumps(TEXT)), ["double-encoded"]),
    (
        "prose, trailing commas",
        'Answer: {"facts": [{"content": "Alice likes green tea", "type": "fact",},], "entities": [],} ok',
        ["prose", "trailing commas"],
    ),
]


@pytest.mark.parametrize(
    ("answer", "expected"), [(a, w) for _, a, w in RECOVERED], ids=[c for c, _, _ in RECOVERED]
)
def test_answers_are_recovered_with_a_warning_per_repair(answer: str, expected: list[str]) -> None:
    value, warnings = parse_object(answer)
    assert value == OBJECT
    assert len(warnings) >= len(expected)
    for word in expected:
        assert any(word in w for w in warnings), (word, warnings)
    if not expected:
        assert warnings == []


REJECTED = [
    ("empty", ""),
    ("whitespace", "  \n "),
    ("only thinking", '<think>I should answer {"facts": []}</think>'),
    ("unterminated think", '<think>still thinking about {"facts": []}'),
    ("garbage", "I cannot help with that."),
    ("binary-ish", "\x00\x01\x02"),
    ("a list", "[1, 2, 3]"),
    ("a number", "42"),
    ("a string of prose", json.dumps("not json inside")),
    ("unbalanced", '{"facts": [{"content": "x"'),
]


@pytest.mark.parametrize("answer", [a for _, a in REJECTED], ids=[c for c, _ in REJECTED])
def test_unusable_answers_raise_llm_output_invalid(answer: str) -> None:
    with pytest.raises(LlmOutputInvalid) as caught:
        parse_object(answer)
    assert caught.value.reason == "LLM_OUTPUT_INVALID"


def test_trailing_comma_removal_leaves_string_contents_alone() -> None:
    text = '{"a": "x, ]", "b": [1, 2,], "c": "\\" ,}",}'
    assert json.loads(remove_trailing_commas(text)) == {"a": "x, ]", "b": [1, 2], "c": '" ,}'}
