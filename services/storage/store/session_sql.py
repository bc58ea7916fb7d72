"""The SQL of conversation sessions: transcripts, summaries and summarize jobs.
Write functions take the writer's connection; reads are (sql, params). One
text for SQLite and Postgres, except where a job's JSON payload is read."""

from __future__ import annotations

import json
from typing import Any

from services.common.memory_record import SESSION_SUMMARY_TYPE
from services.storage.connection import Connection
from services.storage.dialect import dialect_of
from services.storage.memory_filter_sql import live_sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind

SUMMARY_TYPE = SESSION_SUMMARY_TYPE
SUMMARIZE_JOB = JobKind.SUMMARIZE_SESSION


def turns(conn: Connection, namespace: str, session_id: str, limit: int) -> list[Any]:
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


def turn_count(conn: Connection, namespace: str, session_id: str) -> int:
    return int(
        conn.execute(
            "SELECT count(*) FROM memories m WHERE m.namespace = ? AND m.session_id = ? "
            f"AND {live_sql('m')} AND m.expire_at IS NOT NULL AND m.type != ?",
            (namespace, session_id, SUMMARY_TYPE),
        ).fetchone()[0]
    )


def summaries(conn: Connection, namespace: str, session_id: str) -> list[Any]:
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


def _payload_session_id(conn: Connection) -> str:
    """The session id in a job's JSON payload (TEXT on both backends)."""
    return dialect_of(conn).choose(
        sqlite="json_extract(payload, '$.session_id')",
        postgres="(payload::jsonb ->> 'session_id')",
    )


def pending_summarize_job(conn: Connection, namespace: str, session_id: str) -> str | None:
    row = conn.execute(
        "SELECT id FROM memory_jobs WHERE job_type = ? AND status = 'pending' "
        f"AND namespace = ? AND {_payload_session_id(conn)} = ? LIMIT 1",
        (SUMMARIZE_JOB, namespace, session_id),
    ).fetchone()
    return None if row is None else str(row[0])


def enqueue_session_job(
    conn: Connection, job_type: str, namespace: str, session_id: str, max_attempts: int, at: str
) -> str:
    """Queue a session job (SUMMARIZE_JOB or CONSOLIDATE_JOB): its payload names the session."""
    job_id = repo.new_id()
    conn.execute(
        "INSERT INTO memory_jobs (id, namespace, job_type, payload, max_attempts, "
        "available_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            job_id,
            namespace,
            job_type,
            json.dumps({"session_id": session_id}),
            max_attempts,
            at,
            at,
            at,
        ),
    )
    return job_id


def job_payload(conn: Connection, job_id: str) -> dict[str, Any]:
    row = conn.execute("SELECT payload FROM memory_jobs WHERE id = ?", (job_id,)).fetchone()
    return dict(json.loads(row[0])) if row is not None and row[0] else {}


def set_job_payload(conn: Connection, job_id: str, payload: dict[str, Any]) -> None:
    conn.execute("UPDATE memory_jobs SET payload = ? WHERE id = ?", (json.dumps(payload), job_id))


# ---- consolidation (issue 17, seed 003 `sessions_consolidations`) ------------------------

CONSOLIDATE_JOB = JobKind.CONSOLIDATE_SESSION
# The open job states: a session whose job is in one of them is not reopened.
_OPEN_JOB = ("pending", "leased")


def consolidation_row(conn: Connection, namespace: str, session_id: str) -> Any:
    return conn.execute(
        "SELECT s.*, j.status AS job_status FROM session_consolidations s "
        "LEFT JOIN memory_jobs j ON j.id = s.job_id "
        "WHERE s.namespace = ? AND s.session_id = ?",
        (namespace, session_id),
    ).fetchone()


def consolidation_query(namespace: str, session_id: str) -> tuple[str, list[Any]]:
    """The session's lifecycle row with its job's status and error (a read)."""
    return (
        "SELECT s.*, j.status AS job_status, j.error AS job_error, j.attempts AS job_attempts "
        "FROM session_consolidations s LEFT JOIN memory_jobs j ON j.id = s.job_id "
        "WHERE s.namespace = ? AND s.session_id = ?",
        [namespace, session_id],
    )


def job_is_open(row: Any) -> bool:
    return row["job_status"] in _OPEN_JOB


def register_session(conn: Connection, namespace: str, session_id: str, at: str) -> None:
    conn.execute(
        "INSERT INTO session_consolidations (namespace, session_id, first_seen_at, "
        "last_seen_at) VALUES (?, ?, ?, ?)",
        (namespace, session_id, at, at),
    )


def touch_session(
    conn: Connection, namespace: str, session_id: str, at: str, *, reopen: bool
) -> None:
    """A new memory of the session: seen now; `reopen` clears its end."""
    reopened = ", ended_at = NULL, end_reason = NULL, job_id = NULL" if reopen else ""
    conn.execute(
        "UPDATE session_consolidations SET last_seen_at = "
        f"CASE WHEN last_seen_at > ? THEN last_seen_at ELSE ? END{reopened} "
        "WHERE namespace = ? AND session_id = ?",
        (at, at, namespace, session_id),
    )


def other_open_sessions(conn: Connection, namespace: str, session_id: str) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT session_id FROM session_consolidations WHERE namespace = ? "
            "AND ended_at IS NULL AND session_id != ? ORDER BY first_seen_at",
            (namespace, session_id),
        )
    ]


def idle_sessions(conn: Connection, seen_before: str, limit: int) -> list[tuple[str, str]]:
    """(namespace, session id) of open sessions with no memory since `seen_before`."""
    return [
        (row[0], row[1])
        for row in conn.execute(
            "SELECT namespace, session_id FROM session_consolidations "
            "WHERE ended_at IS NULL AND last_seen_at < ? ORDER BY last_seen_at LIMIT ?",
            (seen_before, limit),
        )
    ]


def end_session(
    conn: Connection, namespace: str, session_id: str, reason: str, job_id: str, at: str
) -> None:
    conn.execute(
        "UPDATE session_consolidations SET ended_at = ?, end_reason = ?, job_id = ? "
        "WHERE namespace = ? AND session_id = ?",
        (at, reason, job_id, namespace, session_id),
    )


def session_memories(
    conn: Connection, namespace: str, session_id: str, after: str | None, limit: int
) -> list[Any]:
    """The session's live memories (short- and long-term, its summaries
    excepted) created after `after`, oldest first, at most `limit`."""
    return list(
        conn.execute(
            "SELECT m.id, m.content, m.who, m.type, m.created_at, m.event_time "
            "FROM memories m WHERE m.namespace = ? AND m.session_id = ? "
            f"AND {live_sql('m')} AND m.type != ? AND m.created_at > ? "
            "ORDER BY m.created_at, m.id LIMIT ?",
            (namespace, session_id, SUMMARY_TYPE, after or "", limit),
        ).fetchall()
    )


def live_session_memories(
    conn: Connection, namespace: str, session_id: str, ids: list[str]
) -> dict[str, Any]:
    """Those of `ids` that are live memories of the session, by id."""
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = conn.execute(
        "SELECT m.id, m.event_time FROM memories m WHERE m.namespace = ? AND m.session_id = ? "
        f"AND {live_sql('m')} AND m.id IN ({marks})",
        (namespace, session_id, *ids),
    ).fetchall()
    return {row["id"]: row for row in rows}


def mark_consolidated(
    conn: Connection, namespace: str, session_id: str, job_id: str, through: str | None, at: str
) -> None:
    """Done for this job's end; `through` (the newest memory it read) only moves forward."""
    conn.execute(
        "UPDATE session_consolidations SET consolidated_at = ?, "
        "consolidated_through = CASE WHEN coalesce(consolidated_through, '') >= "
        "coalesce(?, '') THEN coalesce(consolidated_through, '') ELSE ? END "
        "WHERE namespace = ? AND session_id = ? AND job_id = ?",
        (at, through, through, namespace, session_id, job_id),
    )


def requeue_session(
    conn: Connection, namespace: str, session_id: str, job_id: str, next_job: str
) -> None:
    """The session's consolidation continues with `next_job` (if `job_id` was its job)."""
    conn.execute(
        "UPDATE session_consolidations SET job_id = ? "
        "WHERE namespace = ? AND session_id = ? AND job_id = ?",
        (next_job, namespace, session_id, job_id),
    )
