"""When a conversation session ends, for consolidation (issue 17, seed 003
"Session change detection"): the decisions; the SQL is in session_sql.

A session ends when a new session starts in its namespace (a memory with a
session id the namespace has not seen open: seed 003's "new session_id
detected") or when it has had no new memory for
`sessions.consolidate_after_idle_ms` (the store's idle check). Ending a
session queues its one consolidate_session job in the same transaction as the
write that ends it, so a session ends, and is queued, exactly once. A memory
arriving for a session whose job has finished (completed or dead) reopens it:
it ends again later, and its next job reads only what came after the last
consolidation. Everything here runs inside the writer's transaction: no
awaits, no network.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.storage.connection import Connection
from services.storage.store import session_sql as sql

NEW_SESSION = "new_session"
IDLE = "idle"
IDLE_BATCH = 500  # sessions ended per idle check (the next check takes the rest)


def track(
    conn: Connection, sessions: Iterable[tuple[str, str]], at: str, max_attempts: int
) -> None:
    """New memories of these (namespace, session id) pairs were just written."""
    for namespace, session_id in dict.fromkeys(sessions):
        row = sql.consolidation_row(conn, namespace, session_id)
        if row is None:
            sql.register_session(conn, namespace, session_id, at)
        elif row["ended_at"] is not None and not sql.job_is_open(row):
            sql.touch_session(conn, namespace, session_id, at, reopen=True)
        else:
            # open, or ended with its job still to run (that job reads it)
            sql.touch_session(conn, namespace, session_id, at, reopen=False)
            continue
        # this session (re)started: the namespace's other open sessions have ended
        for other in sql.other_open_sessions(conn, namespace, session_id):
            end(conn, namespace, other, NEW_SESSION, at, max_attempts)


def end(
    conn: Connection, namespace: str, session_id: str, reason: str, at: str, max_attempts: int
) -> str:
    """End an open session: its consolidate_session job, queued now."""
    job_id = sql.enqueue_session_job(
        conn, sql.CONSOLIDATE_JOB, namespace, session_id, max_attempts, at
    )
    sql.end_session(conn, namespace, session_id, reason, job_id, at)
    return job_id


def end_idle(conn: Connection, seen_before: str, at: str, max_attempts: int) -> int:
    """The idle check: end every open session with no memory since `seen_before`."""
    idle = sql.idle_sessions(conn, seen_before, IDLE_BATCH)
    for namespace, session_id in idle:
        end(conn, namespace, session_id, IDLE, at, max_attempts)
    return len(idle)
