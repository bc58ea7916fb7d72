"""DedupService.ResolveNearDuplicate through the store's internal listener: a merge
folds one memory into another in one transaction, visible in GetMemory and history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.store.internal.v1 import dedup_pb2, dedup_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
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
