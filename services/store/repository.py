"""All of the store's SQL. Write functions take the writer's connection; read
queries are returned as (sql, params) so the async read pool can run them."""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from services.common.memory_filter import MemoryFilterSpec, filter_sql

MEMORY_COLUMNS = (
    "id, namespace, content, content_hash, type, importance, tags, pinned, who, why, "
    "source_type, source_id, version, is_deleted, deleted_at, created_at, updated_at, "
    "event_time, access_count, last_accessed"
)
_M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in MEMORY_COLUMNS.split(","))

# Columns a patch, delete or recover may change; anything else is a bug.
_UPDATABLE = {
    "content",
    "normalized_content",
    "content_hash",
    "type",
    "importance",
    "tags",
    "pinned",
    "who",
    "version",
    "is_deleted",
    "deleted_at",
    "updated_at",
    "embedding_model",
}

Query = tuple[str, list[Any]]


def new_id() -> str:
    """A UUIDv7 (RFC 9562): time-ordered, so every index keyed by an id grows at
    its end instead of dirtying a random page per insert."""
    millis = time.time_ns() // 1_000_000
    value = (millis & (2**48 - 1)) << 80 | 0x7 << 76 | secrets.randbits(76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant bits
    return str(uuid.UUID(int=value))


# ---- reads (also used inside write operations) --------------------------------


def get_memory_query(namespace: str, memory_id: str) -> Query:
    return (
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = ? AND id = ?",
        [namespace, memory_id],
    )


def list_memories_query(
    namespace: str, spec: MemoryFilterSpec, after: tuple[str, str] | None, limit: int
) -> Query:
    clauses, params = filter_sql(spec, "m")
    sql = f"SELECT {_M_COLUMNS} FROM memories m WHERE m.namespace = ? AND m.is_deleted = 0{clauses}"
    args: list[Any] = [namespace, *params]
    if after is not None:
        sql += " AND (m.created_at, m.id) < (?, ?)"
        args.extend(after)
    sql += " ORDER BY m.created_at DESC, m.id DESC LIMIT ?"
    args.append(limit)
    return sql, args


def forget_candidates_query(
    namespace: str,
    ids: Sequence[str],
    fts_query: str | None,
    spec: MemoryFilterSpec,
    include_pinned: bool,
    limit: int,
) -> Query:
    clauses, params = filter_sql(spec, "m")
    sql = f"SELECT {_M_COLUMNS} FROM memories m WHERE m.namespace = ? AND m.is_deleted = 0{clauses}"
    args: list[Any] = [namespace, *params]
    if not include_pinned:
        sql += " AND m.pinned = 0"
    if ids:
        sql += f" AND m.id IN ({', '.join('?' * len(ids))})"
        args.extend(ids)
    if fts_query is not None:
        sql += " AND m.rowid IN (SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?)"
        args.append(fts_query)
    sql += " ORDER BY m.created_at DESC, m.id DESC LIMIT ?"
    args.append(limit)
    return sql, args


def history_query(namespace: str, memory_id: str, after_seq: int, limit: int) -> Query:
    return (
        "SELECT seq, id, memory_id, event, old_content, new_content, changed_by, reason, "
        "metadata, created_at FROM memory_history "
        "WHERE namespace = ? AND memory_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        [namespace, memory_id, after_seq, limit],
    )


def fetch_one(conn: Any, query: Query) -> Any:
    return conn.execute(query[0], query[1]).fetchone()


def fetch_all(conn: Any, query: Query) -> list[Any]:
    return list(conn.execute(query[0], query[1]).fetchall())


# ---- writes (writer thread only) ----------------------------------------------


def live_ids_by_hash(conn: Any, namespace: str, hashes: Sequence[str]) -> dict[str, str]:
    """content_hash -> id of the live memory with that hash, for the given hashes."""
    found: dict[str, str] = {}
    unique = list(dict.fromkeys(hashes))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        rows = conn.execute(
            "SELECT content_hash, id FROM memories WHERE namespace = ? AND is_deleted = 0 "
            f"AND content_hash IN ({', '.join('?' * len(chunk))})",
            [namespace, *chunk],
        ).fetchall()
        found.update({row[0]: row[1] for row in rows})
    return found


def insert_memories(conn: Any, rows: Iterable[dict[str, Any]]) -> None:
    conn.executemany(
        "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type, "
        "importance, tags, pinned, who, why, source_type, source_id, version, created_at, "
        "updated_at, event_time) VALUES (:id, :namespace, :content, :normalized_content, "
        ":content_hash, :type, :importance, :tags, :pinned, :who, :why, :source_type, "
        ":source_id, 1, :created_at, :created_at, :event_time)",
        rows,
    )


def history_row(
    *,
    memory_id: str,
    namespace: str,
    event: str,
    old_content: str | None,
    new_content: str | None,
    actor: str,
    reason: str,
    metadata: dict[str, Any],
    at: str,
) -> tuple[Any, ...]:
    return (
        new_id(),
        memory_id,
        namespace,
        event,
        old_content,
        new_content,
        actor,
        reason,
        json.dumps(metadata, separators=(",", ":")),
        at,
    )


def insert_history(conn: Any, rows: Iterable[tuple[Any, ...]]) -> None:
    conn.executemany(
        "INSERT INTO memory_history (id, memory_id, namespace, event, old_content, new_content, "
        "changed_by, reason, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def job_row(
    namespace: str, memory_id: str, job_type: str, max_attempts: int, at: str
) -> tuple[Any, ...]:
    return (new_id(), namespace, memory_id, job_type, max_attempts, at, at, at)


def enqueue_jobs(conn: Any, rows: Iterable[tuple[Any, ...]]) -> None:
    """Enqueue dedup: a memory's open job of the same type absorbs the new one."""
    conn.executemany(
        "INSERT OR IGNORE INTO memory_jobs (id, namespace, memory_id, job_type, max_attempts, "
        "available_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def update_memory(conn: Any, memory_id: str, changes: dict[str, Any]) -> None:
    unknown = set(changes) - _UPDATABLE
    if unknown:
        raise ValueError(f"not updatable: {sorted(unknown)}")
    assignments = ", ".join(f"{column} = :{column}" for column in changes)
    conn.execute(
        f"UPDATE memories SET {assignments} WHERE id = :memory_id",
        {**changes, "memory_id": memory_id},
    )


def hard_delete_memory(conn: Any, memory_id: str) -> None:
    conn.execute("DELETE FROM memory_jobs WHERE memory_id = ?", (memory_id,))
    conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
