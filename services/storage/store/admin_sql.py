"""The SQL behind store administration: diagnostics counts, repairs, retention.

Write functions take the writer's connection; read queries are returned as
(sql, params) for the read pool. A memory "has a vector" when `embeddings`
holds a vector of the index model for its namespace and current content hash;
that is the set the vector index must hold, among live memories.

On Postgres the text index is a generated column of the memory row
(`content_tsv`, pg_migrations), set exactly when the memory is live: it can be
neither missing nor orphaned, and there is nothing to rebuild. Its counts are
still read from the rows, so diagnostics report what is there.
"""

from __future__ import annotations

import json
from typing import Any

from services.storage.connection import Connection
from services.storage.dialect import SQLITE, Dialect, dialect_of
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.storage.store.vector_index import EMBEDDING_OF_MEMORY

Query = repo.Query

# Live memories with a vector of the index model for their current content.
_EMBEDDED_LIVE = (
    "SELECT m.rowid FROM memories m JOIN vector_index vi ON vi.id = 1 "
    f"JOIN embeddings e ON {EMBEDDING_OF_MEMORY} "
    "WHERE m.is_deleted = 0"
)


def _vector_checks(dialect: Dialect) -> tuple[str, str]:
    """(an embedded live memory, alias x, has an index row; an index row, alias
    v, has an embedded live memory). SQLite's `IN (subquery)` builds a temporary
    index once (EXISTS was 1.4x slower at 1M); Postgres hashes an IN list only
    while it fits in work_mem and past that re-scans it for every row (1M:
    over 120 s against 11 s), so there an EXISTS, which it plans as a join."""
    return dialect.choose(
        sqlite=(
            "x.rowid IN (SELECT memory_rowid FROM memory_vectors)",
            f"v.memory_rowid IN ({_EMBEDDED_LIVE})",
        ),
        postgres=(
            "EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_rowid = x.rowid)",
            f"EXISTS ({_EMBEDDED_LIVE} AND m.rowid = v.memory_rowid)",
        ),
    )


_FTS_MISSING = (
    "SELECT count(*) FROM memories m WHERE m.is_deleted = 0 "
    "AND NOT EXISTS (SELECT 1 FROM memories_fts_docsize d WHERE d.id = m.rowid)"
)
# Counted in the index itself (docsize has one row per indexed document), not
# through the external content table, which would show the memories instead.
_FTS_ORPHANED = (
    "SELECT count(*) FROM memories_fts_docsize d WHERE NOT EXISTS "
    "(SELECT 1 FROM memories m WHERE m.rowid = d.id AND m.is_deleted = 0)"
)
_FTS_ROWS = "SELECT count(*) FROM memories_fts_docsize"
_DB_SIZE = "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
# Postgres: the same three counts over the generated column.
_PG_FTS_MISSING = "SELECT count(*) FROM memories m WHERE m.is_deleted = 0 AND m.content_tsv IS NULL"
_PG_FTS_ORPHANED = (
    "SELECT count(*) FROM memories m WHERE m.is_deleted <> 0 AND m.content_tsv IS NOT NULL"
)
_PG_FTS_ROWS = "SELECT count(*) FROM memories WHERE content_tsv IS NOT NULL"
_PG_DB_SIZE = "SELECT pg_database_size(current_database())"


def _fts_sql(dialect: Dialect) -> tuple[str, str, str]:
    """(missing, orphaned, rows) counts of the text index on this backend."""
    return dialect.choose(
        sqlite=(_FTS_MISSING, _FTS_ORPHANED, _FTS_ROWS),
        postgres=(_PG_FTS_MISSING, _PG_FTS_ORPHANED, _PG_FTS_ROWS),
    )


_EXPIRED = "m.is_deleted = 1 AND m.deleted_at < :cutoff"
# An embedding (alias e) some memory of its namespace, other than an expired
# tombstone, may still need.
_STILL_USED = (
    "EXISTS (SELECT 1 FROM memories o WHERE o.namespace = e.namespace "
    "AND o.content_hash = e.content_hash AND NOT (o.is_deleted = 1 AND o.deleted_at < :cutoff))"
)


# ---- diagnostics ----------------------------------------------------------------


def job_counts_query() -> Query:
    return repo.queue_counts_query()


def diagnostics_query(
    stale_before: str, expired_before: str, *, dialect: Dialect = SQLITE
) -> Query:
    """Every scalar count in one statement, so they come from one snapshot."""
    fts_missing, fts_orphaned, fts_rows = _fts_sql(dialect)
    db_size = dialect.choose(sqlite=_DB_SIZE, postgres=_PG_DB_SIZE)
    indexed, backed = _vector_checks(dialect)
    return (
        "SELECT "
        "(SELECT count(*) FROM memory_jobs WHERE status = 'leased' AND leased_at < ?) "
        "  AS stale_leases, "
        "(SELECT count(*) FROM memories WHERE is_deleted = 0) AS active_memories, "
        "(SELECT count(*) FROM memories WHERE is_deleted = 1) AS tombstones, "
        "(SELECT count(*) FROM memories m WHERE m.is_deleted = 1 AND m.deleted_at < ?) "
        "  AS expired_tombstones, "
        f"({fts_rows}) AS fts_rows, "
        f"({fts_missing}) AS fts_missing, "
        f"({fts_orphaned}) AS fts_orphaned, "
        "(SELECT model FROM vector_index WHERE id = 1) AS index_model, "
        "(SELECT count(*) FROM memory_vectors) AS vector_rows, "
        f"(SELECT count(*) FROM ({_EMBEDDED_LIVE}) x) AS embedded_memories, "
        f"(SELECT count(*) FROM ({_EMBEDDED_LIVE}) x WHERE NOT {indexed}) AS vector_missing, "
        f"(SELECT count(*) FROM memory_vectors v WHERE NOT {backed}) AS vector_orphaned, "
        f"({db_size}) AS db_size_bytes, "
        "(SELECT count(*) FROM maintenance_audit) AS audit_rows",
        [stale_before, expired_before],
    )


# Per table, the rows that point at a memory that is gone (no row, live or
# tombstoned): links, entity mentions, chunk rows, vector index rows, full-text
# entries and jobs; plus entities no memory mentions. Every count is 0 in a
# sound store. (Stored vectors are keyed by content, not by memory: an old
# version's stays for a revert, so they are not counted here.)
ORPHAN_TABLES = (
    "memory_links",
    "entity_mentions",
    "entities",
    "document_chunks",
    "vector_index",
    "fts_entries",
    "jobs",
)


def orphans_query(*, dialect: Dialect = SQLITE) -> Query:
    """Every orphan count in one statement (one snapshot), named as ORPHAN_TABLES."""
    fts_entries = dialect.choose(
        sqlite="SELECT count(*) FROM memories_fts_docsize f "
        "WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.rowid = f.id)",
        # the text index is a column of the memory row: it cannot outlive it
        postgres="0",
    )
    return (
        "SELECT "
        "(SELECT count(*) FROM memory_links l "
        "  WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = l.from_memory_id) "
        "  OR NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = l.to_memory_id)) "
        "  AS memory_links, "
        "(SELECT count(*) FROM memory_entity_mentions x "
        "  WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = x.memory_id)) "
        "  AS entity_mentions, "
        "(SELECT count(*) FROM entities e "
        "  WHERE NOT EXISTS (SELECT 1 FROM memory_entity_mentions x WHERE x.entity_id = e.id)) "
        "  AS entities, "
        "(SELECT count(*) FROM document_memories d "
        "  WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = d.memory_id)) "
        "  AS document_chunks, "
        "(SELECT count(*) FROM memory_vectors v "
        "  WHERE NOT EXISTS (SELECT 1 FROM memories m WHERE m.rowid = v.memory_rowid)) "
        "  AS vector_index, "
        f"({fts_entries}) AS fts_entries, "
        "(SELECT count(*) FROM memory_jobs j WHERE j.memory_id IS NOT NULL "
        "  AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.id = j.memory_id)) AS jobs",
        [],
    )


def fts_mismatch(conn: Connection) -> tuple[int, int]:
    """(live memories missing from the FTS index, FTS entries without a live memory)."""
    missing_sql, orphaned_sql, _ = _fts_sql(dialect_of(conn))
    missing = conn.execute(missing_sql).fetchone()[0]
    orphaned = conn.execute(orphaned_sql).fetchone()[0]
    return int(missing), int(orphaned)


# ---- repairs ----------------------------------------------------------------------


def insert_audit(conn: Connection, action: str, result: dict[str, Any], at: str) -> None:
    conn.execute(
        "INSERT INTO maintenance_audit(id, action, result, created_at) VALUES (?, ?, ?, ?)",
        (repo.new_id(), action, json.dumps(result, separators=(",", ":")), at),
    )


def dead_job_ids(conn: Connection, limit: int) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM memory_jobs WHERE status = 'dead' ORDER BY failed_at, id LIMIT ?",
        (limit,),
    ).fetchall()
    return [r[0] for r in rows]


def requeue_dead_job(conn: Connection, job_id: str, at: str) -> bool:
    """Dead → pending with fresh attempts; False (left dead) when an open job of
    the same type for the same memory or document exists (the twin the open-job
    unique indexes would refuse; checked in the statement, so one text serves
    both backends: Postgres has no UPDATE OR IGNORE)."""
    cursor = conn.execute(
        "UPDATE memory_jobs SET status = 'pending', attempts = 0, "
        "lease_token = NULL, leased_at = NULL, failed_at = NULL, available_at = ?, "
        "updated_at = ? WHERE id = ? AND status = 'dead' AND NOT EXISTS ("
        "SELECT 1 FROM memory_jobs o WHERE o.job_type = memory_jobs.job_type "
        "AND o.status IN ('pending', 'leased') AND (o.memory_id = memory_jobs.memory_id "
        "OR o.document_id = memory_jobs.document_id))",
        (at, at, job_id),
    )
    return bool(cursor.rowcount)


# Live memories never queued for extraction: not a derived fact (status
# `derived`), not yet extracted (`completed`), not a document chunk (chunks are
# never extracted), and no extract job of any status (pending, running, done in
# shadow mode, dead: RequeueDeadJobs is the way back for those).
_NEVER_EXTRACTED = (
    "FROM memories m WHERE m.is_deleted = 0 AND m.extraction_status = 'pending' "
    "AND m.type != 'document_chunk' AND (:namespace = '' OR m.namespace = :namespace) "
    "AND NOT EXISTS (SELECT 1 FROM memory_jobs j "
    f"WHERE j.memory_id = m.id AND j.job_type = '{JobKind.EXTRACT}')"
)


def never_extracted(conn: Connection, namespace: str, limit: int) -> list[tuple[str, str]]:
    """(namespace, id) of up to `limit` such memories, oldest first ('' = every namespace)."""
    rows = conn.execute(
        f"SELECT m.namespace, m.id {_NEVER_EXTRACTED} ORDER BY m.created_at, m.id LIMIT :limit",
        {"namespace": namespace, "limit": limit},
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def count_never_extracted(conn: Connection, namespace: str) -> int:
    return int(
        conn.execute(f"SELECT count(*) {_NEVER_EXTRACTED}", {"namespace": namespace}).fetchone()[0]
    )


def rebuild_fts(conn: Connection) -> int:
    """Empty the index and refill it from live memories only: the built-in
    'rebuild' would also index tombstoned rows of the content table. On
    Postgres there is nothing to refill (the index is a generated column):
    the count of indexed memories, as SQLite's refill reports."""
    if dialect_of(conn).is_postgres:
        return int(conn.execute(_PG_FTS_ROWS).fetchone()[0])
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('delete-all')")
    cursor = conn.execute(
        "INSERT INTO memories_fts(rowid, content) SELECT rowid, content FROM memories "
        "WHERE is_deleted = 0"
    )
    return int(cursor.rowcount)


def remove_unbacked_vectors(conn: Connection) -> int:
    _, backed = _vector_checks(dialect_of(conn))
    cursor = conn.execute(f"DELETE FROM memory_vectors AS v WHERE NOT {backed}")
    return int(cursor.rowcount)


def add_missing_vectors(conn: Connection) -> int:
    return repo.index_missing_vectors(conn)


# ---- retention (seed 000 "Retention Worker"; one function per step) ---------------


def expired_mentions(conn: Connection, cutoff: str, limit: int) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT mm.memory_id, mm.entity_id FROM memory_entity_mentions mm "
        f"JOIN memories m ON m.id = mm.memory_id WHERE {_EXPIRED} LIMIT :limit",
        {"cutoff": cutoff, "limit": limit},
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def delete_expired_embeddings(conn: Connection, cutoff: str, limit: int) -> int:
    """Vectors of expired tombstones' content that no other memory of their
    namespace still uses."""
    cursor = conn.execute(
        "DELETE FROM embeddings WHERE id IN (SELECT e.id FROM embeddings e WHERE "
        "(e.namespace, e.content_hash) IN "
        f"(SELECT m.namespace, m.content_hash FROM memories m WHERE {_EXPIRED}) "
        f"AND NOT {_STILL_USED} LIMIT :limit)",
        {"cutoff": cutoff, "limit": limit},
    )
    return int(cursor.rowcount)


def purgeable_tombstones(conn: Connection, cutoff: str, limit: int) -> list[Any]:
    """Expired tombstones whose graph links and unshared vectors are already gone
    (the earlier steps' batch limits may have left some for the next sweep)."""
    return list(
        conn.execute(
            "SELECT m.id, m.namespace, m.content_hash, m.deleted_at FROM memories m "
            f"WHERE {_EXPIRED} "
            "AND NOT EXISTS (SELECT 1 FROM memory_entity_mentions mm WHERE mm.memory_id = m.id) "
            "AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.namespace = m.namespace "
            f"  AND e.content_hash = m.content_hash AND NOT {_STILL_USED}) "
            "ORDER BY m.deleted_at LIMIT :limit",
            {"cutoff": cutoff, "limit": limit},
        ).fetchall()
    )


def delete_old_history(conn: Connection, cutoff: str, limit: int) -> int:
    cursor = conn.execute(
        "DELETE FROM memory_history WHERE seq IN (SELECT seq FROM memory_history "
        "WHERE created_at < ? ORDER BY seq LIMIT ?)",
        (cutoff, limit),
    )
    return int(cursor.rowcount)


def delete_old_jobs(
    conn: Connection, status: str, time_column: str, cutoff: str, limit: int
) -> int:
    if (status, time_column) not in (("completed", "completed_at"), ("dead", "failed_at")):
        raise ValueError(f"no retention rule for {status} jobs by {time_column}")
    cursor = conn.execute(
        "DELETE FROM memory_jobs WHERE id IN (SELECT id FROM memory_jobs "
        f"WHERE status = ? AND {time_column} < ? ORDER BY {time_column} LIMIT ?)",
        (status, cutoff, limit),
    )
    return int(cursor.rowcount)


def purged_marker_query(namespace: str, memory_id: str) -> Query:
    """The history event retention leaves for a memory it hard-deleted."""
    return (
        "SELECT created_at FROM memory_history WHERE namespace = ? AND memory_id = ? "
        "AND event = 'purged' LIMIT 1",
        [namespace, memory_id],
    )
