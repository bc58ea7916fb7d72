"""SQL for applying extract-job results that the shared repository does not
already have: extraction state on memories and links between memories."""

from __future__ import annotations

from typing import Any

from services.store import repository as repo

DERIVED_FROM = "derived_from"
SUPERSEDES = "supersedes"
CAUSAL = "causal"  # from a cause to its effect (session consolidation)


def set_extraction_state(conn: Any, memory_id: str, status: str, model: str | None) -> None:
    """Record how a memory's extraction went (`completed`, or `derived` for a
    pipeline fact, which is never extracted again)."""
    conn.execute(
        "UPDATE memories SET extraction_status = ?, extraction_model = ? WHERE id = ?",
        (status, model, memory_id),
    )


def insert_link(
    conn: Any,
    namespace: str,
    from_memory_id: str,
    to_memory_id: str,
    link_type: str,
    job_id: str | None,
    at: str,
) -> None:
    """Idempotent: the same link written twice stays one row."""
    conn.execute(
        "INSERT OR IGNORE INTO memory_links (id, namespace, from_memory_id, to_memory_id, "
        "link_type, job_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (repo.new_id(), namespace, from_memory_id, to_memory_id, link_type, job_id, at),
    )
