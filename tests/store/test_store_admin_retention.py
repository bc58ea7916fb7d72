"""SweepRetention: the seed's order (graph links → embeddings → tombstones →
history → completed jobs → dead jobs), zero-mention entities removed, shared
vectors kept, batch limits, windows, and RETENTION_EXPIRED after a sweep.

Graph rows and old timestamps are written to the file directly (hand-built
states); everything else goes through the store's gRPC API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from admin_helpers import AdminStore, admin_store
from engram.store.internal.v1 import admin_pb2 as pb
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from services.common.clock import now_text

ORDER = [
    "expired_memories",
    "graph_links",
    "embeddings",
    "tombstones",
    "history",
    "completed_jobs",
    "dead_jobs",
]


@pytest.fixture
def start(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> Callable[..., AdminStore]:
    return lambda **overrides: admin_store(start_store_server, make_config, **overrides)


def sweep(st: AdminStore) -> dict[str, pb.RetentionStepResult]:
    steps = list(st.admin.SweepRetention(pb.SweepRetentionRequest()).steps)
    assert [s.step for s in steps] == ORDER
    return {s.step: s for s in steps}


def entity(st: AdminStore, entity_id: str, mentions: int) -> None:
    at = now_text()
    st.execute(
        "INSERT INTO entities(id, namespace, name, canonical_name, mentions, created_at, "
        "updated_at) VALUES (?, 'default', ?, ?, ?, ?, ?)",
        entity_id,
        entity_id,
        entity_id,
        mentions,
        at,
        at,
    )


def mention(st: AdminStore, memory_id: str, entity_id: str) -> None:
    st.execute(
        "INSERT INTO memory_entity_mentions(memory_id, entity_id, namespace, mention_text, "
        "confidence, created_at) VALUES (?, ?, 'default', ?, 0.9, ?)",
        memory_id,
        entity_id,
        entity_id,
        now_text(),
    )


def expire(st: AdminStore, memory_id: str) -> None:
    st.delete(memory_id)
    st.age("memories", "deleted_at", 31, "id = ?", memory_id)


def test_sweep_purges_an_expired_tombstone_with_its_graph_links_and_vector(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    old = st.remember("alice met bob in paris")
    keep = st.remember("bob lives in paris")
    recent = st.remember("carol deleted yesterday")
    st.embed_all()
    entity(st, "alice", 1)  # mentioned only by `old`: reaches zero
    entity(st, "bob", 2)  # also mentioned by `keep`: survives with one mention
    mention(st, old, "alice")
    mention(st, old, "bob")
    mention(st, keep, "bob")
    st.execute(
        "INSERT INTO relations(id, namespace, source_entity_id, target_entity_id, relation_type, "
        "confidence, created_at, updated_at) VALUES ('r1', 'default', 'alice', 'bob', 'met', 0.9, ?, ?)",
        now_text(),
        now_text(),
    )
    st.execute(
        "INSERT INTO memory_links(id, namespace, from_memory_id, to_memory_id, link_type, "
        "created_at) VALUES ('l1', 'default', ?, ?, 'derived_from', ?)",
        keep,
        old,
        now_text(),
    )
    old_hash = st.scalar("SELECT content_hash FROM memories WHERE id = ?", old)
    expire(st, old)
    st.delete(recent)  # tombstoned, but inside the window: untouched

    steps = sweep(st)
    assert (steps["graph_links"].removed, steps["graph_links"].entities_removed) == (2, 1)
    assert steps["graph_links"].relations_removed == 1
    assert steps["embeddings"].removed == 1
    assert steps["tombstones"].removed == 1
    assert st.rows("SELECT id, mentions FROM entities") == [("bob", 1)]
    assert st.rows("SELECT memory_id FROM memory_entity_mentions") == [(keep,)]
    assert st.scalar("SELECT count(*) FROM relations") == 0
    assert st.scalar("SELECT count(*) FROM embeddings WHERE content_hash = ?", old_hash) == 0
    assert st.scalar("SELECT count(*) FROM embeddings") == 2
    assert {r[0] for r in st.rows("SELECT id FROM memories")} == {keep, recent}
    assert st.scalar("SELECT count(*) FROM memory_links") == 0
    assert st.scalar("SELECT count(*) FROM memory_jobs WHERE memory_id = ?", old) == 0
    assert st.rows(
        "SELECT event, changed_by FROM memory_history WHERE memory_id = ? ORDER BY seq DESC LIMIT 1",
        old,
    ) == [("purged", "retention")]
    actions = st.audit_actions()
    assert actions == [
        f"retention:{name}"
        for name in [
            "expired_memories",
            "graph_links",
            "embeddings",
            "tombstones",
            "history",
            "completed_jobs",
            "dead_jobs",
        ]
    ]
    again = sweep(st)
    assert all(s.removed == 0 for s in again.values())


def test_a_vector_still_used_by_a_live_memory_of_its_namespace_is_kept(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    gone = st.remember("shared sentence about tea")
    st.embed_all()
    expire(st, gone)
    st.remember("shared sentence about tea")  # same hash and namespace: reuses the vector
    assert st.embed_all() == 0
    steps = sweep(st)
    assert (steps["embeddings"].removed, steps["tombstones"].removed) == (0, 1)
    assert st.scalar("SELECT count(*) FROM embeddings") == 1
    assert st.scalar("SELECT count(*) FROM memory_vectors") == 1


def test_another_namespaces_memory_with_the_same_content_keeps_only_its_own_vector(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    gone = st.remember("shared sentence about tea")
    st.embed_all()
    st.remember("shared sentence about tea", namespace="other")
    assert st.embed_all() == 1  # its own vector, never the default namespace's
    expire(st, gone)
    steps = sweep(st)
    assert (steps["embeddings"].removed, steps["tombstones"].removed) == (1, 1)
    assert st.rows("SELECT namespace FROM embeddings") == [("other",)]
    assert st.scalar("SELECT count(*) FROM memory_vectors") == 1


def test_a_tombstone_waits_until_its_graph_links_are_gone(
    start: Callable[..., AdminStore],
) -> None:
    st = start(**{"retention.batch_limit": 1})
    old = st.remember("dora and erin went hiking")
    entity(st, "dora", 1)
    entity(st, "erin", 1)
    mention(st, old, "dora")
    mention(st, old, "erin")
    expire(st, old)
    first = sweep(st)
    assert (first["graph_links"].removed, first["tombstones"].removed) == (1, 0)
    assert st.scalar("SELECT count(*) FROM memories WHERE id = ?", old) == 1
    second = sweep(st)
    assert (second["graph_links"].removed, second["tombstones"].removed) == (1, 1)
    assert st.scalar("SELECT count(*) FROM entities") == 0


def test_each_step_is_capped_by_the_batch_limit(start: Callable[..., AdminStore]) -> None:
    st = start(**{"retention.batch_limit": 2})
    ids = [st.remember(f"memory number {n} to forget") for n in range(3)]
    for memory_id in ids:
        expire(st, memory_id)
    assert sweep(st)["tombstones"].removed == 2
    assert sweep(st)["tombstones"].removed == 1
    assert st.scalar("SELECT count(*) FROM memories") == 0


def test_history_and_jobs_are_purged_by_their_own_windows(
    start: Callable[..., AdminStore],
) -> None:
    st = start(**{"memory.pipelineV2.workerMaxRetries": 1})
    a = st.remember("old history row here")
    b = st.remember("fresh history row here")
    st.embed_all()  # two completed embed jobs
    st.age("memory_history", "created_at", 181, "memory_id = ?", a)
    st.execute(
        "UPDATE memory_jobs SET status = 'dead', failed_at = ? WHERE job_type = 'extract'",
        now_text(),
    )
    st.age("memory_jobs", "completed_at", 15, "memory_id = ? AND job_type = 'embed'", a)
    st.age("memory_jobs", "failed_at", 31, "memory_id = ? AND job_type = 'extract'", b)
    steps = sweep(st)
    assert [steps[s].removed for s in ORDER] == [0, 0, 0, 0, 1, 1, 1]
    assert st.rows("SELECT memory_id FROM memory_history") == [(b,)]
    remaining = set(st.rows("SELECT memory_id, job_type, status FROM memory_jobs"))
    assert remaining == {(b, "embed", "completed"), (a, "extract", "dead")}


def test_recovery_after_a_sweep_fails_with_retention_expired(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    gone = st.remember("a memory swept away")
    expire(st, gone)
    recover = store_pb2.RecoverMemoryRequest(id=gone, reason="undo")
    assert error_of(lambda: st.store.RecoverMemory(recover))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RETENTION_EXPIRED",
    )
    sweep(st)
    assert st.scalar("SELECT count(*) FROM memories") == 0
    assert error_of(lambda: st.store.RecoverMemory(recover))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RETENTION_EXPIRED",
    )
    other_namespace = store_pb2.RecoverMemoryRequest(id=gone, reason="undo", namespace="other")
    assert error_of(lambda: st.store.RecoverMemory(other_namespace))[0] == grpc.StatusCode.NOT_FOUND


def test_a_swept_tombstone_history_ends_with_a_purged_event(
    start: Callable[..., AdminStore],
) -> None:
    """Purge events go out as PURGED, not UNSPECIFIED (which is never sent)."""
    st = start()
    gone = st.remember("a memory purged by retention")
    expire(st, gone)
    sweep(st)
    events = st.store.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest(memory_id=gone)).events
    assert [e.event_type for e in events] == [
        store_pb2.HISTORY_EVENT_TYPE_CREATED,
        store_pb2.HISTORY_EVENT_TYPE_DELETED,
        store_pb2.HISTORY_EVENT_TYPE_PURGED,
    ]
    assert events[-1].actor == "retention"
