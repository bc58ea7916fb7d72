"""The job queue's SQL on PostgreSQL (issue 21; not selectable yet): the
functions of services/store/repository.py's job-queue section, with the same
semantics, for a database that several connections write at once.

SQLite serialises every write through one connection, so its lease is a plain
SELECT then UPDATE. Here concurrent claimers are real: due_jobs locks the rows it
returns `FOR UPDATE SKIP LOCKED`, so two transactions never return the same job
and neither waits for the other, and leased_job locks the job it checks, so a
reaper or a second completion cannot change it between the token check and the
caller's update (fencing). Each caller runs a claim, or a check and its action,
in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from services.store.repository import JobRow, Query


def enqueue_jobs(conn: Any, rows: Iterable[JobRow]) -> None:
    """Enqueue dedup: a memory's open job of the same type absorbs the new one
    (memory_jobs_open, a partial unique index, is the conflict)."""
    rows = list(rows)
    if not rows:
        return
    marks = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    conn.execute(
        "INSERT INTO memory_jobs (id, namespace, memory_id, job_type, max_attempts, "
        f"available_at, created_at, updated_at) VALUES {marks} ON CONFLICT DO NOTHING",
        [value for row in rows for value in row],
    )


def due_jobs(
    conn: Any, job_type: str, namespaces: Sequence[str], now: str, limit: int
) -> list[Any]:
    """Up to `limit` due jobs, oldest first, each locked for this transaction;
    jobs another transaction holds are skipped, not waited for. Mark them leased
    in the same transaction."""
    sql = (
        "SELECT j.id, j.job_type, j.namespace, j.memory_id, j.document_id, j.attempts, "
        "j.max_attempts, m.content, m.content_hash, m.is_deleted, "
        "(j.document_id IS NOT NULL AND d.id IS NOT NULL) AS has_document FROM memory_jobs j "
        "LEFT JOIN memories m ON m.id = j.memory_id "
        "LEFT JOIN documents d ON d.id = j.document_id "
        "WHERE j.job_type = %s AND j.status = 'pending' AND j.available_at <= %s"
    )
    params: list[Any] = [job_type, now]
    if namespaces:
        sql += " AND j.namespace = ANY(%s)"
        params.append(list(namespaces))
    sql += " ORDER BY j.available_at, j.created_at LIMIT %s FOR UPDATE OF j SKIP LOCKED"
    params.append(limit)
    return list(conn.execute(sql, params).fetchall())


def due_job_query(job_type: str, namespaces: Sequence[str], now: str) -> Query:
    """Whether a job of this type is due (a long-polling lease looks without locking)."""
    sql = (
        "SELECT 1 FROM memory_jobs WHERE job_type = %s AND status = 'pending' "
        "AND available_at <= %s"
    )
    params: list[Any] = [job_type, now]
    if namespaces:
        sql += " AND namespace = ANY(%s)"
        params.append(list(namespaces))
    return (sql + " LIMIT 1", params)


def mark_leased(
    conn: Any,
    job_id: str,
    token: str,
    at: str,
    holder: tuple[str, str] | None = None,
) -> None:
    """`holder` is (worker name, instance id); None for an anonymous lease."""
    worker, instance = holder if holder is not None else (None, None)
    conn.execute(
        "UPDATE memory_jobs SET status = 'leased', lease_token = %s, leased_at = %s, "
        "attempts = attempts + 1, updated_at = %s, lease_worker = %s, lease_instance = %s "
        "WHERE id = %s",
        (token, at, at, worker, instance, job_id),
    )


def claim(
    conn: Any,
    job_type: str,
    namespaces: Sequence[str],
    now: str,
    limit: int,
    holder: tuple[str, str] | None = None,
) -> list[tuple[Any, str]]:
    """Lease up to `limit` due jobs in one transaction: (job row, lease token)
    each. The core of services/store/jobs.py's lease, without its per-type
    skips (a deleted memory's job, a session without turns)."""
    with conn.transaction():
        leased = []
        for row in due_jobs(conn, job_type, namespaces, now, limit):
            token = uuid.uuid4().hex
            mark_leased(conn, row["id"], token, now, holder)
            leased.append((row, token))
        return leased


def leased_job(conn: Any, job_id: str, token: str) -> Any:
    """The job if it is leased with exactly this token, else None; locked until
    the transaction ends, so the caller's completion, retry or release acts on
    the lease it checked (a stale token changes nothing)."""
    return conn.execute(
        "SELECT id, job_type, namespace, memory_id, document_id, attempts, max_attempts "
        "FROM memory_jobs WHERE id = %s AND status = 'leased' AND lease_token = %s FOR UPDATE",
        (job_id, token),
    ).fetchone()


def complete_job(conn: Any, job_id: str, at: str, result: str | None = None) -> None:
    conn.execute(
        "UPDATE memory_jobs SET status = 'completed', completed_at = %s, updated_at = %s, "
        "lease_token = NULL, result = %s WHERE id = %s",
        (at, at, result, job_id),
    )


def retry_job(conn: Any, job_id: str, error: str, available_at: str, at: str) -> None:
    conn.execute(
        "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, leased_at = NULL, "
        "error = %s, available_at = %s, updated_at = %s WHERE id = %s",
        (error, available_at, at, job_id),
    )


def bury_job(conn: Any, job_id: str, error: str, at: str) -> None:
    conn.execute(
        "UPDATE memory_jobs SET status = 'dead', lease_token = NULL, error = %s, failed_at = %s, "
        "updated_at = %s WHERE id = %s",
        (error, at, at, job_id),
    )


def release_job(conn: Any, job_id: str, at: str) -> None:
    """Back to pending as if the attempt never happened."""
    conn.execute(
        "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, leased_at = NULL, "
        "attempts = greatest(attempts - 1, 0), updated_at = %s WHERE id = %s",
        (at, job_id),
    )


def renew_lease(conn: Any, job_id: str, at: str) -> None:
    conn.execute(
        "UPDATE memory_jobs SET leased_at = %s, updated_at = %s WHERE id = %s", (at, at, job_id)
    )


def release_stale_leases(conn: Any, leased_before: str, at: str) -> int:
    """The reaper. A job whose holder is completing it (leased_job's lock) is
    waited for, then seen completed and left alone."""
    cursor = conn.execute(
        "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, leased_at = NULL, "
        "updated_at = %s WHERE status = 'leased' AND leased_at < %s",
        (at, leased_before),
    )
    return int(cursor.rowcount)


def release_prior_instance_leases(conn: Any, worker: str, instance: str, at: str) -> int:
    """Back to pending, unattempted, every job `worker` leased under another instance."""
    cursor = conn.execute(
        "UPDATE memory_jobs SET status = 'pending', lease_token = NULL, leased_at = NULL, "
        "attempts = greatest(attempts - 1, 0), updated_at = %s "
        "WHERE status = 'leased' AND lease_worker = %s AND lease_instance IS DISTINCT FROM %s",
        (at, worker, instance),
    )
    return int(cursor.rowcount)


def queue_counts_query() -> Query:
    return ("SELECT job_type, status, count(*) FROM memory_jobs GROUP BY job_type, status", [])


def oldest_pending_query() -> Query:
    return ("SELECT min(created_at) FROM memory_jobs WHERE status = 'pending'", [])
