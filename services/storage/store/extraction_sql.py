"""SQL for applying extract-job results that the shared repository does not
already have: extraction state on memories and links between memories."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from services.storage.connection import Connection
from services.storage.store import repository as repo

# Link types (seed 003 "edges"). supersedes: a newer version to the one it
# replaced; derived_from: a pipeline fact to its source; temporal: a session's
# memory to the next one in the same session (written with the memory);
# causal: a cause to its effect; entity: two memories naming one entity.
SUPERSEDES = "supersedes"
DERIVED_FROM = "derived_from"
TEMPORAL = "temporal"
CAUSAL = "causal"
ENTITY = "entity"
LINK_TYPES = (SUPERSEDES, DERIVED_FROM, TEMPORAL, CAUSAL, ENTITY)
# Links that record what happened (a version, a source, an order) stay valid
# when their ends stop being so; relations between facts (causal, entity)
# close when either fact is superseded (services/store/supersede.py).
RELATION_LINK_TYPES = (CAUSAL, ENTITY)


def set_extraction_state(conn: Connection, memory_id: str, status: str, model: str | None) -> None:
    """Record how a memory's extraction went (`completed`, or `derived` for a
    pipeline fact, which is never extracted again)."""
    conn.execute(
        "UPDATE memories SET extraction_status = ?, extraction_model = ? WHERE id = ?",
        (status, model, memory_id),
    )


class LinkRow(NamedTuple):
    """One memory_links row (evidence: the ids that justify the link)."""

    namespace: str
    from_memory_id: str
    to_memory_id: str
    link_type: str
    job_id: str | None
    created_at: str
    valid_from: str
    weight: float = 1.0
    confidence: float = 1.0
    evidence: Sequence[str] = ()


def insert_links(conn: Connection, rows: Sequence[LinkRow]) -> None:
    """Idempotent: a link written twice stays one row. One statement per chunk
    of rows (the hot path writes a batch's temporal links at once)."""
    repo.insert_rows(
        conn,
        "INSERT INTO memory_links (id, namespace, from_memory_id, to_memory_id, "
        "link_type, job_id, created_at, valid_from, weight, confidence, evidence) VALUES ",
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                repo.new_id(),
                *row[:7],
                row.weight,
                row.confidence,
                json.dumps(list(row.evidence)) if row.evidence else "[]",
            )
            for row in rows
        ],
        " ON CONFLICT DO NOTHING",
    )


def insert_link(
    conn: Connection,
    namespace: str,
    from_memory_id: str,
    to_memory_id: str,
    link_type: str,
    job_id: str | None,
    at: str,
    *,
    valid_from: str | None = None,
    weight: float = 1.0,
    confidence: float = 1.0,
    evidence: Sequence[str] = (),
) -> None:
    """One link; `valid_from`: when the relation started holding (None: `at`)."""
    insert_links(
        conn,
        [
            LinkRow(
                namespace,
                from_memory_id,
                to_memory_id,
                link_type,
                job_id,
                at,
                valid_from or at,
                weight,
                confidence,
                evidence,
            )
        ],
    )


def close_relation_links(conn: Connection, namespace: str, memory_id: str, until: str) -> int:
    """Causal and entity links of a memory whose validity closed at `until`
    end then too (an earlier known end stays)."""
    marks = ", ".join("?" * len(RELATION_LINK_TYPES))
    return int(
        conn.execute(
            "UPDATE memory_links SET valid_until = ? WHERE namespace = ? "
            "AND (from_memory_id = ? OR to_memory_id = ?) "
            f"AND link_type IN ({marks}) AND (valid_until IS NULL OR valid_until > ?)",
            (until, namespace, memory_id, memory_id, *RELATION_LINK_TYPES, until),
        ).rowcount
    )


def session_tails(conn: Connection, namespace: str, session_ids: Sequence[str]) -> dict[str, str]:
    """Each session's last memory on its timeline (the one the session's next
    memory follows), by session id; a session with none is left out. The
    last on the timeline is the newest live memory of the session that is not
    a summary, not a pipeline fact and not a superseding version, and has no
    successor yet. One statement for the batch's sessions, each a walk of the
    memories_session index newest first (the first row usually qualifies)."""
    if not session_ids:
        return {}
    rows = conn.execute(
        f"WITH s(session_id) AS (VALUES {', '.join(['(?)'] * len(session_ids))}) "
        "SELECT s.session_id, (SELECT m.id FROM memories m WHERE m.namespace = ? "
        "AND m.session_id = s.session_id AND m.is_deleted = 0 "
        "AND m.type <> 'session_summary' AND m.source_memory_id IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM memory_links l WHERE l.from_memory_id = m.id "
        "AND l.link_type IN (?, ?) AND l.namespace = m.namespace) "
        "ORDER BY m.created_at DESC, m.id DESC LIMIT 1) FROM s",
        (*session_ids, namespace, TEMPORAL, SUPERSEDES),
    ).fetchall()
    return {row[0]: row[1] for row in rows if row[1] is not None}


def successor_query(namespace: str, memory_id: str) -> repo.Query:
    """The memory that supersedes `memory_id` directly (GetMemory's superseded_by_id)."""
    return (
        "SELECT from_memory_id FROM memory_links "
        "WHERE namespace = ? AND to_memory_id = ? AND link_type = ? "
        "ORDER BY created_at DESC LIMIT 1",
        [namespace, memory_id, SUPERSEDES],
    )
