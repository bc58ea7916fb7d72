"""Access tracking: recall records which memories it returned, asynchronously,
through the store; counters move, nothing else about the memory does."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import backend_db
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from recall_helpers import Stack, ids, wait_for
from store_helpers import rows


def fts_fingerprint(stack: Stack) -> str:
    """A digest of the full-text index's own storage: any rewrite of an entry
    changes it (FTS5's blocks; on Postgres, where the index is a generated
    column of the row, the indexed tsvectors)."""
    path = stack.config.storage.path
    data = rows(path, backend_db.FTS_STORAGE[backend_db.dialect(path).name])
    return hashlib.sha256(repr([tuple(r) for r in data]).encode()).hexdigest()


def get(stack: Stack, memory_id: str, namespace: str = "default") -> store_pb2.GetMemoryResponse:
    return stack.store.GetMemory(store_pb2.GetMemoryRequest(namespace=namespace, id=memory_id))


def test_recall_counts_access_without_touching_content_version_history_or_fts(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({"providers.embedding.kind": "none", "search.access_flush_ms": 50})
    hit = stack.remember("Alice prefers oolong tea", namespace="team")
    miss = stack.remember("The printer is on floor two", namespace="team")
    before = get(stack, hit.id, "team").memory
    assert (before.access_count, before.HasField("last_access_time")) == (0, False)
    fingerprint = fts_fingerprint(stack)

    assert ids(stack.recall("oolong tea", namespace="team")) == [hit.id]
    after = wait_for(
        lambda: (m := get(stack, hit.id, "team").memory).access_count == 1 and m,
        what="access recorded",
    )
    assert after.HasField("last_access_time")
    assert after.last_access_time.ToDatetime() >= before.create_time.ToDatetime()
    assert (after.version, after.content, after.content_hash) == (
        before.version,
        before.content,
        before.content_hash,
    )
    assert after.update_time == before.update_time
    assert get(stack, miss.id, "team").memory.access_count == 0, "only returned memories count"

    history = stack.store.ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(namespace="team", memory_id=hit.id)
    ).events
    assert [e.event_type for e in history] == [store_pb2.HISTORY_EVENT_TYPE_CREATED]
    assert fts_fingerprint(stack) == fingerprint, "the FTS index was not rewritten"

    for _ in range(2):
        stack.recall("oolong", namespace="team")
    wait_for(
        lambda: get(stack, hit.id, "team").memory.access_count == 3,
        what="every recall counted",
    )
    assert ids(stack.recall("oolong", namespace="team")) == [hit.id], "still findable"


def test_access_is_recorded_in_the_namespace_of_the_recall(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({"providers.embedding.kind": "none", "search.access_flush_ms": 50})
    a = stack.remember("shared words about lunch", namespace="tenant-a")
    b = stack.remember("shared words about lunch", namespace="tenant-b")
    assert ids(stack.recall("lunch", namespace="tenant-a")) == [a.id]
    wait_for(lambda: get(stack, a.id, "tenant-a").memory.access_count == 1, what="access")
    assert get(stack, b.id, "tenant-b").memory.access_count == 0


def test_a_lookup_that_skips_access_tracking_leaves_the_counters_alone(
    recall_stack: Callable[..., Stack],
) -> None:
    """The pipeline's decision candidates are lookups, not reads: they must not
    count as accesses (nor reset decay)."""
    stack = recall_stack({"providers.embedding.kind": "none", "search.access_flush_ms": 50})
    looked_up = stack.remember("Alice prefers oolong tea", namespace="team")
    read = stack.remember("Bob prefers jasmine tea", namespace="team")
    response = stack.search.Recall(
        search_pb2.RecallRequest(
            namespace="team", query="oolong", limit=5, skip_access_tracking=True
        )
    )
    assert [r.memory.id for r in response.results] == [looked_up.id]
    assert ids(stack.recall("jasmine", namespace="team")) == [read.id]
    wait_for(lambda: get(stack, read.id, "team").memory.access_count == 1, what="access")
    # the tracked recall's flush has happened; the lookup's would have gone in it or before
    assert get(stack, looked_up.id, "team").memory.access_count == 0
