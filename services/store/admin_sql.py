"""The SQL behind store administration: diagnostics counts, repairs, retention.

Write functions take the writer's connection; read queries are returned as
(sql, params) for the read pool. A memory "has a vector" when `embeddings`
holds a vector of the index model for its namespace and current content hash;
that is the set the vector index must hold, among live memories.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from services.store import repository as repo

Query = repo.Query

# Live memories with a vector of the index model for their current content.
_EMBEDDED_LIVE = (
    "SELECT m.rowid FROM memories m JOIN vector_index vi ON vi.id = 1 "
    f"JOIN embeddings e ON {repo.EMBEDDING_OF_MEMORY} "
    "WHERE m.is_deleted = 0"
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


def diagnostics_query(stale_before: str, expired_before: str) -> Query:
    """Every scalar count in one statement, so they come from one snapshot."""
    return (
        "SELECT "
        "(SELECT count(*) FROM memory_jobs WHERE status = 'leased' AND leased_at < ?) "
        "  AS stale_leases, "
        "(SELECT count(*) FROM memories WHERE is_deleted = 0) AS active_memories, "
        "(SELECT count(*) FROM memories WHERE is_deleted = 1) AS tombstones, "
        "(SELECT count(*) FROM memories m WHERE m.is_deleted = 1 AND m.deleted_at < ?) "
        "  AS expired_tombstones, "
        "(SELECT count(*) FROM memories_fts_docsize) AS fts_rows, "
        f"({_FTS_MISSING}) AS fts_missing, "
        f"({_FTS_ORPHANED}) AS fts_orphaned, "
        "(SELECT model FROM vector_index WHERE id = 1) AS index_model, "
        "(SELECT count(*) FROM memory_vectors) AS vector_rows, "
        f"(SELECT count(*) FROM ({_EMBEDDED_LIVE})) AS embedded_memories, "
        f"(SELECT count(*) FROM ({_EMBEDDED_LIVE}) x WHERE x.rowid NOT IN "
        "  (SELECT memory_rowid FROM memory_vectors)) AS vector_missing, "
        "(SELECT count(*) FROM memory_vectors v WHERE v.memory_rowid NOT IN "
        f"  ({_EMBEDDED_LIVE})) AS vector_orphaned, "
        "(SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()) "
        "  AS db_size_bytes, "
        "(SELECT count(*) FROM maintenance_audit) AS audit_rows",
        [stale_before, expired_before],
    )


def fts_mismatch(conn: Any) -> tuple[int, int]:
    """(live memories missing from the FTS index, FTS entries without a live memory)."""
    missing = conn.execute(_FTS_MISSING).fetchone()[0]
    orphaned = conn.execute(_FTS_ORPHANED).fetchone()[0]
    return int(missing), int(orphaned)


# ---- repairs ----------------------------------------------------------------------


def insert_audit(conn: Any, action: str, result: dict[str, Any], at: str) -> None:
    conn.execute(
        "INSERT INTO maintenance_audit(id, action, result, created_at) VALUES (?, ?, ?, ?)",
        (repo.new_id(), action, json.dumps(result, separators=(",", ":")), at),
    )


def dead_job_ids(conn: Any, limit: int) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM memory_jobs WHERE status = 'dead' ORDER BY failed_at, id LIMIT ?",
        (limit,),
    ).fetchall()
    return [r[0] for r in rows]


def requeue_dead_job(conn: Any, job_id: str, at: str) -> bool:
    """Dead → pending with fresh attempts; False (left dead) when an open job of
    the same type for the same memory or document exists (OR IGNORE)."""
    cursor = conn.execute(
        "UPDATE OR IGNORE memory_jobs SET status = 'pending', attempts = 0, "
        "lease_token = NULL, leased_at = NULL, failed_at = NULL, available_at = ?, "
        "updated_at = ? WHERE id = ? AND status = 'dead'",
        (at, at, job_id),
    )
    return bool(cursor.rowcount)


def rebuild_fts(conn: Any) -> int:
    """Empty the index and refill it from live memories only: the built-in
    'rebuild' would also index tombstoned rows of the content table."""
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('delete-all')")
    cursor = conn.execute(
        "INSERT INTO memories_fts(rowid, content) SELECT rowid, content FROM memories "
        "WHERE is_deleted = 0"
    )
    return int(cursor.rowcount)


def remove_unbacked_vectors(conn: Any) -> int:
    cursor = conn.execute(
        f"DELETE FROM memory_vectors WHERE memory_rowid NOT IN ({_EMBEDDED_LIVE})"
    )
    return int(cursor.rowcount)


def add_missing_vectors(conn: Any) -> int:
    return repo.index_embedded_memories(
        conn, "m.rowid NOT IN (SELECT memory_rowid FROM memory_vectors)", []
    )


# ---- retention (seed 000 "Retention Worker"; one function per step) ---------------


def expired_mentions(conn: Any, cutoff: str, limit: int) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT mm.memory_id, mm.entity_id FROM memory_entity_mentions mm "
        f"JOIN memories m ON m.id = mm.memory_id WHERE {_EXPIRED} LIMIT :limit",
        {"cutoff": cutoff, "limit": limit},
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def delete_mention(conn: Any, memory_id: str, entity_id: str, at: str) -> None:
    conn.execute(
        "DELETE FROM memory_entity_mentions WHERE memory_id = ? AND entity_id = ?",
        (memory_id, entity_id),
    )
    conn.execute(
        "UPDATE entities SET mentions = max(mentions - 1, 0), updated_at = ? WHERE id = ?",
        (at, entity_id),
    )


def delete_orphaned_entities(conn: Any, entity_ids: Sequence[str]) -> tuple[int, int]:
    """Entities among `entity_ids` at zero mentions, with no mention row left, are
    deleted with every relation that touches them. Returns (entities, relations)."""
    entities = relations = 0
    for entity_id in entity_ids:
        orphan = conn.execute(
            "SELECT 1 FROM entities e WHERE e.id = ? AND e.mentions <= 0 AND NOT EXISTS "
            "(SELECT 1 FROM memory_entity_mentions mm WHERE mm.entity_id = e.id)",
            (entity_id,),
        ).fetchone()
        if orphan is None:
            continue
        relations += conn.execute(
            "DELETE FROM relations WHERE source_entity_id = ? OR target_entity_id = ?",
            (entity_id, entity_id),
        ).rowcount
        entities += conn.execute("DELETE FROM entities WHERE id = ?", (entity_id,)).rowcount
    return entities, relations


def delete_expired_embeddings(conn: Any, cutoff: str, limit: int) -> int:
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


def purgeable_tombstones(conn: Any, cutoff: str, limit: int) -> list[Any]:
    """Expired tombstones whose graph links and unshared vectors are already gone
    (the earlier steps' batch limits may have left some for the next sweep)."""
    return list(
        conn.execute(
            "SELECT m.id, m.namespace, m.content, m.deleted_at FROM memories m "
            f"WHERE {_EXPIRED} "
            "AND NOT EXISTS (SELECT 1 FROM memory_entity_mentions mm WHERE mm.memory_id = m.id) "
            "AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.namespace = m.namespace "
            f"  AND e.content_hash = m.content_hash AND NOT {_STILL_USED}) "
            "ORDER BY m.deleted_at LIMIT :limit",
            {"cutoff": cutoff, "limit": limit},
        ).fetchall()
    )


def purge_memory(conn: Any, memory_id: str) -> None:
    """The row (FTS and vector rows go by trigger), its jobs, links and chunk rows."""
    conn.execute(
        "DELETE FROM memory_links WHERE from_memory_id = ? OR to_memory_id = ?",
        (memory_id, memory_id),
    )
    conn.execute("DELETE FROM document_memories WHERE memory_id = ?", (memory_id,))
    repo.hard_delete_memory(conn, memory_id)


def delete_old_history(conn: Any, cutoff: str, limit: int) -> int:
    cursor = conn.execute(
        "DELETE FROM memory_history WHERE seq IN (SELECT seq FROM memory_history "
        "WHERE created_at < ? ORDER BY seq LIMIT ?)",
        (cutoff, limit),
    )
    return int(cursor.rowcount)


def delete_old_jobs(conn: Any, status: str, time_column: str, cutoff: str, limit: int) -> int:
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
