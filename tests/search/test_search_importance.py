"""Importance as a ranking factor (seed 004 §4, issue 18), through Recall on real
servers: two memories equally relevant to the query (same words, same vector,
episodes of their own) rank by importance when `search.importance_weight` is on,
and by age alone when it is off."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from http_fakes import VectorBook
from recall_helpers import QUERY_VECTOR, Stack, ids

LOW, HIGH = "atlas runs the nightly build server", "the nightly build server runs atlas"


def _pair(stack: Stack, high_importance: float = 0.95) -> tuple[str, str]:
    low = stack.remember(LOW, importance=0.3).id  # older: first on a tie
    high = stack.remember(HIGH, importance=high_importance).id
    stack.embed_pending(lambda _text: QUERY_VECTOR)
    return low, high


def test_off_by_default_equally_relevant_memories_keep_their_order(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, _ = vector_stack()
    low, high = _pair(stack)
    results = stack.recall("zebra nightly build server").results
    assert ids(stack.recall("zebra nightly build server"))[:2] == [low, high]
    assert results[0].score == pytest.approx(results[1].score)


@pytest.mark.parametrize("weight", [0.2, 1.0])
def test_with_the_factor_on_the_more_important_memory_ranks_first(
    vector_stack: Callable[..., tuple[Stack, VectorBook]], weight: float
) -> None:
    stack, _ = vector_stack({"search.importance_weight": weight})
    low, high = _pair(stack)
    response = stack.recall("zebra nightly build server")
    assert ids(response)[:2] == [high, low]
    assert response.results[0].score > response.results[1].score


def test_the_default_importance_is_neutral(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """Memories nobody rated (importance 0.8) score as they would with the factor
    off: the same file, restarted with the factor on, answers the same scores."""
    stack, _ = vector_stack()
    stack.remember(LOW)
    stack.remember(HIGH)
    stack.embed_pending(lambda _text: QUERY_VECTOR)
    before = [(r.memory.id, r.score) for r in stack.recall("zebra nightly build server").results]
    stack.search_thread.stop()
    stack.store_thread.stop()
    restarted, _ = vector_stack({"search.importance_weight": 0.5})
    after = [(r.memory.id, r.score) for r in restarted.recall("zebra nightly build server").results]
    assert [i for i, _ in after] == [i for i, _ in before]
    assert [s for _, s in after] == pytest.approx([s for _, s in before])
