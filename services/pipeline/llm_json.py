"""The one parser for LLM answers (extraction and decision both use it).

Small local models wrap their JSON in all sorts of things. Seed 000 asks for
`<think>` blocks to be stripped and Markdown fences removed; beyond that we
recover JSON wrapped in prose, with trailing commas, or double-encoded (a JSON
string whose value is the JSON). Each recovery adds a warning, so a job's
result says how its answer had to be read. An answer that still is not a JSON
object raises LlmOutputInvalid: a failed attempt, never a silent success.
"""

from __future__ import annotations

import json
import re
from typing import Any

from services.common.errors import FailedPrecondition

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_MAX_DECODE_DEPTH = 3


class LlmOutputInvalid(FailedPrecondition):
    """The model answered, but not with a JSON object we can use."""

    reason = "LLM_OUTPUT_INVALID"


def strip_think(text: str) -> str:
    """Remove `<think>` blocks; an unterminated one runs to the end of the text,
    and a lone `</think>` (the template ate the opening tag) ends the thinking."""
    text = _THINK_BLOCK.sub("", text)
    close = _THINK_CLOSE.search(text)
    if close is not None:
        text = text[close.end() :]
    opening = _THINK_OPEN.search(text)
    if opening is not None:
        text = text[: opening.start()]
    return text.strip()


def strip_fences(text: str) -> str:
    """The inside of the first Markdown code fence, or the text unchanged."""
    match = _FENCE.search(text)
    return match.group(1).strip() if match else text


def parse_object(answer: str) -> tuple[dict[str, Any], list[str]]:
    """The JSON object in an LLM answer, and warnings about how it was recovered."""
    warnings: list[str] = []
    text = strip_fences(strip_think(answer))
    if not text:
        raise LlmOutputInvalid("the model's answer is empty (after removing <think> blocks)")
    value, how = _loads_lenient(text)
    if value is None:
        for candidate in _balanced_objects(text):
            value, how = _loads_lenient(candidate)
            if value is not None:
                warnings.append("recovered JSON from surrounding prose")
                break
    if value is None:
        raise LlmOutputInvalid(f"the model's answer is not JSON: {answer[:200]!r}")
    warnings.extend(how)
    if not isinstance(value, dict):
        raise LlmOutputInvalid(
            f"the model's answer is JSON but not an object: {type(value).__name__}"
        )
    return value, warnings


def _loads_lenient(text: str) -> tuple[Any, list[str]]:
    """json.loads, then again without trailing commas; unwraps double encoding."""
    notes: list[str] = []
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = json.loads(remove_trailing_commas(text))
        except ValueError:
            return None, []
        notes.append("removed trailing commas from the JSON")
    depth = 0
    while isinstance(value, str) and depth < _MAX_DECODE_DEPTH:
        inner, inner_notes = _loads_lenient(strip_fences(value.strip()))
        if inner is None:
            return None, []
        notes.append("decoded double-encoded JSON")
        notes.extend(inner_notes)
        value = inner
        depth += 1
    return value, notes


def remove_trailing_commas(text: str) -> str:
    """Drop commas that directly precede `}` or `]`, leaving string contents alone."""
    out: list[str] = []
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            out.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char == "," and text[index + 1 :].lstrip()[:1] in ("}", "]"):
            continue
        out.append(char)
    return "".join(out)


def _balanced_objects(text: str) -> list[str]:
    """Every top-level `{...}` span (brackets inside strings ignored), longest first."""
    spans: list[str] = []
    depth = 0
    start = -1
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"' and depth > 0:
            in_string = True
        elif char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : index + 1])
    return sorted(spans, key=len, reverse=True)
