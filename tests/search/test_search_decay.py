"""Decay as a ranking factor (`search.decay_ranking`): seed 002's importance
decay formula, and recall ranking by either model (`search.decay_model`:
seed 003's Ebbinghaus confidence, the default, or seed 002's importance):
pinned memories exempt, an access resetting the clock, and a memory recall
returned outranking an equally relevant one nobody recalled.

Ages are written to the SQLite file directly (a test cannot wait 100 days).
Access tracking's own flush is pushed out of the test's way (60 s) so that the
only access a test sees is the RecordAccess call it makes itself, except in
the scenario where recall's own access recording is the point.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import backend_db
from engram.store.internal.v1 import access_pb2
from engram.store.v1 import store_pb2
from recall_helpers import wait_for
from services.common import clock
from services.search.decay import decayed_importance

NOW = clock.from_text("2026-06-01T00:00:00.000000Z")
BASE = {
    "providers.embedding.kind": "none",
    "search.access_flush_ms": 60000,
    "search.min_score": 0.0,
}


def ago(days: float) -> str:
    return clock.to_text(NOW - timedelta(days=days))


def test_importance_decays_by_the_rate_per_day_since_creation() -> None:
    assert decayed_importance(0.8, False, None, ago(10), NOW, 0.95) == pytest.approx(0.8 * 0.95**10)
    assert decayed_importance(0.8, False, None, ago(0), NOW, 0.95) == pytest.approx(0.8)


def test_the_last_access_resets_the_clock() -> None:
    assert decayed_importance(0.8, False, ago(1), ago(100), NOW, 0.95) == pytest.approx(0.8 * 0.95)


def test_pinned_memories_never_decay() -> None:
    assert decayed_importance(0.3, True, None, ago(1000), NOW, 0.5) == 1.0


def test_a_timestamp_in_the_future_does_not_raise_importance() -> None:
    assert decayed_importance(0.8, False, None, ago(-5), NOW, 0.95) == pytest.approx(0.8)


def age_created(stack: Any, memory_id: str, days: float) -> None:
    age_both(stack, days, memory_id)


def order(stack: Any) -> list[str]:
    return [hit.memory.id for hit in stack.recall("zebra").results]


def two_zebras(stack: Any) -> tuple[str, str]:
    """`old` is the better keyword match but was created 100 days ago."""
    old = stack.remember("zebra zebra grazing").id
    fresh = stack.remember("a zebra grazing quietly in the long field").id
    age_created(stack, old, 100)
    return old, fresh


def test_without_decay_ranking_relevance_alone_decides(
    recall_stack: Callable[..., Any],
) -> None:
    stack = recall_stack(BASE)
    old, fresh = two_zebras(stack)
    assert order(stack) == [old, fresh]


MODELS = ["ebbinghaus", "importance"]


def on(model: str) -> dict[str, Any]:
    return {**BASE, "search.decay_ranking": True, "search.decay_model": model}


@pytest.mark.parametrize("model", MODELS)
def test_decay_ranking_puts_a_stale_memory_below_a_fresh_one_until_it_is_accessed(
    recall_stack: Callable[..., Any], model: str
) -> None:
    stack = recall_stack(on(model))
    old, fresh = two_zebras(stack)
    assert order(stack) == [fresh, old]
    stack.access.RecordAccess(access_pb2.RecordAccessRequest(memory_ids=[old]))
    assert order(stack) == [old, fresh]


@pytest.mark.parametrize("model", MODELS)
def test_decay_ranking_leaves_a_pinned_memory_undecayed(
    recall_stack: Callable[..., Any], model: str
) -> None:
    stack = recall_stack(on(model))
    old, fresh = two_zebras(stack)
    stack.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            patches=[store_pb2.MemoryPatch(id=old, pinned=True)], reason="keep"
        )
    )
    assert order(stack) == [old, fresh]


def age_both(stack: Any, days: float, *memory_ids: str) -> None:
    for memory_id in memory_ids:
        backend_db.execute(
            stack.config.storage.path,
            "UPDATE memories SET created_at = ? WHERE id = ?",
            clock.days_ago_text(days),
            memory_id,
        )


def recalled_and_stale(stack: Any) -> tuple[str, str]:
    """Two equally relevant memories for "zebra", written 30 days ago; `recalled`
    (written second, so it loses a tie) was then returned by a Recall, whose
    access recording reached the store; `stale` never was."""
    stale = stack.remember("the zebra ate the apples").id
    recalled = stack.remember("the zebra ate the pears").id
    age_both(stack, 30, stale, recalled)
    assert [hit.memory.id for hit in stack.recall("pears").results] == [recalled]

    def accessed() -> bool:
        memory = stack.store.GetMemory(store_pb2.GetMemoryRequest(id=recalled)).memory
        return memory.access_count == 1

    wait_for(accessed, what="recall's access of the pears memory")
    return recalled, stale


def test_with_ebbinghaus_ranking_a_recalled_memory_outranks_an_equally_relevant_stale_one(
    recall_stack: Callable[..., Any],
) -> None:
    stack = recall_stack({**on("ebbinghaus"), "search.access_flush_ms": 20})
    recalled, stale = recalled_and_stale(stack)
    assert order(stack) == [recalled, stale]


def test_without_decay_ranking_the_same_two_tie_and_keep_written_order(
    recall_stack: Callable[..., Any],
) -> None:
    stack = recall_stack({**BASE, "search.access_flush_ms": 20})
    recalled, stale = recalled_and_stale(stack)
    results = stack.recall("zebra").results
    assert [hit.memory.id for hit in results] == [stale, recalled]
    assert results[0].score == pytest.approx(results[1].score)
