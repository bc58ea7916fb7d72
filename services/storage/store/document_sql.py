"""The documents' SQL (seed 000 "Document Ingest"). Write functions take the
writer's connection; read queries are returned as (sql, params) for the read pool.
Every statement is one text for SQLite and Postgres."""

from __future__ import annotations

import json
from typing import Any

from services.storage.connection import Connection
from services.storage.store.job_enums import JobKind

Query = tuple[str, list[Any]]

_COLUMNS = (
    "id",
    "namespace",
    "source_type",
    "source_url",
    "title",
    "status",
    "error",
    "chunk_count",
    "expected_chunk_count",
    "tags",
    "created_at",
    "updated_at",
    "completed_at",
)
# The attempt and the last error live on the document's ingest job (the newest,
# should a document ever have had more than one).
_JOB_VALUE = (
    "(SELECT j.{column} FROM memory_jobs j WHERE j.document_id = d.id "
    f"AND j.job_type = '{JobKind.DOCUMENT_INGEST}' ORDER BY j.created_at DESC LIMIT 1)"
)
DOCUMENT_COLUMNS = ", ".join(
    [f"d.{c}" for c in _COLUMNS]
    + [
        f"{_JOB_VALUE.format(column='attempts')} AS attempt",
        f"{_JOB_VALUE.format(column='error')} AS last_error",
    ]
)


# ---- reads ------------------------------------------------------------------------


def get_document_query(namespace: str, document_id: str) -> Query:
    return (
        f"SELECT {DOCUMENT_COLUMNS} FROM documents d WHERE d.namespace = ? AND d.id = ?",
        [namespace, document_id],
    )


def leased_document_query(job_id: str, token: str) -> Query:
    """The document of a document_ingest job leased with exactly this token."""
    return (
        f"SELECT {DOCUMENT_COLUMNS}, d.raw_content FROM memory_jobs lj JOIN documents d "
        "ON d.id = lj.document_id AND d.namespace = lj.namespace "
        "WHERE lj.id = ? AND lj.status = 'leased' AND lj.lease_token = ? "
        f"AND lj.job_type = '{JobKind.DOCUMENT_INGEST}'",
        [job_id, token],
    )


def list_chunks_query(namespace: str, document_id: str, after_index: int, limit: int) -> Query:
    """Live chunk memories of a document in chunk order, after `after_index`."""
    return (
        "SELECT dm.chunk_index, m.id, m.content FROM document_memories dm "
        "JOIN memories m ON m.id = dm.memory_id AND m.namespace = ? AND m.is_deleted = 0 "
        "WHERE dm.document_id = ? AND dm.chunk_index > ? ORDER BY dm.chunk_index LIMIT ?",
        [namespace, document_id, after_index, limit],
    )


def get_document(conn: Connection, document_id: str) -> Any:
    return conn.execute(
        f"SELECT {DOCUMENT_COLUMNS} FROM documents d WHERE d.id = ?", (document_id,)
    ).fetchone()


def linked_memory_with_hash(conn: Connection, document_id: str, content_hash: str) -> str | None:
    """The live memory with this content already linked to the document, if any."""
    row = conn.execute(
        "SELECT m.id FROM document_memories dm JOIN memories m ON m.id = dm.memory_id "
        "WHERE dm.document_id = ? AND m.content_hash = ? AND m.is_deleted = 0 LIMIT 1",
        (document_id, content_hash),
    ).fetchone()
    return None if row is None else str(row[0])


# ---- writes (writer thread only) ------------------------------------------------


def insert_document(conn: Connection, row: dict[str, Any]) -> None:
    conn.execute(
        "INSERT INTO documents (id, namespace, source_type, source_url, raw_content, title, "
        "status, tags, created_at, updated_at) VALUES (:id, :namespace, :source_type, "
        ":source_url, :raw_content, :title, 'queued', :tags, :created_at, :created_at)",
        row,
    )


def insert_ingest_job(
    conn: Connection, job_id: str, namespace: str, document_id: str, max_attempts: int, at: str
) -> None:
    conn.execute(
        "INSERT INTO memory_jobs (id, namespace, document_id, job_type, max_attempts, "
        f"available_at, created_at, updated_at) VALUES (?, ?, ?, '{JobKind.DOCUMENT_INGEST}', "
        "?, ?, ?, ?)",
        (job_id, namespace, document_id, max_attempts, at, at, at),
    )


def set_status(
    conn: Connection, document_id: str, status: str, at: str, error: str | None = None
) -> None:
    conn.execute(
        "UPDATE documents SET status = ?, error = ?, updated_at = ?, "
        "completed_at = CASE WHEN ? = 'done' THEN ? ELSE completed_at END WHERE id = ?",
        (status, error, at, status, at, document_id),
    )


def set_expected_chunk_count(conn: Connection, document_id: str, count: int) -> None:
    conn.execute("UPDATE documents SET expected_chunk_count = ? WHERE id = ?", (count, document_id))


def fail_document(conn: Connection, job_id: str, document_id: str, error: str, at: str) -> None:
    """The document `failed` with `error`, and its ingest job finished, not dead
    (status completed, its result naming the failure): a failed document is the
    user's answer, not a stuck job, so no dead-job rate counts it and "requeue
    dead jobs" has nothing to revive. For a permanent failure at once, and for
    a transient one when its attempts are used up."""
    set_status(conn, document_id, "failed", at, error)
    result = json.dumps({"failed": error}, separators=(",", ":"))
    conn.execute(
        "UPDATE memory_jobs SET status = 'completed', completed_at = ?, updated_at = ?, "
        "lease_token = NULL, error = ?, result = ? WHERE id = ?",
        (at, at, error, result, job_id),
    )


def backfill_title(conn: Connection, document_id: str, title: str) -> None:
    """A fetched title fills the document's title only when it has none."""
    conn.execute(
        "UPDATE documents SET title = ? WHERE id = ? AND coalesce(title, '') = ''",
        (title, document_id),
    )


def link_chunk(
    conn: Connection, document_id: str, memory_id: str, chunk_index: int, at: str
) -> None:
    """Record the chunk (a retry that finds different text at an index replaces
    the link) and recount the document's chunks."""
    conn.execute(
        "INSERT INTO document_memories (document_id, memory_id, chunk_index) "
        "VALUES (?, ?, ?) ON CONFLICT (document_id, chunk_index) "
        "DO UPDATE SET memory_id = excluded.memory_id",
        (document_id, memory_id, chunk_index),
    )
    conn.execute(
        "UPDATE documents SET chunk_count = (SELECT count(*) FROM document_memories "
        "WHERE document_id = ?), updated_at = ? WHERE id = ?",
        (document_id, at, document_id),
    )
