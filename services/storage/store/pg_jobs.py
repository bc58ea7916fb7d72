"""The job queue's one Postgres-only part (issue 21; not selectable yet): a
claim for claimers that run at once, each on its own connection.

Every other job-queue function is services/storage/store/repository.py's, run on
Postgres through services/storage/pg.py's SqliteApi; there due_jobs locks the
rows it returns FOR UPDATE SKIP LOCKED and leased_job locks the job it checks.
SQLite serialises every write through one writer, whose group transaction does
a lease's select and update together; here the claim is its own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from services.storage.store import repository

if TYPE_CHECKING:
    from services.storage.pg import SqliteApi


def claim(
    conn: SqliteApi,
    job_type: str,
    namespaces: Sequence[str],
    now: str,
    limit: int,
    holder: tuple[str, str] | None = None,
) -> list[tuple[Any, str]]:
    """Lease up to `limit` due jobs in one transaction: (job row, lease token)
    each; jobs another claimer holds are skipped, not waited for. The core of
    services/store/jobs.py's lease, without its per-type skips (a deleted
    memory's job, a session without turns)."""
    with conn.transaction():
        leased = []
        for row in repository.due_jobs(conn, job_type, namespaces, now, limit):
            token = uuid.uuid4().hex
            repository.mark_leased(conn, row["id"], token, now, holder)
            leased.append((row, token))
        return leased
