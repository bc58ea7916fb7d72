"""Recall scores mean the same on every query: in [0, 1], a keyword score is the
share of the query matched, and `min_score` (configured, or per request) leaves
out what is below it, so an empty answer says "nothing relevant"."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from engram.search.v1 import search_pb2
from grpc_helpers import error_of
from http_fakes import VectorBook
from recall_helpers import QUERY_VECTOR, Stack, ids, timestamp, vec

KEYWORDS_ONLY = {"providers.embedding.kind": "none", "search.min_score": 0.0}
NOTES = [
    "postgres stores the orders table",
    "redis caches the login sessions",
    "kafka streams the payment events",
    "nginx serves the static pages",
    "grafana draws the latency dashboards",
]
PARTIAL = "postgres quantum entanglement chromodynamics superconductivity"


def notes_stack(recall_stack: Callable[..., Stack], **overrides: Any) -> Stack:
    stack = recall_stack({**KEYWORDS_ONLY, **overrides})
    for note in NOTES:
        stack.remember(note)
    return stack


def ask(stack: Stack, query: str, **fields: Any) -> search_pb2.RecallResponse:
    request = search_pb2.RecallRequest(namespace="default", query=query, limit=10, **fields)
    return stack.search.Recall(request, timeout=30)


def test_a_keyword_score_reflects_how_much_of_the_query_matched(
    recall_stack: Callable[..., Stack],
) -> None:
    """Scaling by the best match alone gave every query's top hit 1.0, however
    little of the query it matched; a hit on one word of five (the others match
    nothing in the collection) now scores well below a hit on the whole query."""
    stack = notes_stack(recall_stack)
    whole = ask(stack, "postgres orders").results[0]
    partial = ask(stack, PARTIAL).results[0]
    assert whole.memory.content == partial.memory.content == NOTES[0]
    assert 0.9 < whole.keyword.score < 1.0
    assert 0.0 < partial.keyword.score < whole.keyword.score / 2
    assert 0.0 < partial.score < whole.score / 2 < 0.5


def test_min_score_from_the_configuration_leaves_out_an_unrelated_answer(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = notes_stack(recall_stack, **{"search.min_score": 0.3})
    assert ids(ask(stack, "postgres orders"))
    assert ask(stack, PARTIAL).results == []
    assert ask(stack, "quantum entanglement").results == []


def test_min_score_in_the_request_overrides_the_configuration(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = notes_stack(recall_stack, **{"search.min_score": 0.3})
    partial = ask(stack, PARTIAL, min_score=0.0).results
    assert [r.memory.content for r in partial] == [NOTES[0]]
    score = partial[0].score
    assert ask(stack, PARTIAL, min_score=score).results
    assert ask(stack, PARTIAL, min_score=score + 1e-6).results == []
    strict = ask(stack, "postgres orders", min_score=0.99)
    assert strict.results == [], "a request may be stricter than the configuration"


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf])
def test_min_score_outside_0_to_1_is_invalid(
    recall_stack: Callable[..., Stack], bad: float
) -> None:
    stack = notes_stack(recall_stack)
    code, _, fields = error_of(lambda: ask(stack, "postgres", min_score=bad))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["min_score"])


def test_min_score_is_named_with_every_other_bad_field(recall_stack: Callable[..., Stack]) -> None:
    stack = notes_stack(recall_stack)
    code, _, fields = error_of(
        lambda: stack.search.Recall(
            search_pb2.RecallRequest(query="", limit=500, min_score=2.0), timeout=30
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(fields) == ["limit", "min_score", "query"]


def test_every_score_stays_in_0_to_1_with_every_boost(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """A near-perfect match in both channels, in the episode the query's date
    names, beside neighbours of the same episode: the time, episode and
    neighbour boosts lift it toward 1, never past it (they used to add up to 1.5)."""
    stack, book = vector_stack()
    when = timestamp(datetime(2023, 5, 8, 13, 0, tzinfo=UTC))
    contents = ["zebra zebra zebra at dawn", "zebra zebra again", "zebra herd once more"]
    for content in contents:
        stack.remember(content, event_time=when)
    stack.remember("an opposite zebra", event_time=timestamp(datetime(2020, 1, 1, tzinfo=UTC)))
    plan = {contents[0]: 0.999, contents[1]: 0.99, contents[2]: 0.98, "an opposite zebra": -0.9}
    book.vectors["zebra on 8 May, 2023"] = QUERY_VECTOR
    stack.embed_pending(lambda text: vec(plan[text]))
    response = stack.recall("zebra on 8 May, 2023")
    assert len(response.results) == 4
    for result in response.results:
        assert 0.0 <= result.score <= 1.0, result
        assert 0.0 <= result.keyword.score <= 1.0, result
        assert 0.0 <= result.vector.score <= 1.0, result
    opposite = [r for r in response.results if r.memory.content == "an opposite zebra"]
    assert opposite[0].vector.score == 0.0, "an opposite meaning reads as unrelated"
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)


def test_a_memory_only_the_vector_channel_returned_keeps_its_alpha_weight(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """The blend's rule for a memory the keyword channel did not return: keyword 0,
    so `alpha * cosine` (0.63 here), not seed 002's cosine alone (0.9), which
    would put it above a memory both channels found (0.3 + 0.7 * 0.7 = 0.79).
    Seed 002's rule cost 0.030 of LoCoMo dev R@10 (bench/README.md)."""
    stack, _ = vector_stack()
    both = stack.remember("a zebra at the waterhole")
    meaning = stack.remember("a striped horse grazing")
    stack.embed_pending({"a zebra at the waterhole": vec(0.7), "a striped horse grazing": vec(0.9)})
    response = stack.recall("zebra")
    assert ids(response) == [both.id, meaning.id]
    first, second = response.results
    assert (first.keyword.rank, first.vector.rank) == (1, 2)
    assert (second.keyword.rank, second.vector.rank) == (0, 1)
