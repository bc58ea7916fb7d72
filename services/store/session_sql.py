"""The SQL of conversation sessions: transcripts, summaries and summarize jobs.
Write functions take the writer's connection; reads are (sql, params)."""

from __future__ import annotations

import json
from typing import Any

from services.common.memory_filter import live_sql
from services.common.memory_record import SESSION_SUMMARY_TYPE
from services.store import repository as repo

SUMMARY_TYPE = SESSION_SUMMARY_TYPE
SUMMARIZE_JOB = "summarize_session"


def turns(conn: Any, namespace: str, session_id: str, limit: int) -> list[Any]:
    """The session's newest `limit` live short-term memories (its summaries
    excepted), oldest first."""
    rows = conn.execute(
        "SELECT m.id, m.content, m.who, m.source_type, m.created_at, m.event_time "
        "FROM memories m WHERE m.namespace = ? AND m.session_id = ? "
        f"AND {live_sql('m')} AND m.expire_at IS NOT NULL AND m.type != ? "
        "ORDER BY m.created_at DESC, m.id DESC LIMIT ?",
        (namespace, session_id, SUMMARY_TYPE, limit),
    ).fetchall()
    return list(reversed(rows))


def turn_count(conn: Any, namespace: str, session_id: str) -> int:
    return int(
        conn.execute(
            "SELECT count(*) FROM memories m WHERE m.namespace = ? AND m.session_id = ? "
            f"AND {live_sql('m')} AND m.expire_at IS NOT NULL AND m.type != ?",
            (namespace, session_id, SUMMARY_TYPE),
        ).fetchone()[0]
    )


def summaries(conn: Any, namespace: str, session_id: str) -> list[Any]:
    """The session's live summaries (normally one), newest coverage first."""
    return repo.fetch_all(
        conn,
        (
            f"SELECT {repo.MEMORY_COLUMNS} FROM memories m WHERE m.namespace = ? "
            f"AND m.session_id = ? AND m.type = ? AND {live_sql('m')} "
            "ORDER BY m.event_time DESC",
            [namespace, session_id, SUMMARY_TYPE],
        ),
    )


def pending_summarize_job(conn: Any, namespace: str, session_id: str) -> str | None:
    row = conn.execute(
        "SELECT id FROM memory_jobs WHERE job_type = ? AND status = 'pending' "
        "AND namespace = ? AND json_extract(payload, '$.session_id') = ? LIMIT 1",
        (SUMMARIZE_JOB, namespace, session_id),
    ).fetchone()
    return None if row is None else str(row[0])


def enqueue_summarize_job(
    conn: Any, namespace: str, session_id: str, max_attempts: int, at: str
) -> str:
    job_id = repo.new_id()
    conn.execute(
        "INSERT INTO memory_jobs (id, namespace, job_type, payload, max_attempts, "
        "available_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            job_id,
            namespace,
            SUMMARIZE_JOB,
            json.dumps({"session_id": session_id}),
            max_attempts,
            at,
            at,
            at,
        ),
    )
    return job_id


def job_payload(conn: Any, job_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT payload FROM memory_jobs WHERE id = ?", (job_id,)).fetchone()
    return dict(json.loads(row[0])) if row is not None and row[0] else {}


def set_job_payload(conn: Any, job_id: str, payload: dict[str, Any]) -> None:
    conn.execute("UPDATE memory_jobs SET payload = ? WHERE id = ?", (json.dumps(payload), job_id))
