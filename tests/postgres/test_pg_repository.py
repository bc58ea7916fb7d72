"""services/storage/store/repository.py on both backends from one home: every test runs
once on a migrated SQLite file and once on a migrated PostgreSQL database (through
services/storage/pg.py's SqliteApi), with the same assertions. First, SqliteApi's
translation of sqlite3's SQL text into psycopg's."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from pg_rows import PAST, T0, T1, T2, T3, memory

from services.common import forgetting
from services.common.memory_filter import MemoryFilterSpec
from services.storage import db, pg
from services.storage.dialect import dialect_of
from services.storage.memory_filter_sql import NOW_SQL
from services.storage.store import document_sql
from services.storage.store import repository as repo
from services.store.writer import Writer

FUTURE = "9999-01-01T00:00:00.000000000Z"
STORED_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z")


# ---- the translation ---------------------------------------------------------------


def test_placeholders_become_psycopgs_and_a_literal_percent_is_doubled() -> None:
    assert pg.translate("SELECT a FROM t WHERE a = ? AND b % 2 = ?") == (
        "SELECT a FROM t WHERE a = %s AND b %% 2 = %s"
    )
    assert pg.translate("UPDATE t SET a = :a, b_2 = :b_2 WHERE id = :id") == (
        "UPDATE t SET a = %(a)s, b_2 = %(b_2)s WHERE id = %(id)s"
    )


def test_nothing_inside_a_literal_an_identifier_or_a_comment_is_a_placeholder() -> None:
    assert pg.translate("SELECT '? :x', 'it''s ?', \"odd?col\" FROM t WHERE a = ?") == (
        "SELECT '? :x', 'it''s ?', \"odd?col\" FROM t WHERE a = %s"
    )
    assert pg.translate("SELECT 1 -- why? :because\nWHERE a = ? /* ? */") == (
        "SELECT 1 -- why? :because\nWHERE a = %s /* ? */"
    )
    # psycopg scans the whole text for %, literals and comments included
    assert pg.translate("SELECT '50%' -- 100%\n") == "SELECT '50%%' -- 100%%\n"


def test_a_postgres_cast_is_not_a_named_parameter() -> None:
    assert pg.translate("SELECT ?::text, a::int FROM t") == "SELECT %s::text, a::int FROM t"


def test_mixed_or_numbered_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="both"):
        pg.translate("SELECT ? WHERE a = :a")
    with pytest.raises(ValueError, match="numbered"):
        pg.translate("SELECT ?1")


def test_the_writers_begin_immediate_and_sqlites_clock_are_translated() -> None:
    assert pg.translate("BEGIN IMMEDIATE") == "BEGIN"
    assert pg.translate("begin  immediate") == "BEGIN"
    for statement in ("COMMIT", "ROLLBACK", "SAVEPOINT op", "ROLLBACK TO op", "RELEASE op"):
        assert pg.translate(statement) == statement  # Postgres takes them as written
    translated = pg.translate(f"SELECT 1 WHERE expire_at > {NOW_SQL} AND a = ?")
    assert "strftime" not in translated
    assert translated.endswith("AND a = %s")


def test_a_statement_text_is_translated_once() -> None:
    text = "SELECT ? AS once_only_statement"
    pg.translate(text)
    hits = pg.translate.cache_info().hits
    pg.translate(text)
    assert pg.translate.cache_info().hits == hits + 1


def test_raw_translation_numbers_the_placeholders_and_leaves_percent_alone() -> None:
    assert pg.translate_raw("SELECT a FROM t WHERE a = ? AND b % 2 = ? AND c IN (?, ?)") == (
        "SELECT a FROM t WHERE a = $1 AND b % 2 = $2 AND c IN ($3, $4)"
    )
    assert pg.translate_raw("SELECT '? 50%', \"odd?col\" FROM t WHERE a = ? /* ? */ -- ?") == (
        "SELECT '? 50%', \"odd?col\" FROM t WHERE a = $1 /* ? */ -- ?"
    )
    assert "strftime" not in (pg.translate_raw(f"SELECT {NOW_SQL} WHERE a = ?") or "strftime")


def test_statements_without_question_marks_are_not_raw() -> None:
    """psycopg's own conversion takes them: named parameters, none, the writer's BEGIN."""
    for statement in ("UPDATE t SET a = :a WHERE id = :id", "SELECT 1", "BEGIN IMMEDIATE"):
        assert pg.translate_raw(statement) is None


# ---- one repository, two backends -----------------------------------------------------


def test_the_connection_says_its_dialect(conn: Any) -> None:
    assert dialect_of(conn).is_postgres == isinstance(conn, pg.SqliteApi)


def test_literal_percent_signs_and_the_clock_read_alike(conn: Any) -> None:
    assert conn.execute("SELECT '50%' || ?", ["!"]).fetchone()[0] == "50%!"
    assert conn.execute("SELECT '50%'").fetchone()[0] == "50%"
    now = conn.execute(f"SELECT {NOW_SQL}").fetchone()[0]
    assert STORED_TIME.fullmatch(now) and now.endswith("000000Z")


def test_a_statement_of_many_parameters_reads_back_each_in_its_place(conn: Any) -> None:
    """Past psycopg's cached sizes (50 parameters, 4,096 characters): the raw path."""
    values = [f"v{n}%" for n in range(300)]
    statement = "SELECT '50%', " + ", ".join(f"? AS c{n}" for n in range(300))
    assert list(conn.execute(statement, values).fetchone()) == ["50%", *values]
    conn.execute("CREATE TABLE many (a TEXT, b INTEGER)")
    conn.executemany("INSERT INTO many (a, b) VALUES (?, ?)", [("x%", 1), ("y", 2)])
    named = conn.execute("SELECT a FROM many WHERE b = :b", {"b": 1}).fetchall()
    assert [tuple(r) for r in named] == [("x%",)]


def _memory(memory_id: str, content: str, **overrides: Any) -> repo.MemoryRow:
    """pg_rows.memory tagged "a" unless told otherwise."""
    return memory(memory_id, content, **{"tags": '["a"]', **overrides})


def _insert(conn: Any, *rows: repo.MemoryRow) -> None:
    conn.execute("BEGIN IMMEDIATE")
    repo.insert_memory_rows(conn, list(rows))
    conn.execute("COMMIT")


def test_memory_rows_insert_get_list_update_and_hard_delete(conn: Any) -> None:
    _insert(
        conn,
        _memory("m1", "first", created_at=T0),
        _memory("m2", "second", created_at=T1, pinned=1, type="preference"),
        _memory("m3", "third", created_at=T2),
    )
    row = repo.fetch_one(conn, repo.get_memory_query("ns", "m2"))
    assert (row["content"], row["pinned"], row["version"], row["type"]) == (
        "second",
        1,
        1,
        "preference",
    )
    assert (row["created_at"], row["updated_at"], row["tags"]) == (T1, T1, '["a"]')
    assert repo.fetch_one(conn, repo.get_memory_query("other", "m2")) is None

    everything = MemoryFilterSpec()
    listed = repo.fetch_all(conn, repo.list_memories_query("ns", everything, None, 2))
    assert [r["id"] for r in listed] == ["m3", "m2"]
    after = (listed[-1]["created_at"], listed[-1]["id"])
    assert [
        r["id"] for r in repo.fetch_all(conn, repo.list_memories_query("ns", everything, after, 2))
    ] == ["m1"]
    pinned = MemoryFilterSpec(pinned=True, types=("preference",), since=T1)
    assert [
        r["id"] for r in repo.fetch_all(conn, repo.list_memories_query("ns", pinned, None, 9))
    ] == ["m2"]

    repo.update_memory(conn, "m1", {"content": "first, edited", "version": 2, "updated_at": T3})
    row = repo.fetch_one(conn, repo.get_memory_query("ns", "m1"))
    assert (row["content"], row["version"], row["updated_at"]) == ("first, edited", 2, T3)
    with pytest.raises(ValueError, match="not updatable"):
        repo.update_memory(conn, "m1", {"namespace": "elsewhere"})

    repo.update_memory(conn, "m3", {"is_deleted": 1, "deleted_at": T3})
    live = repo.fetch_all(conn, repo.list_memories_query("ns", everything, None, 9))
    assert [r["id"] for r in live] == ["m2", "m1"]
    tombstones = repo.fetch_all(conn, repo.list_tombstones_query("ns", everything, T2, None, 9))
    assert [r["id"] for r in tombstones] == ["m3"]
    assert repo.memory_state(conn, "m3")["is_deleted"] == 1

    repo.enqueue_jobs(conn, [repo.job_row("ns", "m3", "embed", 3, T0)])
    repo.hard_delete_memory(conn, "m3")
    assert repo.fetch_one(conn, repo.get_memory_query("ns", "m3")) is None
    assert repo.memory_state(conn, "m3") is None
    assert conn.execute("SELECT count(*) FROM memory_jobs").fetchone()[0] == 0


def test_an_expired_memory_is_gone_to_reads_by_the_databases_clock(conn: Any) -> None:
    _insert(conn, _memory("old", "old", expire_at=PAST), _memory("new", "new", expire_at=FUTURE))
    assert repo.fetch_one(conn, repo.get_memory_query("ns", "old")) is None
    assert repo.fetch_one(conn, repo.get_memory_query("ns", "new")) is not None
    listed = repo.fetch_all(conn, repo.list_memories_query("ns", MemoryFilterSpec(), None, 9))
    assert [r["id"] for r in listed] == ["new"]
    assert [r["id"] for r in repo.expired_memories(conn, 10)] == ["old"]


def test_history_rows_page_by_sequence(conn: Any) -> None:
    rows = [
        repo.history_row(
            memory_id="m",
            namespace="ns",
            event=event,
            old_content=None,
            new_content=f"v{i}",
            actor="test",
            reason="",
            metadata={"i": i},
            at=T0,
        )
        for i, event in enumerate(["add", "update", "update", "delete"])
    ]
    repo.insert_history(conn, rows)
    first = repo.fetch_all(conn, repo.history_query("ns", "m", 0, 3))
    assert [r["event"] for r in first] == ["add", "update", "update"]
    assert first[0]["metadata"] == '{"i":0}'
    rest = repo.fetch_all(conn, repo.history_query("ns", "m", first[-1]["seq"], 3))
    assert [(r["id"], r["new_content"]) for r in rest] == [(rows[3].id, "v3")]
    assert repo.fetch_all(conn, repo.history_query("other", "m", 0, 3)) == []


def test_twins_and_live_ids_by_hash(conn: Any) -> None:
    _insert(
        conn,
        _memory("live", "live"),
        _memory("expired", "expired", expire_at=PAST),
        _memory("deleted", "deleted"),
        _memory("superseded", "superseded", valid_until=T1),
        _memory("elsewhere", "live", namespace="other"),
    )
    repo.update_memory(conn, "deleted", {"is_deleted": 1, "deleted_at": T1})
    repo.update_memory(conn, "superseded", {"invalidated_at": T1})
    hashes = ["h-live", "h-expired", "h-deleted", "h-superseded", "h-none", "h-live"]
    twins = repo.twins_by_hash(conn, "ns", hashes)
    assert {h: (t.id, t.expire_at, t.expired) for h, t in twins.items()} == {
        "h-live": ("live", None, False),
        "h-expired": ("expired", PAST, True),
    }
    assert all(t.valid_from for t in twins.values())  # a restatement is compared with it
    assert repo.live_ids_by_hash(conn, "ns", hashes) == {"h-live": "live"}
    assert repo.live_ids_by_hash(conn, "other", hashes) == {"h-live": "elsewhere"}


def _job(conn: Any, job_id: str) -> Any:
    return conn.execute(
        "SELECT status, lease_token, attempts, lease_worker, lease_instance, error,"
        " available_at, leased_at, completed_at, failed_at, result"
        " FROM memory_jobs WHERE id = ?",
        (job_id,),
    ).fetchone()


def _enqueue(conn: Any, *memory_ids: str, job_type: str = "embed", at: str = T0) -> list[str]:
    rows = [repo.job_row("ns", memory_id, job_type, 3, at) for memory_id in memory_ids]
    repo.enqueue_jobs(conn, rows)
    return [row.id for row in rows]


def test_the_dedup_lookup_is_planned_for_its_own_hashes_as_an_import_runs_it(
    pg_conn: Any,
) -> None:
    """psycopg prepares a statement run five times, and Postgres may then reuse a
    generic plan: for the lookup's IN list, while an import grows the namespace
    (each chunk's hashes looked up, then its rows written), one that scans it."""
    for chunk in range(12):
        numbers = range(chunk * 500, (chunk + 1) * 500)
        pg_conn.execute("BEGIN IMMEDIATE")
        assert repo.twins_by_hash(pg_conn, "ns", [f"h-m{n}" for n in numbers]) == {}
        # the rest of the transaction runs under the server's setting
        assert pg_conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"
        repo.insert_memory_rows(pg_conn, [memory(f"m{n}", f"m{n}") for n in numbers])
        pg_conn.execute("COMMIT")
    plans = pg_conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE '%content_hash IN%'"
    ).fetchall()
    # prepared (psycopg's prepare_threshold), then planned afresh on every run
    assert [(generic, custom > 0) for generic, custom in plans] == [(0, True)]


def test_jobs_enqueue_with_dedup_and_come_due_oldest_first(conn: Any) -> None:
    _insert(conn, _memory("live", "hello"), _memory("gone", "bye"))
    repo.update_memory(conn, "gone", {"is_deleted": 1, "deleted_at": T0})
    first = _enqueue(conn, "live", "gone", "purged")
    later = _enqueue(conn, "later", at=T1)
    _enqueue(conn, "live")  # absorbed by the open job
    _enqueue(conn, "live", job_type="extract")
    conn.execute(
        "INSERT INTO memory_jobs (id, namespace, document_id, job_type, available_at,"
        " created_at, updated_at) VALUES ('doc-job', 'ns', 'no-such-document',"
        " 'document_ingest', ?, ?, ?)",
        [T0] * 3,
    )
    assert conn.execute("SELECT count(*) FROM memory_jobs").fetchone()[0] == 6

    due = repo.due_jobs(conn, "embed", ["ns"], T0, 10)
    assert [r["id"] for r in due] == first
    by_memory = {r["memory_id"]: r for r in due}
    assert (by_memory["live"]["content"], by_memory["live"]["is_deleted"]) == ("hello", 0)
    assert (by_memory["gone"]["content"], by_memory["gone"]["is_deleted"]) == ("bye", 1)
    assert by_memory["purged"]["content"] is None
    assert [r["id"] for r in repo.due_jobs(conn, "embed", [], T1, 10)] == [*first, *later]
    assert repo.due_jobs(conn, "embed", ["other"], T1, 10) == []
    assert len(repo.due_jobs(conn, "embed", ["ns", "other"], T1, 2)) == 2
    [document_job] = repo.due_jobs(conn, "document_ingest", ["ns"], T1, 10)
    assert not document_job["has_document"]

    assert repo.fetch_one(conn, repo.due_job_query("embed", ["ns"], T0)) is not None
    assert repo.fetch_one(conn, repo.due_job_query("embed", ["ns"], PAST)) is None
    assert repo.fetch_one(conn, repo.due_job_query("embed", ["other"], T1)) is None
    counts = {(r[0], r[1]): r[2] for r in repo.fetch_all(conn, repo.queue_counts_query())}
    assert counts == {
        ("embed", "pending"): 4,
        ("extract", "pending"): 1,
        ("document_ingest", "pending"): 1,
    }
    assert repo.fetch_one(conn, repo.oldest_pending_query())[0] == T0


def test_a_lease_is_held_by_its_token_until_completed(conn: Any) -> None:
    (job_id,) = _enqueue(conn, "m")
    repo.mark_leased(conn, job_id, "token-1", T1, ("worker", "instance"))
    job = _job(conn, job_id)
    assert (job["status"], job["lease_token"], job["attempts"], job["leased_at"]) == (
        "leased",
        "token-1",
        1,
        T1,
    )
    assert (job["lease_worker"], job["lease_instance"]) == ("worker", "instance")
    held = repo.leased_job(conn, job_id, "token-1")
    assert (held["id"], held["memory_id"], held["attempts"]) == (job_id, "m", 1)
    assert repo.leased_job(conn, job_id, "token-2") is None
    assert repo.due_jobs(conn, "embed", ["ns"], T3, 10) == []

    repo.renew_lease(conn, job_id, T2)
    assert _job(conn, job_id)["leased_at"] == T2
    repo.complete_job(conn, job_id, T3, '{"ok":true}')
    job = _job(conn, job_id)
    assert (job["status"], job["lease_token"], job["completed_at"], job["result"]) == (
        "completed",
        None,
        T3,
        '{"ok":true}',
    )
    assert repo.leased_job(conn, job_id, "token-1") is None
    _enqueue(conn, "m")  # the completed job no longer absorbs a new one
    assert conn.execute("SELECT count(*) FROM memory_jobs").fetchone()[0] == 2


def test_a_failed_attempt_is_retried_later_then_buried(conn: Any) -> None:
    (job_id,) = _enqueue(conn, "m")
    repo.mark_leased(conn, job_id, "t1", T1)
    repo.retry_job(conn, job_id, "boom", T3, T1)
    job = _job(conn, job_id)
    assert (job["status"], job["lease_token"], job["leased_at"], job["error"]) == (
        "pending",
        None,
        None,
        "boom",
    )
    assert job["available_at"] == T3
    assert repo.due_jobs(conn, "embed", ["ns"], T2, 10) == []
    assert [r["id"] for r in repo.due_jobs(conn, "embed", ["ns"], T3, 10)] == [job_id]
    repo.mark_leased(conn, job_id, "t2", T3)
    repo.bury_job(conn, job_id, "boom again", T3)
    job = _job(conn, job_id)
    assert (job["status"], job["attempts"], job["error"], job["failed_at"]) == (
        "dead",
        2,
        "boom again",
        T3,
    )
    assert repo.due_jobs(conn, "embed", ["ns"], FUTURE, 10) == []


def test_releases_and_the_reapers_return_leases(conn: Any) -> None:
    released, stale, fresh, old, anonymous, new, foreign = _enqueue(
        conn, "m1", "m2", "m3", "m4", "m5", "m6", "m7"
    )
    for job_id in (released, stale, fresh):
        repo.mark_leased(conn, job_id, f"t-{job_id}", T1)
    repo.release_job(conn, released, T2)
    job = _job(conn, released)
    assert (job["status"], job["attempts"], job["lease_token"]) == ("pending", 0, None)
    repo.release_job(conn, released, T2)  # never below zero
    assert _job(conn, released)["attempts"] == 0

    repo.renew_lease(conn, fresh, T3)
    assert repo.release_stale_leases(conn, T2, T3) == (1, 0)
    job = _job(conn, stale)
    assert (job["status"], job["attempts"], job["lease_token"]) == ("pending", 1, None)
    assert job["error"] == repo.LEASE_EXPIRED
    assert _job(conn, fresh)["status"] == "leased"

    repo.mark_leased(conn, old, "t-old", T1, ("worker", "old"))
    repo.mark_leased(conn, anonymous, "t-anon", T1, ("worker", "x"))
    conn.execute("UPDATE memory_jobs SET lease_instance = NULL WHERE id = ?", (anonymous,))
    repo.mark_leased(conn, new, "t-new", T1, ("worker", "new"))
    repo.mark_leased(conn, foreign, "t-foreign", T1, ("someone-else", "old"))
    # a NULL instance is another instance too (IS DISTINCT FROM, not <>)
    assert repo.release_prior_instance_leases(conn, "worker", "new", T2) == (2, 0)
    for job_id in (old, anonymous):
        job = _job(conn, job_id)
        assert (job["status"], job["attempts"], job["lease_token"]) == ("pending", 1, None)
        assert job["error"] == repo.WORKER_LOST
    assert [_job(conn, j)["status"] for j in (new, foreign)] == ["leased", "leased"]


def test_a_lease_nobody_completes_uses_its_attempt_and_the_last_one_is_dead(conn: Any) -> None:
    """Issue 34: the reaper and a restart's release keep the attempt; out of
    attempts the job is dead with why (a document's: its document failed), and
    no lease ever hands it out again."""
    crashed, expired = _enqueue(conn, "m1", "m2")
    conn.execute(
        "INSERT INTO documents (id, namespace, source_type, status, created_at, updated_at)"
        " VALUES ('doc', 'ns', 'text', 'extracting', ?, ?)",
        [T0] * 2,
    )
    document_sql.insert_ingest_job(conn, "doc-job", "ns", "doc", 3, T0)
    for n in range(3):
        repo.mark_leased(conn, crashed, f"c{n}", T1, ("worker", f"process-{n}"))
        ended = repo.release_prior_instance_leases(conn, "worker", f"process-{n + 1}", T2)
        assert ended == (1, 1 if n == 2 else 0)
        for job_id in (expired, "doc-job"):
            repo.mark_leased(conn, job_id, f"e{n}-{job_id}", T1)
        assert repo.release_stale_leases(conn, T2, T3) == (2, 2 if n == 2 else 0)
        if n < 2:
            assert _job(conn, crashed)["status"] == "pending"
            status = conn.execute("SELECT status FROM documents WHERE id = 'doc'").fetchone()
            assert status[0] == "queued"
    job = _job(conn, crashed)
    assert (job["status"], job["attempts"], job["error"], job["failed_at"]) == (
        "dead",
        3,
        repo.WORKER_LOST,
        T2,
    )
    job = _job(conn, expired)
    assert (job["status"], job["attempts"], job["error"]) == ("dead", 3, repo.LEASE_EXPIRED)
    # a failed document finishes its job (FailJobs' rule), not a dead one
    assert _job(conn, "doc-job")["status"] == "completed"
    document = conn.execute("SELECT status, error FROM documents WHERE id = 'doc'").fetchone()
    assert tuple(document) == ("failed", repo.LEASE_EXPIRED)
    assert repo.due_jobs(conn, "embed", ["ns"], FUTURE, 10) == []


def test_a_job_out_of_attempts_is_never_leased(conn: Any) -> None:
    """Even pending (a database from before issue 34's fix): the lease query and
    the long poll's look skip it."""
    (job_id,) = _enqueue(conn, "m")
    conn.execute("UPDATE memory_jobs SET attempts = 3 WHERE id = ?", (job_id,))
    assert repo.due_jobs(conn, "embed", ["ns"], FUTURE, 10) == []
    assert repo.fetch_one(conn, repo.due_job_query("embed", ["ns"], FUTURE)) is None
    conn.execute("UPDATE memory_jobs SET attempts = 2 WHERE id = ?", (job_id,))
    assert [r["id"] for r in repo.due_jobs(conn, "embed", ["ns"], FUTURE, 10)] == [job_id]
    assert repo.fetch_one(conn, repo.due_job_query("embed", ["ns"], FUTURE)) is not None


def test_the_reaper_buries_a_pending_job_out_of_attempts(conn: Any) -> None:
    """A database from before issue 34's fix holds pending jobs with every
    attempt used: never leased again, so the reaper puts them in the dead letter
    (keeping their last error) instead of leaving them pending for ever."""
    exhausted, errored, fresh = _enqueue(conn, "m1", "m2", "m3")
    conn.execute("UPDATE memory_jobs SET attempts = 3 WHERE id IN (?, ?)", (exhausted, errored))
    conn.execute("UPDATE memory_jobs SET error = 'provider down' WHERE id = ?", (errored,))
    assert repo.release_stale_leases(conn, T0, T2) == (0, 2)
    rows = {job_id: _job(conn, job_id) for job_id in (exhausted, errored, fresh)}
    assert [(r["status"], r["error"]) for r in rows.values()] == [
        ("dead", repo.OUT_OF_ATTEMPTS),
        ("dead", "provider down"),
        ("pending", None),
    ]
    assert repo.release_stale_leases(conn, T0, T3) == (0, 0)


def test_unembedded_live_memories_get_an_embed_job_once(conn: Any) -> None:
    _insert(conn, _memory("a", "a"), _memory("b", "b"), _memory("c", "c"))
    repo.update_memory(conn, "c", {"is_deleted": 1, "deleted_at": T1})
    assert repo.requeue_unembedded(conn, 3, T1) == 2
    assert repo.requeue_unembedded(conn, 3, T2) == 0  # the open jobs absorb the second
    ids = [r[0] for r in conn.execute("SELECT id FROM memory_jobs ORDER BY memory_id")]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and len(set(ids)) == 2


def test_embeddings_of_the_index_model_per_namespace(conn: Any) -> None:
    assert repo.index_model(conn) is None
    repo.set_index_model(conn, "model-a", 4, T0)
    repo.set_index_model(conn, "model-b", 3, T1)
    assert repo.index_model(conn) == ("model-b", 3)
    _insert(conn, _memory("kept", "kept"), _memory("gone", "gone"))
    vector = bytes(range(12))
    for content_hash in ("h-kept", "h-gone", "h-orphan"):
        repo.upsert_embedding(conn, "ns", content_hash, "model-b", vector, 3, T0)
    repo.upsert_embedding(conn, "ns", "h-kept", "model-b", vector[::-1], 3, T1)  # replaced
    assert (
        conn.execute("SELECT vector FROM embeddings WHERE content_hash = 'h-kept'").fetchone()[0]
        == vector[::-1]
    )
    assert repo.embedding_dimensions(conn, "model-b") == 3
    assert repo.embedding_dimensions(conn, "model-a") is None
    assert repo.live_hashes_with_embedding(conn, "ns", ["h-kept", "h-none"]) == {"h-kept"}
    assert repo.live_hashes_with_embedding(conn, "other", ["h-kept"]) == set()
    repo.hard_delete_memory(conn, "gone")
    assert repo.delete_unused_embeddings(conn, "ns", ["h-kept", "h-gone", "h-orphan"]) == 2
    stats = repo.fetch_one(conn, repo.index_stats_query())
    assert (stats[0], stats[1], stats[2], stats[3]) == ("model-b", 3, 0, 1)


def test_access_is_counted_and_reinforces_confidence_for_live_memories(conn: Any) -> None:
    _insert(conn, _memory("a", "a", confidence=0.5), _memory("b", "b"), _memory("gone", "gone"))
    repo.update_memory(conn, "gone", {"is_deleted": 1, "deleted_at": T1})
    assert repo.record_access(conn, "ns", {"a": 2, "b": 1, "gone": 1, "missing": 1}, T2) == 2
    rows = {
        r["id"]: r
        for r in conn.execute("SELECT id, access_count, confidence, last_accessed FROM memories")
    }
    expected = forgetting.reinforced(forgetting.reinforced(0.5, 1), 2)
    assert (rows["a"]["access_count"], rows["a"]["last_accessed"]) == (2, T2)
    assert rows["a"]["confidence"] == pytest.approx(expected)
    assert rows["b"]["access_count"] == 1
    assert (rows["gone"]["access_count"], rows["gone"]["last_accessed"]) == (0, None)


def test_the_writer_runs_its_group_transaction_on_either_connection(conn: Any) -> None:
    """The writer's BEGIN IMMEDIATE, savepoints, ROLLBACK TO and COMMIT as
    written: in one group, a failing operation rolls back only itself."""

    def insert(memory_id: str, content: str) -> Any:
        def run(c: Any) -> str:
            repo.insert_memory_rows(c, [_memory(memory_id, content)])
            return memory_id

        return run

    async def group() -> list[Any]:
        writer = Writer(conn)
        try:
            results = await asyncio.gather(
                writer.submit(insert("a", "a")),
                writer.submit(insert("dup", "a")),  # the live-hash dedup index refuses it
                writer.submit(insert("b", "b")),
                return_exceptions=True,
            )
            ids = [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY id")]
            return [*results, ids, conn.in_transaction]
        finally:
            writer.close()  # closes the connection too (the fixture's close is a no-op)

    first, duplicate, second, ids, in_transaction = asyncio.run(group())
    assert (first, second, ids, in_transaction) == ("a", "b", ["a", "b"], False)
    assert isinstance(duplicate, db.IntegrityError | pg.IntegrityError)


def test_forget_candidates_by_id_and_filter_without_terms(conn: Any) -> None:
    """Without query terms (FTS5's MATCH has no Postgres form here: pg_text's)."""
    _insert(
        conn,
        _memory("a", "a", created_at=T0),
        _memory("b", "b", created_at=T1, pinned=1),
        _memory("c", "c", created_at=T2, valid_until=T2),  # superseded: still a candidate
        _memory("d", "d", created_at=T3, expire_at=PAST),  # expired: gone
    )
    spec = MemoryFilterSpec()
    query = repo.forget_candidates_query("ns", [], [], spec, False, 10)
    assert [r["id"] for r in repo.fetch_all(conn, query)] == ["c", "a"]
    query = repo.forget_candidates_query("ns", ["a", "b"], [], spec, True, 10)
    assert [r["id"] for r in repo.fetch_all(conn, query)] == ["b", "a"]


def test_a_memorys_links_and_chunk_rows_are_deleted_with_it(conn: Any) -> None:
    _insert(conn, _memory("a", "a"), _memory("b", "b"), _memory("c", "c"))
    for link_id, source, target in (("l1", "a", "b"), ("l2", "c", "a"), ("l3", "b", "c")):
        conn.execute(
            "INSERT INTO memory_links (id, namespace, from_memory_id, to_memory_id, link_type,"
            " created_at) VALUES (?, 'ns', ?, ?, 'related', ?)",
            (link_id, source, target, T0),
        )
    conn.execute(
        "INSERT INTO documents (id, namespace, source_type, created_at, updated_at)"
        " VALUES ('doc', 'ns', 'text', ?, ?)",
        (T0, T0),
    )
    conn.executemany(
        "INSERT INTO document_memories (document_id, memory_id, chunk_index) VALUES ('doc', ?, ?)",
        [("a", 0), ("b", 1)],
    )
    repo.delete_links(conn, "a")
    repo.delete_chunk_rows(conn, "a")
    assert [r[0] for r in conn.execute("SELECT id FROM memory_links")] == ["l3"]
    assert [r[0] for r in conn.execute("SELECT memory_id FROM document_memories")] == ["b"]
