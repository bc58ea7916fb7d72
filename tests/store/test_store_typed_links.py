"""Typed links (issue 17, seed 003 "edges") on a real store over gRPC: every
link has a type, a weight, a confidence, a validity interval and its evidence;
a session's memories are chained by `temporal` links written with them
(Remember, ImportMemories, AppendTurn); relations between facts close when a
fact is superseded; the migration backfills links written before."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import timestamp_pb2

from admin_helpers import AdminStore, admin_store
from engram.store.v1 import store_pb2
from recall_helpers import timestamp
from services.storage.db import open_read_write
from services.storage.sqlite_migrations import MIGRATIONS, apply_migrations


@pytest.fixture
def st(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(start_store_server, make_config)


def remember(st: AdminStore, content: str, **fields: Any) -> Any:
    return st.store.Remember(store_pb2.RememberRequest(content=content, **fields)).memory


def links(st: AdminStore, memory_id: str, **fields: Any) -> list[Any]:
    request = store_pb2.ListMemoryLinksRequest(memory_id=memory_id, **fields)
    return list(st.store.ListMemoryLinks(request).links)


def temporal(st: AdminStore, memory_id: str, namespace: str = "") -> list[tuple[str, str]]:
    return [
        (x.from_memory_id, x.to_memory_id)
        for x in links(st, memory_id, namespace=namespace, link_types=["temporal"])
    ]


def when(year: int, month: int = 1) -> timestamp_pb2.Timestamp:
    return timestamp(datetime(year, month, 1, tzinfo=UTC))


def test_a_sessions_memories_are_chained_in_the_order_written(st: AdminStore) -> None:
    a = remember(st, "Ana booked the flight", session_id="s1", event_time=when(2024, 3))
    elsewhere = remember(st, "Bo likes tea", session_id="s2")
    loose = remember(st, "No session here")
    other_ns = remember(st, "Same session id, other namespace", session_id="s1", namespace="x")
    b = remember(st, "Ana packed her bags", session_id="s1", event_time=when(2024, 4))
    c = remember(st, "Ana landed in Lisbon", session_id="s1")
    assert temporal(st, b.id) == [(a.id, b.id), (b.id, c.id)]
    [link] = links(st, a.id)
    assert (link.link_type, link.weight, link.confidence, link.job_id) == ("temporal", 1, 1, "")
    # valid from when the later memory happened; open; a store rule needs no evidence
    assert link.valid_from == when(2024, 4) and not link.HasField("valid_until")
    assert list(link.evidence_memory_ids) == [] and link.create_time == b.create_time
    # other sessions, no session, another namespace's session of the same id: no link
    assert links(st, elsewhere.id) == links(st, loose.id) == []
    assert temporal(st, other_ns.id, namespace="x") == []
    # a repeated content is the same memory: no new link, the chain goes on from c
    assert remember(st, "Ana packed her bags", session_id="s1").id == b.id
    d = remember(st, "Ana took a taxi", session_id="s1")
    assert temporal(st, d.id) == [(c.id, d.id)]


def test_imports_and_turns_join_the_chain(st: AdminStore) -> None:
    first = remember(st, "The session starts", session_id="s9")
    items = [store_pb2.ImportItem(content=f"imported line {i}", session_id="s9") for i in range(3)]
    items.insert(1, store_pb2.ImportItem(content="imported into another session", session_id="z"))
    results = list(
        st.store.ImportMemories(iter([store_pb2.ImportMemoriesRequest(items=items)])).results
    )
    ids = [r.memory_id for r in results]
    line0, lone, line1, line2 = ids
    turn = st.store.AppendTurn(
        store_pb2.AppendTurnRequest(
            session_id="s9", role=store_pb2.TURN_ROLE_USER, content="what did we import?"
        )
    ).memory
    chain = [first.id, line0, line1, line2, turn.id]
    for earlier, later in itertools.pairwise(chain):
        assert (earlier, later) in temporal(st, later)
    assert temporal(st, first.id) == [(first.id, line0)]
    assert temporal(st, lone) == []
    outgoing = links(st, turn.id, direction=store_pb2.LINK_DIRECTION_OUTGOING)
    assert outgoing == []


def test_a_superseding_version_is_not_on_the_timeline_and_supersedes_links_are_typed(
    st: AdminStore,
) -> None:
    lisbon = remember(st, "Ana lives in Lisbon", session_id="s1", event_time=when(2019))
    [patched] = st.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            patches=[
                store_pb2.MemoryPatch(
                    id=lisbon.id,
                    content="Ana lives in Berlin",
                    supersede=True,
                    valid_from=when(2021),
                )
            ],
            reason="she moved",
        )
    ).results
    berlin = patched.new_memory_id
    [link] = links(st, berlin, link_types=["supersedes"])
    assert (link.from_memory_id, link.to_memory_id, link.weight, link.confidence) == (
        berlin,
        lisbon.id,
        1,
        1,
    )
    assert link.valid_from == when(2021) and not link.HasField("valid_until")
    assert list(link.evidence_memory_ids) == []
    # the next memory of the session follows the session's own memory, not the new version
    next_one = remember(st, "Ana starts a new job", session_id="s1")
    assert temporal(st, next_one.id) == [(lisbon.id, next_one.id)]
    assert temporal(st, berlin) == []


def test_relations_between_facts_close_when_a_fact_is_superseded(st: AdminStore) -> None:
    cause = remember(st, "The deploy script was changed", event_time=when(2020))
    effect = remember(st, "The deploy failed")
    # a causal link as the consolidation writes one (no public write path yet)
    st.execute(
        "INSERT INTO memory_links (id, namespace, from_memory_id, to_memory_id, link_type, "
        "created_at, valid_from, weight, confidence, evidence) VALUES "
        "('c1', 'default', ?, ?, 'causal', ?, ?, 0.8, 0.7, ?)",
        cause.id,
        effect.id,
        "2024-01-01T00:00:00.000000000Z",
        "2024-01-01T00:00:00.000000000Z",
        json.dumps([cause.id]),
    )
    [link] = links(st, effect.id, link_types=["causal"])
    assert (link.weight, link.confidence, list(link.evidence_memory_ids)) == (
        pytest.approx(0.8),
        pytest.approx(0.7),
        [cause.id],
    )
    assert not link.HasField("valid_until")
    st.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            patches=[
                store_pb2.MemoryPatch(
                    id=cause.id,
                    content="The deploy script was reverted",
                    supersede=True,
                    valid_from=when(2025),
                )
            ],
            reason="reverted",
        )
    )
    [closed] = links(st, effect.id, link_types=["causal"])
    assert closed.valid_until == when(2025)
    # deleting a fact does not close its links (a delete is recoverable)
    st.delete(effect.id)
    assert [x.id for x in links(st, cause.id, link_types=["causal"])] == ["c1"]


def test_every_link_type_is_a_valid_filter(st: AdminStore) -> None:
    memory = remember(st, "A memory with no links")
    for link_type in ("supersedes", "derived_from", "temporal", "causal", "entity"):
        assert links(st, memory.id, link_types=[link_type]) == []


def test_the_migration_backfills_links_written_before_it(tmp_path: Path) -> None:
    upto = [n for n, _ in MIGRATIONS].index("typed_links_and_entity_aliases")
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn, MIGRATIONS[:upto])
    at = "2024-05-01T10:00:00.000000000Z"
    for memory_id, valid_from, source in (
        ("src", "2024-01-01T00:00:00.000000000Z", None),
        ("fact", "2024-02-01T00:00:00.000000000Z", "src"),
        ("newer", "2024-03-01T00:00:00.000000000Z", "src"),
        ("manual", "2024-04-01T00:00:00.000000000Z", None),
    ):
        conn.execute(
            "INSERT INTO memories (id, namespace, content, normalized_content, content_hash,"
            " type, importance, created_at, updated_at, event_time, valid_from,"
            " source_memory_id) VALUES (?, 'ns', ?, ?, ?, 'fact', 0.5, ?, ?, ?, ?, ?)",
            (memory_id, memory_id, memory_id, memory_id, at, at, valid_from, valid_from, source),
        )
    for link_id, a, b, kind in (
        ("l1", "fact", "src", "derived_from"),
        ("l2", "newer", "fact", "supersedes"),
        ("l3", "manual", "newer", "supersedes"),
        ("l4", "gone", "src", "supersedes"),
    ):
        conn.execute(
            "INSERT INTO memory_links (id, namespace, from_memory_id, to_memory_id, link_type,"
            " created_at) VALUES (?, 'ns', ?, ?, ?, ?)",
            (link_id, a, b, kind, at),
        )
    conn.execute(
        "INSERT INTO entities (id, namespace, name, canonical_name, created_at, updated_at)"
        " VALUES ('e1', 'ns', 'Ana', 'ana', ?, ?)",
        (at, at),
    )
    assert apply_migrations(conn) == [n for n, _ in MIGRATIONS[upto:]]
    rows = conn.execute(
        "SELECT id, weight, confidence, valid_from, valid_until, evidence FROM memory_links"
        " ORDER BY id"
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        ("l1", 1.0, 1.0, "2024-02-01T00:00:00.000000000Z", None, '["src"]'),
        ("l2", 1.0, 1.0, "2024-03-01T00:00:00.000000000Z", None, '["src"]'),
        ("l3", 1.0, 1.0, "2024-04-01T00:00:00.000000000Z", None, "[]"),
        ("l4", 1.0, 1.0, at, None, "[]"),
    ]
    assert conn.execute("SELECT entity_type FROM entities").fetchone()[0] == "thing"
