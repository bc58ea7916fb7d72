"""Questions about a session's memories through the public gRPC API (issue 34):
a session of three memories or more gives the temporal route's link hop two
linked memories or more to order, and every "when ...?" question went INTERNAL
on Recall and AssembleContext."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engram.search.v1 import search_pb2
from recall_helpers import Stack

KEYWORDS_ONLY = {"providers.embedding.kind": "none", "search.min_score": 0.0}


@pytest.fixture(scope="module")
def stack(module_recall_stack: Callable[..., Stack]) -> Stack:
    return module_recall_stack(KEYWORDS_ONLY)


def recall(stack: Stack, query: str, namespace: str, **fields: Any) -> search_pb2.RecallResponse:
    return stack.search.Recall(
        search_pb2.RecallRequest(namespace=namespace, query=query, limit=10, **fields),
        timeout=30,
    )


def assemble(stack: Stack, query: str, namespace: str) -> search_pb2.AssembleContextResponse:
    return stack.search.AssembleContext(
        search_pb2.AssembleContextRequest(namespaces=[namespace], query=query), timeout=30
    )


def test_when_question_over_a_three_memory_session(stack: Stack) -> None:
    """Three Remembers in one session, then "when did we book the hotel?": the
    middle memory matches and is linked to both of its neighbours, which the
    route lifts; both RPCs answer."""
    namespace = "three-remembers"
    before, booked, after = (
        stack.remember(content, namespace=namespace, session_id="trip").id
        for content in (
            "We landed in Porto in the evening",
            "We booked the hotel by the river",
            "That was the Tuesday after the conference",
        )
    )
    routed = recall(stack, "When did we book the hotel?", namespace)
    assert routed.intent == search_pb2.QUERY_INTENT_TEMPORAL
    boosts = {r.memory.id: r.intent_boost for r in routed.results}
    assert boosts[booked] == 0.0
    assert boosts[before] == pytest.approx(0.15) and boosts[after] == pytest.approx(0.15)
    context = assemble(stack, "When did we book the hotel?", namespace)
    assert booked in {m.id for s in context.sections for m in s.memories}
