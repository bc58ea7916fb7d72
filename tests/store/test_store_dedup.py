"""DedupService.ResolveNearDuplicate through the store's internal listener: a merge
folds one memory into another in one transaction, visible in GetMemory and history."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.store.internal.v1 import dedup_pb2, dedup_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import timestamp
from store_helpers import remember, table_counts

MERGE = dedup_pb2.NEAR_DUPLICATE_ACTION_MERGE
KEEP = dedup_pb2.NEAR_DUPLICATE_ACTION_KEEP_BOTH


@pytest.fixture
def stores(make_config: Callable[..., Any], start_store_server: Callable[..., Any]) -> Any:
    server, store = start_store_server(make_config())
    channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
    yield store, dedup_pb2_grpc.DedupServiceStub(channel)
    channel.close()


def history(store: Any, memory_id: str) -> list[Any]:
    return list(
        store.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest(memory_id=memory_id)).events
    )


def test_merge_tombstones_the_duplicate_and_unites_tags_and_importance(stores: Any) -> None:
    store, dedup = stores
    older = remember(store, "User prefers dark mode", tags=["ui"], importance=0.4).memory
    newer = remember(store, "The user prefers dark mode", tags=["prefs", "ui"], importance=0.9)
    reply = dedup.ResolveNearDuplicate(
        dedup_pb2.ResolveNearDuplicateRequest(
            survivor_id=older.id,
            duplicate_id=newer.memory.id,
            action=MERGE,
            similarity=0.991,
            reason="cosine 0.991 >= 0.98",
            decided_by="similarity",
        )
    )
    assert reply.applied
    survivor = store.GetMemory(store_pb2.GetMemoryRequest(id=older.id)).memory
    assert survivor == reply.survivor
    assert list(survivor.tags) == ["ui", "prefs"] and survivor.importance == pytest.approx(0.9)
    assert survivor.version == 2 and survivor.content == "User prefers dark mode"
    merged = store.GetMemory(store_pb2.GetMemoryRequest(id=newer.memory.id)).memory
    assert merged.deleted
    [_, event] = history(store, newer.memory.id)
    assert event.event_type == store_pb2.HISTORY_EVENT_TYPE_MERGED
    assert event.metadata["survivor_id"] == older.id
    assert event.metadata["similarity"] == pytest.approx(0.991)
    assert event.actor == "pipeline-dedup" and event.reason == "cosine 0.991 >= 0.98"
    modified = history(store, older.id)[-1]
    assert modified.event_type == store_pb2.HISTORY_EVENT_TYPE_MODIFIED
    assert modified.metadata["merged_from"] == newer.memory.id
    # the merged memory is out of listings, and RecoverMemory brings it back
    listed = store.ListMemories(store_pb2.ListMemoriesRequest()).memories
    assert [m.id for m in listed] == [older.id]
    store.RecoverMemory(store_pb2.RecoverMemoryRequest(id=newer.memory.id, reason="undo"))
    assert not store.GetMemory(store_pb2.GetMemoryRequest(id=newer.memory.id)).memory.deleted


def test_a_pinned_duplicate_pins_the_survivor(stores: Any) -> None:
    store, dedup = stores
    older = remember(store, "deploys happen on Tuesdays").memory
    newer = remember(store, "critical: deploys happen on tuesday").memory
    reply = dedup.ResolveNearDuplicate(
        dedup_pb2.ResolveNearDuplicateRequest(
            survivor_id=older.id, duplicate_id=newer.id, action=MERGE, similarity=0.99
        )
    )
    assert reply.survivor.pinned and reply.survivor.importance == 1.0


def test_keep_both_only_records_the_decision(stores: Any, db_path: Path) -> None:
    store, dedup = stores
    a = remember(store, "Postgres uses pgvector").memory
    b = remember(store, "Postgres is a database").memory
    reply = dedup.ResolveNearDuplicate(
        dedup_pb2.ResolveNearDuplicateRequest(
            survivor_id=a.id,
            duplicate_id=b.id,
            action=KEEP,
            similarity=0.75,
            reason="different facts",
            decided_by="llm",
        )
    )
    assert reply.applied and reply.survivor.version == 1
    assert not store.GetMemory(store_pb2.GetMemoryRequest(id=b.id)).memory.deleted
    audit = history(store, b.id)[-1]
    assert audit.event_type == store_pb2.HISTORY_EVENT_TYPE_NONE
    assert audit.metadata["near_duplicate_of"] == a.id
    assert audit.metadata["decision"] == "keep_both"


def test_a_memory_gone_meanwhile_makes_it_a_no_op(stores: Any, db_path: Path) -> None:
    store, dedup = stores
    a = remember(store, "first").memory
    b = remember(store, "second").memory
    store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=a.id, reason="gone"))
    before = table_counts(db_path)
    for request in (
        dedup_pb2.ResolveNearDuplicateRequest(
            survivor_id=a.id, duplicate_id=b.id, action=MERGE, similarity=0.99
        ),
        dedup_pb2.ResolveNearDuplicateRequest(
            namespace="other", survivor_id=b.id, duplicate_id=a.id, action=MERGE, similarity=0.99
        ),
    ):
        assert not dedup.ResolveNearDuplicate(request).applied
    assert table_counts(db_path) == before
    assert not store.GetMemory(store_pb2.GetMemoryRequest(id=b.id)).memory.deleted


def test_bad_requests_name_every_field(stores: Any, db_path: Path) -> None:
    _, dedup = stores
    before = table_counts(db_path)
    code, reason, fields = error_of(
        lambda: dedup.ResolveNearDuplicate(
            dedup_pb2.ResolveNearDuplicateRequest(
                survivor_id="x", duplicate_id="x", similarity=1.5, reason="r" * 2000
            )
        )
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert sorted(fields) == ["action", "duplicate_id", "reason", "similarity"]
    assert table_counts(db_path) == before


SUPERSEDE = dedup_pb2.NEAR_DUPLICATE_ACTION_SUPERSEDE


def _at(day: int) -> Any:
    return timestamp(datetime(2026, 3, day, tzinfo=UTC))


def test_supersede_keeps_both_and_the_later_valid_one_is_current(stores: Any) -> None:
    """The store orders the two by valid time: the one said later supersedes,
    whichever was written first."""
    store, dedup = stores
    later = remember(store, "Maria's flight to Oslo is on 13 March", event_time=_at(5)).memory
    earlier = remember(store, "Maria's flight to Oslo is on 12 March", event_time=_at(2)).memory
    reply = dedup.ResolveNearDuplicate(
        dedup_pb2.ResolveNearDuplicateRequest(
            survivor_id=later.id,
            duplicate_id=earlier.id,
            action=SUPERSEDE,
            similarity=0.986,
            reason="the same fact with another value",
            decided_by="values",
        )
    )
    assert reply.applied and reply.survivor.id == later.id
    old = store.GetMemory(store_pb2.GetMemoryRequest(id=earlier.id))
    assert not old.memory.deleted and old.superseded_by_id == later.id
    assert old.memory.valid_until == later.valid_from
    assert not store.GetMemory(store_pb2.GetMemoryRequest(id=later.id)).memory.HasField(
        "valid_until"
    )
    listed = store.ListMemories(store_pb2.ListMemoriesRequest()).memories
    assert [m.id for m in listed] == [later.id]
    assert history(store, earlier.id)[-1].metadata["superseded_by"] == later.id
    assert history(store, later.id)[-1].metadata["supersedes"] == earlier.id


def test_a_merge_of_texts_with_other_values_keeps_both(stores: Any) -> None:
    """The store re-checks the value rule: folding 13 March into 12 March would
    lose the newer date."""
    store, dedup = stores
    older = remember(store, "Maria's flight to Oslo is on 12 March").memory
    newer = remember(store, "Maria's flight to Oslo is on 13 March").memory
    reply = dedup.ResolveNearDuplicate(
        dedup_pb2.ResolveNearDuplicateRequest(
            survivor_id=older.id, duplicate_id=newer.id, action=MERGE, similarity=0.986
        )
    )
    assert reply.applied and reply.survivor.version == 1
    assert not store.GetMemory(store_pb2.GetMemoryRequest(id=newer.id)).memory.deleted
    audit = history(store, newer.id)[-1]
    assert (audit.metadata["proposed"], audit.metadata["not_applied"]) == ("merge", "values_differ")


@pytest.mark.parametrize("action", [MERGE, SUPERSEDE], ids=["merge", "supersede"])
def test_an_llm_decision_is_only_recorded_outside_full_mode(
    make_config: Callable[..., Any], start_store_server: Callable[..., Any], action: int
) -> None:
    """The store's own mode gates what the LLM decided (issue 34): controlled
    mode (pipeline on, allowUpdateDelete off) records it and changes nothing."""
    server, store = start_store_server(make_config(**{"memory.pipelineV2.enabled": True}))
    with grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}") as channel:
        dedup = dedup_pb2_grpc.DedupServiceStub(channel)
        older = remember(store, "The standup is at 9:30 on Mondays").memory
        newer = remember(store, "the standup is at 9:30, on Mondays").memory
        reply = dedup.ResolveNearDuplicate(
            dedup_pb2.ResolveNearDuplicateRequest(
                survivor_id=older.id,
                duplicate_id=newer.id,
                action=action,
                similarity=0.99,
                reason="the memory said so",
                decided_by="llm",
            )
        )
    assert reply.applied
    for memory in (older, newer):
        now = store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id))
        assert now.memory.version == 1 and not now.memory.HasField("valid_until")
    audit = history(store, newer.id)[-1]
    assert audit.metadata["not_applied"] == "destructive_mutations_disabled"
    assert audit.reason.startswith("controlled mode, would ")


def test_get_memory_follows_merges_to_the_live_memory(stores: Any) -> None:
    store, dedup = stores
    first = remember(store, "User prefers dark mode").memory
    second = remember(store, "The user prefers dark mode").memory
    third = remember(store, "The user prefers the dark mode").memory
    for survivor, duplicate in ((second, third), (first, second)):
        dedup.ResolveNearDuplicate(
            dedup_pb2.ResolveNearDuplicateRequest(
                survivor_id=survivor.id, duplicate_id=duplicate.id, action=MERGE, similarity=0.99
            )
        )
    reply = store.GetMemory(store_pb2.GetMemoryRequest(id=third.id))
    assert reply.memory.deleted and reply.merged_into_id == first.id
    assert store.GetMemory(store_pb2.GetMemoryRequest(id=first.id)).merged_into_id == ""
    # recovered, it is merged into nothing any more
    store.RecoverMemory(store_pb2.RecoverMemoryRequest(id=third.id, reason="undo"))
    assert store.GetMemory(store_pb2.GetMemoryRequest(id=third.id)).merged_into_id == ""
    # another namespace sees none of it
    code, _, _ = error_of(
        lambda: store.GetMemory(store_pb2.GetMemoryRequest(namespace="other", id=third.id))
    )
    assert code == grpc.StatusCode.NOT_FOUND
