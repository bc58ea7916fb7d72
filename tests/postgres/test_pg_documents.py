"""Documents' SQL (services/storage/store/document_sql.py) on both backends: a
migrated SQLite file and a migrated PostgreSQL database, the same assertions
(the `conn` fixture is tests/postgres/conftest.py's)."""

from __future__ import annotations

from typing import Any

from pg_rows import T0, T1, T2, T3, insert, memory

from services.storage.store import document_sql as sql
from services.storage.store import repository as repo


def _document(conn: Any, document_id: str, namespace: str = "ns") -> str:
    sql.insert_document(
        conn,
        {
            "id": document_id,
            "namespace": namespace,
            "source_type": "text",
            "source_url": None,
            "raw_content": "one. two. three.",
            "title": None,
            "tags": '["doc"]',
            "created_at": T0,
        },
    )
    job_id = f"job-{document_id}"
    sql.insert_ingest_job(conn, job_id, namespace, document_id, 2, T0)
    return job_id


def test_a_document_its_job_and_its_status(conn: Any) -> None:
    job = _document(conn, "d")
    row = repo.fetch_one(conn, sql.get_document_query("ns", "d"))
    assert (row["status"], row["attempt"], row["last_error"], row["tags"]) == (
        "queued",
        0,
        None,
        '["doc"]',
    )
    assert repo.fetch_one(conn, sql.get_document_query("other", "d")) is None

    repo.mark_leased(conn, job, "tok", T1, None)
    leased = repo.fetch_one(conn, sql.leased_document_query(job, "tok"))
    assert (leased["id"], leased["raw_content"], leased["attempt"]) == ("d", "one. two. three.", 1)
    assert repo.fetch_one(conn, sql.leased_document_query(job, "other token")) is None

    sql.set_status(conn, "d", "processing", T1)
    sql.backfill_title(conn, "d", "Fetched")
    sql.backfill_title(conn, "d", "Not this one")
    sql.set_expected_chunk_count(conn, "d", 3)
    row = sql.get_document(conn, "d")
    assert (row["status"], row["title"], row["expected_chunk_count"], row["completed_at"]) == (
        "processing",
        "Fetched",
        3,
        None,
    )
    sql.set_status(conn, "d", "done", T2)
    assert (sql.get_document(conn, "d")["completed_at"]) == T2

    job2 = _document(conn, "e")
    repo.mark_leased(conn, job2, "tok", T1, None)
    sql.fail_document(conn, job2, "e", "unreadable", T3)
    row = sql.get_document(conn, "e")
    assert (row["status"], row["error"], row["last_error"], row["completed_at"]) == (
        "failed",
        "unreadable",
        "unreadable",
        None,
    )
    result = conn.execute("SELECT status, result FROM memory_jobs WHERE id = ?", (job2,)).fetchone()
    assert tuple(result) == ("completed", '{"failed":"unreadable"}')


def test_chunks_are_linked_replaced_by_index_and_listed_live(conn: Any) -> None:
    _document(conn, "d")
    insert(
        conn,
        memory("c0", "one"),
        memory("c1", "two"),
        memory("c1b", "two, fetched again"),
        memory("c2", "three"),
    )
    for index, memory_id in enumerate(["c0", "c1", "c2"]):
        sql.link_chunk(conn, "d", memory_id, index, T1)
    sql.link_chunk(conn, "d", "c1b", 1, T2)  # a retry found other text at index 1
    assert sql.get_document(conn, "d")["chunk_count"] == 3
    assert sql.linked_memory_with_hash(conn, "d", "h-two, fetched again") == "c1b"
    assert sql.linked_memory_with_hash(conn, "d", "h-two") is None

    repo.update_memory(conn, "c2", {"is_deleted": 1, "deleted_at": T3})
    chunks = repo.fetch_all(conn, sql.list_chunks_query("ns", "d", -1, 9))
    assert [(c[0], c[1]) for c in chunks] == [(0, "c0"), (1, "c1b")]
    assert [c[1] for c in repo.fetch_all(conn, sql.list_chunks_query("ns", "d", 0, 9))] == ["c1b"]
    assert repo.fetch_all(conn, sql.list_chunks_query("other", "d", -1, 9)) == []
