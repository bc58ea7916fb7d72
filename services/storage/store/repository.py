"""All of the store's SQL. Write functions take the writer's connection; read
queries are returned as (sql, params) so the async read pool can run them.

One home for both backends (issue 21): the SQL is written for SQLite and runs
unchanged on PostgreSQL through services/storage/pg.py's SqliteApi, which takes
sqlite3's parameter styles. Where the dialects differ it is written in SQL both
accept (ON CONFLICT DO NOTHING, IS DISTINCT FROM, CASE); where that cannot be,
it asks the connection's own dialect (services/storage/dialect.py `dialect_of`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from random import getrandbits
from typing import Any, NamedTuple

from services.common import forgetting, restatement
from services.common.memory_filter import MemoryFilterSpec
from services.storage.connection import Connection
from services.storage.dialect import SQLITE, Dialect, dialect_of
from services.storage.memory_filter_sql import (
    NOW_SQL,
    filter_sql,
    live_sql,
    not_expired_sql,
    present_sql,
)
from services.storage.schema import memory_columns
from services.storage.store import document_sql
from services.storage.store.job_enums import JobKind
from services.storage.store.vector_index import EMBEDDING_OF_MEMORY, record_index_model

# services/storage/schema.py's column list (with the writer's SQL, bare; the reads, as m.*)
MEMORY_COLUMNS = memory_columns()
_M_COLUMNS = memory_columns("m")

# Columns a patch, delete or recover may change; anything else is a bug.
_UPDATABLE = {
    "content",
    "normalized_content",
    "content_hash",
    "type",
    "importance",
    "tags",
    "categories",
    "pinned",
    "who",
    "version",
    "is_deleted",
    "deleted_at",
    "updated_at",
    "embedding_model",
    "expire_at",
    "valid_until",
    "invalidated_at",
    "last_accessed",
    "decay_rate",
}

Query = tuple[str, list[Any]]


def new_id() -> str:
    """A UUIDv7 (RFC 9562): time-ordered, so every index keyed by an id grows at
    its end instead of dirtying a random page per insert."""
    millis = time.time_ns() // 1_000_000
    # Ids identify rows; they are not secrets, so no system call for the random bits.
    # Version 7 in bits 76-79, RFC 4122 variant 0b10 in bits 62-63, 74 random bits.
    rand = getrandbits(74)
    value = (
        (millis & 0xFFFFFFFFFFFF) << 80
        | 0x7 << 76
        | (rand >> 62) << 64
        | 0x2 << 62
        | (rand & 0x3FFFFFFFFFFFFFFF)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ---- reads (also used inside write operations) --------------------------------


def get_memory_query(namespace: str, memory_id: str) -> Query:
    """The memory, live or soft-deleted; an expired one is gone (None)."""
    return (
        f"SELECT {_M_COLUMNS} FROM memories m WHERE m.namespace = ? AND m.id = ? "
        f"AND {not_expired_sql('m')}",
        [namespace, memory_id],
    )


def list_memories_query(
    namespace: str,
    spec: MemoryFilterSpec,
    after: tuple[str, str] | None,
    limit: int,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    clauses, params = filter_sql(spec, "m", dialect)
    sql = (
        f"SELECT {_M_COLUMNS} FROM memories m "
        f"WHERE m.namespace = ? AND {live_sql('m', as_of=spec.as_of)}{clauses}"
    )
    args: list[Any] = [namespace, *params]
    if after is not None:
        sql += " AND (m.created_at, m.id) < (?, ?)"
        args.extend(after)
    sql += " ORDER BY m.created_at DESC, m.id DESC LIMIT ?"
    args.append(limit)
    return sql, args


def list_tombstones_query(
    namespace: str,
    spec: MemoryFilterSpec,
    deleted_since: str,
    after: tuple[str, str] | None,
    limit: int,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """Soft-deleted memories deleted at or after `deleted_since`, most recently
    deleted first; `after` is the (deleted_at, id) the previous page ended at."""
    clauses, params = filter_sql(spec, "m", dialect)
    sql = (
        f"SELECT {_M_COLUMNS} FROM memories m WHERE m.namespace = ? AND m.is_deleted = 1 "
        f"AND m.deleted_at >= ? AND {not_expired_sql('m')}{clauses}"
    )
    args: list[Any] = [namespace, deleted_since, *params]
    if after is not None:
        sql += " AND (m.deleted_at, m.id) < (?, ?)"
        args.extend(after)
    sql += " ORDER BY m.deleted_at DESC, m.id DESC LIMIT ?"
    args.append(limit)
    return sql, args


def forget_candidates_query(
    namespace: str,
    ids: Sequence[str],
    term_matches: Sequence[str],
    spec: MemoryFilterSpec,
    include_pinned: bool,
    limit: int,
    *,
    dialect: Dialect = SQLITE,
    count: bool = False,
) -> Query:
    """Memories selected for forgetting: live ones and superseded versions
    (services/storage/memory_filter_sql.py present_sql). With `term_matches` (one MATCH
    expression per query term) a memory must match any of them, and those
    matching the most terms come first; then newest first. (Not BM25: FTS5's
    statistics span every namespace, so its order would let other tenants'
    data decide which of this namespace's memories make the cut.)

    On Postgres a term (services/common/fts.py `quoted`, an FTS5 phrase) is
    matched as the phrase of its words in content_tsv: phraseto_tsquery reads
    the quotes as punctuation, so the same strings serve both backends.
    With `count`, how many memories the selection matches (no order, no limit)."""
    clauses, params = filter_sql(spec, "m", dialect)
    columns = "count(*)" if count else _M_COLUMNS
    sql = f"SELECT {columns} FROM memories m WHERE m.namespace = ? AND {present_sql('m')}{clauses}"
    args: list[Any] = [namespace, *params]
    if not include_pinned:
        sql += " AND m.pinned = 0"
    if ids:
        sql += f" AND m.id IN ({', '.join('?' * len(ids))})"
        args.extend(ids)
    order = "m.created_at DESC, m.id DESC"
    order_args: list[Any] = []
    if term_matches and dialect.is_postgres:
        match = "m.content_tsv @@ phraseto_tsquery('engram_english'::regconfig, ?)"
        sql += f" AND ({' OR '.join([match] * len(term_matches))})"
        args.extend(term_matches)
        order = f"({' + '.join([f'({match})::int'] * len(term_matches))}) DESC, {order}"
        order_args.extend(term_matches)
    elif term_matches:
        in_fts = "m.rowid IN (SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?)"
        sql += f" AND {in_fts}"
        args.append(" OR ".join(term_matches))
        order = f"({' + '.join([f'({in_fts})'] * len(term_matches))}) DESC, {order}"
        order_args.extend(term_matches)
    if count:
        return sql, args
    return f"{sql} ORDER BY {order} LIMIT ?", [*args, *order_args, limit]


def history_query(namespace: str, memory_id: str, after_seq: int, limit: int) -> Query:
    return (
        "SELECT seq, id, memory_id, event, old_content, new_content, changed_by, reason, "
        "metadata, created_at FROM memory_history "
        "WHERE namespace = ? AND memory_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        [namespace, memory_id, after_seq, limit],
    )


def fetch_one(conn: Connection, query: Query) -> Any:
    return conn.execute(query[0], query[1]).fetchone()


def fetch_all(conn: Connection, query: Query) -> list[Any]:
    return list(conn.execute(query[0], query[1]).fetchall())


# ---- writes (writer thread only) ----------------------------------------------


class Twin(NamedTuple):
    """The not-deleted memory holding a content (the dedup index allows one)."""

    id: str
    expire_at: str | None
    expired: bool  # by the live rule's clock: reads no longer see it
    valid_from: (
        str  # its own valid time (a restatement may be later: services/common/restatement.py)
    )


def twins_by_hash(conn: Connection, namespace: str, hashes: Sequence[str]) -> dict[str, Twin]:
    """content_hash -> the not-deleted, not superseded memory with that hash,
    expired or not (an expired one still holds its place in the dedup index
    until purged; a superseded one holds none: its value may become true again)."""
    found: dict[str, Twin] = {}
    unique = list(dict.fromkeys(hashes))
    # Without statistics SQLite's planner prefers the (namespace, is_deleted)
    # index for longer IN lists: a scan of the whole namespace. Postgres has no
    # INDEXED BY, and its custom plans choose the hash index; but once psycopg
    # prepares the statement (run five times) Postgres may switch to a generic
    # plan, which scans the namespace: 30-50 times slower at 8,000 memories
    # while an import grows them (bench/README.md, "Remember and
    # ImportMemories"). So this transaction plans the lookup for its own hashes
    # (one hash is an equality on the index's columns: any plan takes it).
    dialect = dialect_of(conn)
    pg_custom = dialect.is_postgres and len(unique) > 1
    indexed_by = dialect.choose(sqlite="INDEXED BY memories_live_hash ", postgres="")
    if pg_custom:
        conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        rows = conn.execute(
            f"SELECT content_hash, id, expire_at, NOT {not_expired_sql('memories')}, "
            "COALESCE(valid_from, event_time) "
            f"FROM memories {indexed_by}"
            "WHERE namespace = ? AND is_deleted = 0 AND invalidated_at IS NULL "
            f"AND content_hash IN ({', '.join('?' * len(chunk))})",
            [namespace, *chunk],
        ).fetchall()
        found.update({row[0]: Twin(row[1], row[2], bool(row[3]), row[4]) for row in rows})
    if pg_custom:  # the server's setting again, for the rest of the transaction
        conn.execute("SET LOCAL plan_cache_mode TO DEFAULT")
    return found


def restatements(
    conn: Connection, namespace: str, memory_ids: Sequence[str]
) -> dict[str, list[tuple[str, str]]]:
    """memory id -> its `restated` events as (metadata JSON, recorded at)."""
    found: dict[str, list[tuple[str, str]]] = {}
    unique = list(dict.fromkeys(memory_ids))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        rows = conn.execute(
            "SELECT memory_id, metadata, created_at FROM memory_history "
            f"WHERE namespace = ? AND memory_id IN ({', '.join('?' * len(chunk))}) "
            "AND event = ?",
            [namespace, *chunk, restatement.RESTATED_EVENT],
        ).fetchall()
        for row in rows:
            found.setdefault(row[0], []).append((row[1], row[2]))
    return found


def live_ids_by_hash(conn: Connection, namespace: str, hashes: Sequence[str]) -> dict[str, str]:
    """content_hash -> id of the live (not deleted, not expired) memory with
    that hash, for the given hashes."""
    return {h: t.id for h, t in twins_by_hash(conn, namespace, hashes).items() if not t.expired}


def expired_memories(conn: Connection, limit: int) -> list[Any]:
    """Memories past their expire_at, deleted or not, oldest expiry first."""
    return list(
        conn.execute(
            "SELECT id, namespace, content_hash, content, expire_at, version FROM memories "
            f"WHERE expire_at <= {NOW_SQL} ORDER BY expire_at LIMIT ?",
            (limit,),
        ).fetchall()
    )


class MemoryRow(NamedTuple):
    """A new memory's row (version 1, updated = created), in insert order."""

    id: str
    namespace: str
    content: str
    normalized_content: str
    content_hash: str
    type: str
    importance: float
    tags: str  # JSON list
    pinned: int
    who: str
    why: str
    source_type: str
    source_id: str
    created_at: str
    event_time: str
    extraction_status: str = "pending"
    extraction_model: str | None = None
    source_memory_id: str | None = None
    session_id: str | None = None
    expire_at: str | None = None
    valid_from: str | None = None  # None: the event time (services/common/memory_record.py)
    categories: str = "[]"  # JSON list (pipeline memories, seed 004 §6)
    temporal_class: str = ""  # permanent | long_term | short_term (seed 004 §5)
    valid_until: str | None = None  # a short-term fact's end (issue 17's valid time)
    confidence: float = 1.0  # seed 003: a pipeline fact's extraction confidence
    decay_rate: float | None = None  # seed 003: None follows memory.decay_rate_default


# Rows per multi-row INSERT (at most 28 parameters a row, far below SQLite's limit).
INSERT_CHUNK_ROWS = 64
# Ids per `IN (...)` of a write over many memories (within every backend's limit
# on bound parameters).
ID_CHUNK = 500


def insert_rows(
    conn: Connection, head: str, row_sql: str, rows: Iterable[Sequence[Any]], tail: str = ""
) -> None:
    """`head` + `row_sql` repeated once per row + `tail`: one statement per chunk of rows.

    Not executemany: the writer thread has to take the GIL back from the event
    loop after every SQLite step, and executemany steps once per row; a multi-row
    INSERT steps once per chunk."""
    rows = rows if isinstance(rows, list) else list(rows)
    for start in range(0, len(rows), INSERT_CHUNK_ROWS):
        chunk = rows[start : start + INSERT_CHUNK_ROWS]
        conn.execute(
            head + ", ".join([row_sql] * len(chunk)) + tail,
            [value for row in chunk for value in row],
        )


def insert_memory_rows(conn: Connection, rows: Iterable[MemoryRow]) -> None:
    insert_rows(
        conn,
        "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type, "
        "importance, tags, pinned, who, why, source_type, source_id, version, created_at, "
        "updated_at, event_time, extraction_status, extraction_model, source_memory_id, "
        "session_id, expire_at, valid_from, categories, temporal_class, valid_until, "
        "confidence, decay_rate) VALUES ",
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                *row[:14],
                row[13],
                *row[14:20],
                row.valid_from or row.event_time,
                row.categories,
                row.temporal_class,
                row.valid_until,
                row.confidence,
                row.decay_rate,
            )
            for row in rows
        ],
    )


class HistoryRow(NamedTuple):
    """One memory_history row, in insert order; metadata is JSON text."""

    id: str
    memory_id: str
    namespace: str
    event: str
    old_content: str | None
    new_content: str | None
    changed_by: str
    reason: str
    metadata: str
    created_at: str


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
) -> HistoryRow:
    return HistoryRow(
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


def insert_history(conn: Connection, rows: Iterable[HistoryRow]) -> None:
    insert_rows(
        conn,
        "INSERT INTO memory_history (id, memory_id, namespace, event, old_content, new_content, "
        "changed_by, reason, metadata, created_at) VALUES ",
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


class JobRow(NamedTuple):
    """A new memory job (pending, available now), in insert order."""

    id: str
    namespace: str
    memory_id: str
    job_type: str
    max_attempts: int
    available_at: str
    created_at: str
    updated_at: str


def job_row(namespace: str, memory_id: str, job_type: str, max_attempts: int, at: str) -> JobRow:
    return JobRow(new_id(), namespace, memory_id, job_type, max_attempts, at, at, at)


def enqueue_jobs(conn: Connection, rows: Iterable[JobRow]) -> None:
    """Enqueue dedup: a memory's open job of the same type absorbs the new one
    (memory_jobs_open, a partial unique index, is the conflict)."""
    insert_rows(
        conn,
        "INSERT INTO memory_jobs (id, namespace, memory_id, job_type, max_attempts, "
        "available_at, created_at, updated_at) VALUES ",
        "(?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
        " ON CONFLICT DO NOTHING",
    )


def update_memory(conn: Connection, memory_id: str, changes: dict[str, Any]) -> None:
    unknown = set(changes) - _UPDATABLE
    if unknown:
        raise ValueError(f"not updatable: {sorted(unknown)}")
    assignments = ", ".join(f"{column} = :{column}" for column in changes)
    conn.execute(
        f"UPDATE memories SET {assignments} WHERE id = :memory_id",
        {**changes, "memory_id": memory_id},
    )


def tombstone_memories(conn: Connection, memory_ids: Sequence[str], at: str) -> None:
    """Soft-delete live memories (services/store/mutations.py soft_delete_many):
    deleted at `at`, the next version; FTS and the vector index drop them by trigger."""
    for start in range(0, len(memory_ids), ID_CHUNK):
        chunk = memory_ids[start : start + ID_CHUNK]
        conn.execute(
            "UPDATE memories SET is_deleted = 1, deleted_at = ?, version = version + 1, "
            f"updated_at = ? WHERE id IN ({', '.join('?' * len(chunk))})",
            [at, at, *chunk],
        )


def restore_memories(conn: Connection, memory_ids: Sequence[str], at: str) -> None:
    """Tombstones live again (services/store/mutations.py restore_many): the next
    version, accessed now; back in FTS by trigger."""
    for start in range(0, len(memory_ids), ID_CHUNK):
        chunk = memory_ids[start : start + ID_CHUNK]
        conn.execute(
            "UPDATE memories SET is_deleted = 0, deleted_at = NULL, version = version + 1, "
            f"updated_at = ?, last_accessed = ? WHERE id IN ({', '.join('?' * len(chunk))})",
            [at, at, *chunk],
        )


def hard_delete_memory(conn: Connection, memory_id: str) -> None:
    """The row and its jobs; the FTS entry and the vector index row go by trigger."""
    conn.execute("DELETE FROM memory_jobs WHERE memory_id = ?", (memory_id,))
    conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))


def delete_links(conn: Connection, memory_id: str) -> None:
    """Every link from or to the memory."""
    conn.execute(
        "DELETE FROM memory_links WHERE from_memory_id = ? OR to_memory_id = ?",
        (memory_id, memory_id),
    )


def delete_chunk_rows(conn: Connection, memory_id: str) -> None:
    """The memory's place in every document it was a chunk of."""
    conn.execute("DELETE FROM document_memories WHERE memory_id = ?", (memory_id,))


def delete_unused_embeddings(conn: Connection, namespace: str, hashes: Sequence[str]) -> int:
    """The namespace's vectors of these contents that no memory of the namespace,
    live or tombstoned, holds any more (a tombstone keeps its vector for recovery)."""
    removed = 0
    unique = list(dict.fromkeys(hashes))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        removed += conn.execute(
            "DELETE FROM embeddings WHERE namespace = ? "
            f"AND content_hash IN ({', '.join('?' * len(chunk))}) "
            # Three probes, so each can use an index (the live-hash and the
            # closed-hash ones are partial).
            "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.is_deleted = 0 "
            "AND m.invalidated_at IS NULL "
            "AND m.namespace = embeddings.namespace AND m.content_hash = embeddings.content_hash) "
            "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.invalidated_at IS NOT NULL "
            "AND m.namespace = embeddings.namespace AND m.content_hash = embeddings.content_hash) "
            "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.is_deleted = 1 "
            "AND m.namespace = embeddings.namespace AND m.content_hash = embeddings.content_hash)",
            [namespace, *chunk],
        ).rowcount
    return removed


# ---- vector index ---------------------------------------------------------------


def index_model_query() -> Query:
    return ("SELECT model, dimensions FROM vector_index WHERE id = 1", [])


def index_model(conn: Connection) -> tuple[str, int | None] | None:
    row = fetch_one(conn, index_model_query())
    return None if row is None else (row[0], row[1])


def _pg_vectors() -> Any:
    """services/storage/store/pg_vectors.py, the vector index's Postgres SQL (imported
    when first needed: it imports psycopg, the `postgres` extra)."""
    from services.storage.store import pg_vectors

    return pg_vectors


def set_index_model(conn: Connection, model: str, dimensions: int | None, at: str) -> None:
    """Record the index's model (on Postgres also size its vector column)."""
    if dialect_of(conn).is_postgres:
        _pg_vectors().set_index_model(conn, model, dimensions, at)
        return
    record_index_model(conn, model, dimensions, at)


def clear_vector_index(conn: Connection) -> None:
    conn.execute("DELETE FROM memory_vectors")


def upsert_embedding(
    conn: Connection,
    namespace: str,
    content_hash: str,
    model: str,
    vector: bytes,
    dimensions: int,
    at: str,
    *,
    parts: bytes | None = None,
) -> None:
    """Store a namespace's vector for a content: it serves that namespace alone,
    so no other namespace can overwrite it or learn from its presence. `parts`
    (the content's sentence vectors, issue 19) live in the same row, so every
    path that drops or replaces the vector drops or replaces them; a vector
    supplied without parts keeps the parts already stored for the same content
    and model (they still describe it), unless its dimensions changed."""
    conn.execute(
        "INSERT INTO embeddings(namespace, content_hash, model, dimensions, vector, created_at, "
        "parts) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(namespace, content_hash, model) DO UPDATE SET "
        "parts = CASE WHEN excluded.parts IS NOT NULL THEN excluded.parts "
        "WHEN embeddings.dimensions = excluded.dimensions THEN embeddings.parts END, "
        "dimensions = excluded.dimensions, vector = excluded.vector, "
        "created_at = excluded.created_at",
        (namespace, content_hash, model, dimensions, vector, at, parts),
    )


def _index_embedded(conn: Connection, where: str, params: Sequence[Any]) -> int:
    """Put live memories matching `where` (over alias m) that have an embedding
    of the index model in their namespace into the vector index; returns how
    many rows were written."""
    cursor = conn.execute(
        "INSERT OR REPLACE INTO memory_vectors(memory_rowid, namespace, bits) "
        "SELECT m.rowid, m.namespace, vec_quantize_binary(vec_f32(e.vector)) "
        "FROM memories m JOIN vector_index vi ON vi.id = 1 "
        f"JOIN embeddings e ON {EMBEDDING_OF_MEMORY} "
        f"WHERE m.is_deleted = 0 AND ({where})",
        list(params),
    )
    return int(cursor.rowcount)


def index_memories(conn: Connection, memory_ids: Sequence[str]) -> int:
    """Index these memories (those with a vector of the index model) and record
    the model on them; returns how many index rows were written."""
    if dialect_of(conn).is_postgres:
        return int(_pg_vectors().index_memories(conn, memory_ids))
    written = 0
    for start in range(0, len(memory_ids), 500):
        chunk = list(memory_ids[start : start + 500])
        marks = ", ".join("?" * len(chunk))
        written += _index_embedded(conn, f"m.id IN ({marks})", chunk)
        conn.execute(
            "UPDATE memories SET embedding_model = (SELECT model FROM vector_index WHERE id = 1) "
            f"WHERE id IN ({marks}) "
            "AND rowid IN (SELECT memory_rowid FROM memory_vectors)",
            chunk,
        )
    return written


def index_all_embedded(conn: Connection) -> int:
    """Every live memory with a vector of the index model (after a model change)."""
    if dialect_of(conn).is_postgres:
        return int(_pg_vectors().index_all_embedded(conn))
    return _index_embedded(conn, "1", [])


def index_missing_vectors(conn: Connection) -> int:
    """Live memories with a vector of the index model that the index lacks."""
    if dialect_of(conn).is_postgres:
        return int(_pg_vectors().index_missing_vectors(conn))
    return _index_embedded(conn, "m.rowid NOT IN (SELECT memory_rowid FROM memory_vectors)", [])


def embedding_dimensions(conn: Connection, model: str) -> int | None:
    """The dimensions of some stored vector of `model`, None when there is none."""
    row = conn.execute(
        "SELECT dimensions FROM embeddings WHERE model = ? LIMIT 1", (model,)
    ).fetchone()
    return None if row is None else int(row[0])


def memory_state(conn: Connection, memory_id: str) -> Any:
    """(namespace, content_hash, is_deleted, type, expire_at) of a memory, None
    when it is gone."""
    return conn.execute(
        "SELECT namespace, content_hash, is_deleted, type, expire_at FROM memories WHERE id = ?",
        (memory_id,),
    ).fetchone()


def live_hashes_with_embedding(conn: Connection, namespace: str, hashes: Sequence[str]) -> set[str]:
    """Which of these content hashes already have a vector of the index model in
    this namespace (only its own vectors: another namespace's must neither skip
    an embed job nor be observable)."""
    if not hashes:
        return set()
    rows = conn.execute(
        "SELECT e.content_hash FROM embeddings e JOIN vector_index vi "
        "ON vi.id = 1 AND e.model = vi.model "
        f"WHERE e.namespace = ? AND e.content_hash IN ({', '.join('?' * len(hashes))})",
        [namespace, *hashes],
    ).fetchall()
    return {r[0] for r in rows}


def requeue_unembedded(conn: Connection, max_attempts: int, at: str) -> int:
    """An embed job for every live memory without a vector of the index model."""
    # 32 random hex digits: SQLite has no UUID function, Postgres no randomblob.
    dialect = dialect_of(conn)
    random_id = dialect.choose(
        sqlite="lower(hex(randomblob(16)))", postgres="replace(gen_random_uuid()::text, '-', '')"
    )
    # Postgres runs NOT IN over a list past work_mem as a subplan re-scanned per row
    # (bench/README "Store diagnostics at 1M"); SQLite's NOT IN is the faster there.
    unindexed = dialect.choose(
        sqlite="m.rowid NOT IN (SELECT memory_rowid FROM memory_vectors)",
        postgres="NOT EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_rowid = m.rowid)",
    )
    cursor = conn.execute(
        "INSERT INTO memory_jobs (id, namespace, memory_id, job_type, max_attempts, "
        "available_at, created_at, updated_at) "
        f"SELECT {random_id}, m.namespace, m.id, '{JobKind.EMBED}', ?, ?, ?, ? FROM memories m "
        f"WHERE m.is_deleted = 0 AND {unindexed} "
        # (the WHERE also settles SQLite's parse of ON CONFLICT after a SELECT)
        "ON CONFLICT DO NOTHING",
        (max_attempts, at, at, at),
    )
    return int(cursor.rowcount)


# ---- job queue --------------------------------------------------------------------


def due_jobs(
    conn: Connection, job_type: str, namespaces: Sequence[str], now: str, limit: int
) -> list[Any]:
    """Up to `limit` due jobs, oldest first; mark them leased in the same
    transaction. SQLite's one writer runs claims one at a time. On Postgres,
    where claimers run at once on their own connections, the rows are locked
    FOR UPDATE SKIP LOCKED: two transactions never return the same job and
    neither waits for the other (services/storage/store/pg_jobs.py's claim)."""
    sql = (
        "SELECT j.id, j.job_type, j.namespace, j.memory_id, j.document_id, j.attempts, "
        "j.max_attempts, m.content, m.content_hash, m.is_deleted, "
        "(j.document_id IS NOT NULL AND d.id IS NOT NULL) AS has_document FROM memory_jobs j "
        "LEFT JOIN memories m ON m.id = j.memory_id "
        "LEFT JOIN documents d ON d.id = j.document_id "
        "WHERE j.job_type = ? AND j.status = 'pending' AND j.available_at <= ? "
        # never a job out of attempts (issue 34): its last lease made it dead
        "AND j.attempts < j.max_attempts"
    )
    params: list[Any] = [job_type, now]
    if namespaces:
        sql += f" AND j.namespace IN ({', '.join('?' * len(namespaces))})"
        params.extend(namespaces)
    sql += " ORDER BY j.available_at, j.created_at LIMIT ?"
    params.append(limit)
    if dialect_of(conn).is_postgres:
        sql += " FOR UPDATE OF j SKIP LOCKED"
    return list(conn.execute(sql, params).fetchall())


def due_job_query(job_type: str, namespaces: Sequence[str], now: str) -> Query:
    """Whether a job of this type is due (for a long-polling lease to look
    without taking the writer)."""
    sql = (
        "SELECT 1 FROM memory_jobs WHERE job_type = ? AND status = 'pending' "
        "AND available_at <= ? AND attempts < max_attempts"
    )
    params: list[Any] = [job_type, now]
    if namespaces:
        sql += f" AND namespace IN ({', '.join('?' * len(namespaces))})"
        params.extend(namespaces)
    return (sql + " LIMIT 1", params)


def mark_leased(
    conn: Connection,
    job_id: str,
    token: str,
    at: str,
    holder: tuple[str, str] | None = None,
) -> None:
    """`holder` is (worker name, instance id); None for an anonymous lease."""
    worker, instance = holder if holder is not None else (None, None)
    conn.execute(
        "UPDATE memory_jobs SET status = 'leased', lease_token = ?, leased_at = ?, "
        "attempts = attempts + 1, updated_at = ?, lease_worker = ?, lease_instance = ? "
        "WHERE id = ?",
        (token, at, at, worker, instance, job_id),
    )


def leased_job(conn: Connection, job_id: str, token: str) -> Any:
    """The job if it is leased with exactly this token, else None. On Postgres
    the job stays locked until the transaction ends, so the caller's completion,
    retry or release acts on the lease it checked: a reaper or a second
    completion waits, then finds it changed (fencing; SQLite's one writer
    serialises them anyway)."""
    return conn.execute(
        "SELECT id, job_type, namespace, memory_id, document_id, attempts, max_attempts "
        "FROM memory_jobs WHERE id = ? AND status = 'leased' AND lease_token = ?"
        + dialect_of(conn).row_lock,
        (job_id, token),
    ).fetchone()


def complete_job(conn: Connection, job_id: str, at: str, result: str | None = None) -> None:
    conn.execute(
        "UPDATE memory_jobs SET status = 'completed', completed_at = ?, updated_at = ?, "
        "lease_token = NULL, result = ? WHERE id = ?",
        (at, at, result, job_id),
    )


def retry_job(conn: Connection, job_id: str, error: str, available_at: str, at: str) -> None:
    conn.execute(
        "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, leased_at = NULL, "
        "error = ?, available_at = ?, updated_at = ? WHERE id = ?",
        (error, available_at, at, job_id),
    )


def bury_job(conn: Connection, job_id: str, error: str, at: str) -> None:
    conn.execute(
        "UPDATE memory_jobs SET status = 'dead', lease_token = NULL, error = ?, failed_at = ?, "
        "updated_at = ? WHERE id = ?",
        (error, at, at, job_id),
    )


# SQLite's two-argument max() is Postgres' greatest(); a CASE is both's.
_ONE_ATTEMPT_LESS = "CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END"

# Why a lease ended without its holder's word (the error a job keeps, and a
# document that is out of attempts shows).
LEASE_EXPIRED = "lease expired: the worker neither completed nor renewed it in time"
WORKER_LOST = "worker lost: its process restarted while it held the lease"
OUT_OF_ATTEMPTS = "out of attempts: left pending with every attempt used (by an older version)"


def release_job(conn: Connection, job_id: str, at: str) -> None:
    """Back to pending as if the attempt never happened: the holder itself says
    the work could not start through no fault of the job (the provider is down)."""
    conn.execute(
        "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, leased_at = NULL, "
        f"attempts = {_ONE_ATTEMPT_LESS}, updated_at = ? WHERE id = ?",
        (at, job_id),
    )


def renew_lease(conn: Connection, job_id: str, at: str) -> None:
    conn.execute(
        "UPDATE memory_jobs SET leased_at = ?, updated_at = ? WHERE id = ?", (at, at, job_id)
    )


class EndedLeases(NamedTuple):
    released: int  # every lease ended, whatever became of its job
    dead: int  # of them, out of attempts: dead, or their document failed


def _end_lost_leases(
    conn: Connection, where: str, params: Sequence[Any], error: str, at: str
) -> EndedLeases:
    """End the leases nobody will complete (issue 34): the attempt each used
    stays counted, so a job that crashes its worker or outlives its lease every
    time cannot loop forever. One with attempts left returns to pending with
    `error` as its last error; one without is dead with it, or, a document's,
    its document `failed` (services/storage/store/document_sql.py's fail_document).
    On Postgres the rows are locked first: a job its holder is completing
    (leased_job's lock) is waited for, then no longer matches."""
    rows = conn.execute(
        "SELECT id, document_id, attempts, max_attempts FROM memory_jobs "
        f"WHERE status = 'leased' AND {where}" + dialect_of(conn).row_lock,
        list(params),
    ).fetchall()
    dead = 0
    for row in rows:
        job_id, document_id = row["id"], row["document_id"]
        if row["attempts"] < row["max_attempts"]:
            conn.execute(
                "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, "
                "leased_at = NULL, error = ?, updated_at = ? WHERE id = ?",
                (error, at, job_id),
            )
            if document_id:
                document_sql.set_status(conn, document_id, "queued", at)
            continue
        dead += 1
        if document_id:
            document_sql.fail_document(conn, job_id, document_id, error, at)
        else:
            bury_job(conn, job_id, error, at)
    return EndedLeases(len(rows), dead)


def _bury_exhausted_pending(conn: Connection, at: str) -> int:
    """Jobs left pending with every attempt used (a database from before issue
    34's fix gave attempts back) are never leased again: they go to the dead
    letter, or their document fails, instead of sitting pending for ever."""
    rows = conn.execute(
        "SELECT id, document_id, error FROM memory_jobs "
        "WHERE status = 'pending' AND attempts >= max_attempts" + dialect_of(conn).row_lock,
    ).fetchall()
    for row in rows:
        error = row["error"] or OUT_OF_ATTEMPTS
        if row["document_id"]:
            document_sql.fail_document(conn, row["id"], row["document_id"], error, at)
        else:
            bury_job(conn, row["id"], error, at)
    return len(rows)


def release_stale_leases(conn: Connection, leased_before: str, at: str) -> EndedLeases:
    """The reaper: every lease taken or renewed before `leased_before` ends
    (an expired lease is a used attempt), and a pending job out of attempts is
    buried (counted among `dead`)."""
    ended = _end_lost_leases(conn, "leased_at < ?", [leased_before], LEASE_EXPIRED, at)
    buried = _bury_exhausted_pending(conn, at)
    return EndedLeases(ended.released, ended.dead + buried)


def release_prior_instance_leases(
    conn: Connection, worker: str, instance: str, at: str
) -> EndedLeases:
    """A restarted worker's start: every job `worker` leased under another
    instance ends (its process died holding it: a used attempt)."""
    return _end_lost_leases(
        conn,
        "lease_worker = ? AND lease_instance IS DISTINCT FROM ?",
        [worker, instance],
        WORKER_LOST,
        at,
    )


def last_event_query(namespace: str, memory_id: str) -> Query:
    """The memory's newest history event (event, metadata)."""
    return (
        "SELECT event, metadata FROM memory_history WHERE namespace = ? AND memory_id = ? "
        "ORDER BY seq DESC LIMIT 1",
        [namespace, memory_id],
    )


def queue_counts_query() -> Query:
    return ("SELECT job_type, status, count(*) FROM memory_jobs GROUP BY job_type, status", [])


def queue_counts(conn: Connection) -> dict[tuple[str, str], int]:
    """(job type, status) -> how many jobs, on a connection of its own."""
    return {(row[0], row[1]): row[2] for row in conn.execute(*queue_counts_query())}


def oldest_pending_query() -> Query:
    return ("SELECT min(created_at) FROM memory_jobs WHERE status = 'pending'", [])


def index_stats_query() -> Query:
    return (
        "SELECT (SELECT model FROM vector_index WHERE id = 1), "
        "(SELECT dimensions FROM vector_index WHERE id = 1), "
        "(SELECT count(*) FROM memory_vectors), "
        "(SELECT count(*) FROM memories WHERE is_deleted = 0)",
        [],
    )


def record_access(conn: Connection, namespace: str, counts: dict[str, int], at: str) -> int:
    """Count `counts[id]` accesses per live memory and reinforce its stored
    confidence once per access (services/common/forgetting.py), in the caller's
    write transaction: read and update with nothing in between."""
    ids = list(counts)
    rows: list[Any] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows += conn.execute(
            "SELECT id, access_count, confidence FROM memories "
            f"WHERE namespace = ? AND is_deleted = 0 AND id IN ({', '.join('?' * len(chunk))})",
            [namespace, *chunk],
        ).fetchall()
    updates = []
    for memory_id, count, confidence in rows:
        for _ in range(counts[memory_id]):
            count += 1
            confidence = forgetting.reinforced(confidence, count)
        updates.append((count, confidence, at, namespace, memory_id))
    conn.executemany(
        "UPDATE memories SET access_count = ?, confidence = ?, last_accessed = ? "
        "WHERE namespace = ? AND id = ?",
        updates,
    )
    return len(updates)
