"""The store's admin, retention, decay, explain and suite SQL on both backends
from one home: every test runs once on a migrated SQLite file and once on a
migrated PostgreSQL database (through services/storage/pg.py's SqliteApi), with
the same assertions (pattern: test_pg_repository.py). Read queries get the
connection's dialect, as the read pools pass theirs."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from pg_rows import T0, T1, T2, T3, dialect, memory

from services.common import forgetting
from services.storage.store import admin_sql, decay_sql, explain_sql, suite_sql
from services.storage.store import repository as repo
from services.storage.store.extraction_sql import DERIVED_FROM, SUPERSEDES

OLD = "2025-01-01T00:00:00.000000000Z"
CUTOFF = "2025-06-01T00:00:00.000000000Z"


def _insert(conn: Any, *rows: repo.MemoryRow) -> None:
    conn.execute("BEGIN IMMEDIATE")
    repo.insert_memory_rows(conn, list(rows))
    conn.execute("COMMIT")


def _tombstone(conn: Any, memory_id: str, at: str) -> None:
    repo.update_memory(conn, memory_id, {"is_deleted": 1, "deleted_at": at})


def _job(conn: Any, memory_id: str, job_type: str, status: str, at: str = T0) -> str:
    row = repo.job_row("ns", memory_id, job_type, 3, at)
    repo.enqueue_jobs(conn, [row])
    conn.execute(
        "UPDATE memory_jobs SET status = ?, leased_at = ?, completed_at = ?, failed_at = ? "
        "WHERE id = ?",
        (
            status,
            at if status == "leased" else None,
            at if status == "completed" else None,
            at if status == "dead" else None,
            row.id,
        ),
    )
    return row.id


# ---- diagnostics ----------------------------------------------------------------------


def test_diagnostics_count_the_same_on_both_backends(conn: Any) -> None:
    _insert(
        conn,
        memory("live1", "one"),
        memory("live2", "two"),
        memory("gone", "gone"),
        memory("long_gone", "long gone"),
    )
    _tombstone(conn, "gone", T1)
    _tombstone(conn, "long_gone", OLD)
    _job(conn, "live1", "extract", "leased", OLD)
    _job(conn, "live2", "extract", "leased", T2)
    admin_sql.insert_audit(conn, "test", {"a": 1}, T0)

    row = repo.fetch_one(conn, admin_sql.diagnostics_query(T1, CUTOFF, dialect=dialect(conn)))
    assert {
        name: row[name]
        for name in (
            "stale_leases",
            "active_memories",
            "tombstones",
            "expired_tombstones",
            "fts_rows",
            "fts_missing",
            "fts_orphaned",
            "index_model",
            "vector_rows",
            "embedded_memories",
            "vector_missing",
            "vector_orphaned",
            "audit_rows",
        )
    } == {
        "stale_leases": 1,
        "active_memories": 2,
        "tombstones": 2,
        "expired_tombstones": 1,
        "fts_rows": 2,  # live memories only
        "fts_missing": 0,
        "fts_orphaned": 0,
        "index_model": None,
        "vector_rows": 0,
        "embedded_memories": 0,
        "vector_missing": 0,
        "vector_orphaned": 0,
        "audit_rows": 1,
    }
    assert row["db_size_bytes"] > 0
    assert admin_sql.fts_mismatch(conn) == (0, 0)
    assert admin_sql.rebuild_fts(conn) == 2
    counts = repo.fetch_all(conn, admin_sql.job_counts_query())
    assert sorted(tuple(r) for r in counts) == [("extract", "leased", 2)]


def test_orphans_are_rows_pointing_at_a_memory_that_is_gone(conn: Any) -> None:
    _insert(conn, memory("m1", "one"), memory("m2", "two"))
    conn.execute(
        "INSERT INTO memory_links(id, namespace, from_memory_id, to_memory_id, link_type, "
        "created_at) VALUES ('l1', 'ns', 'm1', 'm2', 'supersedes', ?), "
        "('l2', 'ns', 'm1', 'nobody', 'supersedes', ?)",
        (T0, T0),
    )
    conn.execute(
        "INSERT INTO entities(id, namespace, name, canonical_name, created_at, updated_at) "
        "VALUES ('e1', 'ns', 'A', 'a', ?, ?), ('e2', 'ns', 'B', 'b', ?, ?)",
        (T0, T0, T0, T0),
    )
    conn.execute(
        "INSERT INTO memory_entity_mentions(memory_id, entity_id, namespace, mention_text, "
        "confidence, created_at) VALUES ('m1', 'e1', 'ns', 'A', 1.0, ?), "
        "('nobody', 'e1', 'ns', 'A', 1.0, ?)",
        (T0, T0),
    )
    _job(conn, "m1", "extract", "pending")
    _job(conn, "nobody", "extract", "pending")
    row = repo.fetch_one(conn, admin_sql.orphans_query(dialect=dialect(conn)))
    assert {name: row[name] for name in admin_sql.ORPHAN_TABLES} == {
        "memory_links": 1,
        "entity_mentions": 1,
        "entities": 1,  # e2: mentioned by nothing
        "document_chunks": 0,
        "vector_index": 0,
        "fts_entries": 0,
        "jobs": 1,
    }


# ---- repairs -------------------------------------------------------------------------


def test_a_dead_job_is_requeued_unless_an_open_twin_exists(conn: Any) -> None:
    _insert(conn, memory("m1", "one"), memory("m2", "two"))
    alone = _job(conn, "m1", "extract", "dead", OLD)
    twinned = _job(conn, "m2", "extract", "dead", T0)
    _job(conn, "m2", "extract", "pending")
    other_type = _job(conn, "m2", "embed", "dead", T1)
    assert admin_sql.dead_job_ids(conn, 10) == [alone, twinned, other_type]
    assert admin_sql.dead_job_ids(conn, 1) == [alone]
    assert admin_sql.requeue_dead_job(conn, alone, T3) is True
    assert admin_sql.requeue_dead_job(conn, twinned, T3) is False
    assert admin_sql.requeue_dead_job(conn, other_type, T3) is True
    assert admin_sql.requeue_dead_job(conn, alone, T3) is False  # no longer dead
    rows = conn.execute(
        "SELECT id, status, attempts, available_at, failed_at FROM memory_jobs ORDER BY id"
    ).fetchall()
    by_id = {r[0]: tuple(r[1:]) for r in rows}
    assert by_id[alone] == ("pending", 0, T3, None)
    assert by_id[twinned] == ("dead", 0, T0, T0)
    assert by_id[other_type] == ("pending", 0, T3, None)


def test_memories_never_queued_for_extraction(conn: Any) -> None:
    _insert(
        conn,
        memory("a", "a", created_at=T0),
        memory("b", "b", created_at=T1),
        memory("c", "c", created_at=T2, namespace="other"),
        memory("queued", "queued"),
        memory("chunk", "chunk", type="document_chunk"),
        memory("done", "done", extraction_status="completed"),
        memory("gone", "gone"),
    )
    _tombstone(conn, "gone", T1)
    _job(conn, "queued", "extract", "dead")
    assert admin_sql.never_extracted(conn, "", 10) == [("ns", "a"), ("ns", "b"), ("other", "c")]
    assert admin_sql.never_extracted(conn, "ns", 1) == [("ns", "a")]
    assert admin_sql.count_never_extracted(conn, "") == 3
    assert admin_sql.count_never_extracted(conn, "other") == 1


def test_vector_repairs_with_nothing_indexed(conn: Any) -> None:
    _insert(conn, memory("m1", "one"))
    assert admin_sql.remove_unbacked_vectors(conn) == 0


# ---- retention ---------------------------------------------------------------------


def test_retention_steps_remove_only_what_is_past_its_window(conn: Any) -> None:
    _insert(
        conn,
        memory("expired", "shared"),
        memory("expired_alone", "alone"),
        memory("recent", "recent"),
        memory("live", "shared", namespace="other"),
    )
    _tombstone(conn, "expired", OLD)
    _tombstone(conn, "expired_alone", OLD)
    _tombstone(conn, "recent", T1)
    # another live memory of namespace ns shares "expired"'s content: its vector stays
    _insert(conn, memory("twin", "shared"))
    for namespace, content in (("ns", "shared"), ("ns", "alone"), ("ns", "recent")):
        repo.upsert_embedding(conn, namespace, f"h-{content}", "model", b"\0" * 8, 2, T0)
    conn.execute(
        "INSERT INTO entities(id, namespace, name, canonical_name, created_at, updated_at) "
        "VALUES ('e1', 'ns', 'A', 'a', ?, ?)",
        (T0, T0),
    )
    conn.execute(
        "INSERT INTO memory_entity_mentions(memory_id, entity_id, namespace, mention_text, "
        "confidence, created_at) VALUES ('expired_alone', 'e1', 'ns', 'A', 1.0, ?), "
        "('recent', 'e1', 'ns', 'A', 1.0, ?)",
        (T0, T0),
    )
    assert admin_sql.expired_mentions(conn, CUTOFF, 10) == [("expired_alone", "e1")]

    # not purgeable yet: a mention and an unshared vector remain
    purgeable = admin_sql.purgeable_tombstones(conn, CUTOFF, 10)
    assert [r["id"] for r in purgeable] == ["expired"]
    assert admin_sql.delete_expired_embeddings(conn, CUTOFF, 10) == 1  # "alone"'s only
    hashes = [r[0] for r in conn.execute("SELECT content_hash FROM embeddings").fetchall()]
    assert sorted(hashes) == ["h-recent", "h-shared"]
    conn.execute("DELETE FROM memory_entity_mentions WHERE memory_id = 'expired_alone'")
    purgeable = admin_sql.purgeable_tombstones(conn, CUTOFF, 10)
    assert [(r["id"], r["deleted_at"]) for r in purgeable] == [
        ("expired", OLD),
        ("expired_alone", OLD),
    ]
    assert [r["id"] for r in admin_sql.purgeable_tombstones(conn, CUTOFF, 1)] == ["expired"]


def test_old_history_and_jobs_go_in_batches_oldest_first(conn: Any) -> None:
    repo.insert_history(
        conn,
        [
            repo.history_row(
                memory_id=f"m{i}",
                namespace="ns",
                event="purged" if i == 1 else "add",
                old_content=None,
                new_content=None,
                actor="test",
                reason="",
                metadata={},
                at=at,
            )
            for i, at in enumerate([OLD, OLD, OLD, T0])
        ],
    )
    assert admin_sql.delete_old_history(conn, CUTOFF, 2) == 2
    left = [r[0] for r in conn.execute("SELECT memory_id FROM memory_history ORDER BY seq")]
    assert left == ["m2", "m3"]
    assert repo.fetch_one(conn, admin_sql.purged_marker_query("ns", "m1")) is None  # deleted
    repo.insert_history(
        conn,
        [
            repo.history_row(
                memory_id="p",
                namespace="ns",
                event="purged",
                old_content=None,
                new_content=None,
                actor="test",
                reason="",
                metadata={},
                at=T1,
            )
        ],
    )
    assert repo.fetch_one(conn, admin_sql.purged_marker_query("ns", "p"))[0] == T1

    _insert(conn, *(memory(f"j{i}", f"j{i}") for i in range(4)))
    _job(conn, "j0", "extract", "completed", OLD)
    _job(conn, "j1", "extract", "completed", T0)
    _job(conn, "j2", "extract", "dead", OLD)
    _job(conn, "j3", "extract", "pending", OLD)
    assert admin_sql.delete_old_jobs(conn, "completed", "completed_at", CUTOFF, 10) == 1
    assert admin_sql.delete_old_jobs(conn, "dead", "failed_at", CUTOFF, 10) == 1
    left = [r[0] for r in conn.execute("SELECT memory_id FROM memory_jobs ORDER BY memory_id")]
    assert left == ["j1", "j3"]
    with pytest.raises(ValueError):
        admin_sql.delete_old_jobs(conn, "pending", "created_at", CUTOFF, 10)


# ---- decay (seed 003) ---------------------------------------------------------------


def _expected(confidence: float, rate: float, days: float) -> float:
    return confidence * math.exp(-rate * max(0.0, days) ** forgetting.DECAY_EXPONENT)


def test_current_confidence_and_weak_memories_agree_across_backends(conn: Any) -> None:
    now = "2026-03-01T12:00:00.500000000Z"
    _insert(
        conn,
        memory("fresh", "fresh", created_at="2026-03-01T00:00:00.000000000Z"),
        memory("old", "old", created_at="2025-03-01T00:00:00.000000000Z"),
        memory("pinned", "pinned", created_at=OLD, pinned=1),
        memory("protected", "protected", created_at=OLD),
        memory("accessed", "accessed", created_at=OLD),
        memory("future", "future", created_at="2027-01-01T00:00:00.000000000Z"),
        memory("elsewhere", "elsewhere", created_at=OLD, namespace="other"),
    )
    repo.update_memory(conn, "protected", {"decay_rate": 0.0})
    conn.execute(
        "UPDATE memories SET last_accessed = ?, confidence = 0.9 WHERE id = 'accessed'",
        ("2026-02-28T12:00:00.500000000Z",),
    )
    rows = repo.fetch_all(
        conn, decay_sql.weak_page_query("ns", 2.0, 0.1, now, None, 10, dialect=dialect(conn))
    )
    got = {r["id"]: r["current_confidence"] for r in rows}
    assert list(got) == ["fresh", "old", "accessed", "future"]  # written order; 2.0 > all
    assert got["fresh"] == pytest.approx(_expected(1.0, 0.1, 0.5 + 0.5 / 86400), rel=1e-9)
    assert got["old"] == pytest.approx(_expected(1.0, 0.1, 365.5 + 0.5 / 86400), rel=1e-9)
    assert got["accessed"] == pytest.approx(_expected(0.9, 0.1, 1.0), rel=1e-9)
    assert got["future"] == pytest.approx(1.0)  # never negative days

    page = repo.fetch_all(
        conn, decay_sql.weak_page_query("ns", 2.0, 0.1, now, None, 2, dialect=dialect(conn))
    )
    after = repo.fetch_all(
        conn,
        decay_sql.weak_page_query(
            "ns", 2.0, 0.1, now, page[-1]["rowid"], 10, dialect=dialect(conn)
        ),
    )
    assert [r["id"] for r in page + after] == list(got)

    threshold = 0.5  # the year-old memory has decayed below it, nothing else has
    weak = repo.fetch_all(
        conn, decay_sql.weak_page_query("ns", threshold, 0.1, now, None, 10, dialect=dialect(conn))
    )
    assert [r["id"] for r in weak] == ["old"]
    count = repo.fetch_one(
        conn, decay_sql.weak_count_query(threshold, 0.1, now, dialect=dialect(conn))
    )
    assert count[0] == 2  # and the other namespace's
    batch = decay_sql.weakest_batch(conn, threshold, 0.1, now, 10)
    assert [r["id"] for r in batch] == ["old", "elsewhere"]
    assert batch[0]["current_confidence"] == pytest.approx(got["old"], rel=1e-12)

    # a rate and an age whose exponent underflows: 0 on both (Postgres's exp() would raise)
    _insert(conn, memory("ancient", "ancient", created_at=OLD, namespace="far"))
    repo.update_memory(conn, "ancient", {"decay_rate": 1000.0})
    [row] = repo.fetch_all(
        conn, decay_sql.weak_page_query("far", 0.5, 0.1, now, None, 10, dialect=dialect(conn))
    )
    assert row["current_confidence"] == pytest.approx(0.0, abs=1e-300)


# ---- explain ----------------------------------------------------------------------


def _link(conn: Any, from_id: str, to_id: str, link_type: str, at: str = T0) -> None:
    conn.execute(
        "INSERT INTO memory_links(id, namespace, from_memory_id, to_memory_id, link_type, "
        "created_at) VALUES (?, 'ns', ?, ?, ?, ?)",
        (f"{from_id}-{to_id}-{link_type}", from_id, to_id, link_type, at),
    )


def test_version_chains_derivations_and_links(conn: Any) -> None:
    _insert(
        conn,
        *(
            memory(f"v{i}", f"v{i}", created_at=f"2026-01-01T00:00:0{i}.000000000Z")
            for i in range(4)
        ),
        memory("fact", "fact", created_at=T1),
        memory("expired", "expired", expire_at="2000-01-01T00:00:00.000000000Z"),
    )
    for newer, older in (("v1", "v0"), ("v2", "v1"), ("v3", "v2")):
        _link(conn, newer, older, SUPERSEDES)
    _link(conn, "fact", "v2", DERIVED_FROM, T1)
    _link(conn, "fact", "v1", DERIVED_FROM, T2)
    _link(conn, "fact", "expired", DERIVED_FROM, T3)

    def ids(query: repo.Query) -> list[str]:
        return [r["id"] for r in repo.fetch_all(conn, query)]

    assert ids(explain_sql.older_versions("ns", "v2")) == ["v1", "v0"]
    assert ids(explain_sql.newer_versions("ns", "v0")) == ["v1", "v2", "v3"]
    assert ids(explain_sql.older_versions("other", "v2")) == []
    assert ids(explain_sql.derived_from("ns", "fact")) == ["v1", "v2"]  # by created_at
    assert ids(explain_sql.derivations("ns", "v2")) == ["fact"]

    links = repo.fetch_all(
        conn, explain_sql.links_query("ns", "fact", (DERIVED_FROM,), True, True, None, 10)
    )
    assert [(r[0], r[3]) for r in links] == [
        ("fact-v2-derived_from", "v2"),
        ("fact-v1-derived_from", "v1"),
    ]
    assert links[0][8] == T1  # valid_from defaults to created_at
    page = repo.fetch_all(
        conn,
        explain_sql.links_query(
            "ns", "v2", (SUPERSEDES, DERIVED_FROM), True, True, (T0, "v2-v1-supersedes"), 10
        ),
    )
    assert [r[0] for r in page] == ["v3-v2-supersedes", "fact-v2-derived_from"]


def test_the_suite_id_is_32_hex_digits(conn: Any) -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", suite_sql.read_suite_id(conn))
