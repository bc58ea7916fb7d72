"""The job queue and the vector index (seed 000 "Worker Model").

Leases are atomic (one write transaction selects and marks), every later call
must present the lease token, and job results are applied in the same
transaction that completes the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from services.common import clock
from services.common.backoff import backoff_s
from services.common.errors import (
    FailedPrecondition,
)
from services.common.memory_record import may_merge
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import document_sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import consolidation, mutations, sessions
from services.store.writer import Writer

MAX_BATCH = 500
MAX_ERROR_CHARS = 2000
MAX_WORKER_NAME_CHARS = 200
MAX_INSTANCE_ID_CHARS = 100
MAX_LEASE_WAIT_S = 60.0


@dataclass(frozen=True)
class LeasedJob:
    id: str
    job_type: str
    namespace: str
    memory_id: str
    lease_token: str
    attempts: int
    max_attempts: int
    content: str
    content_hash: str
    document_id: str = ""
    session_id: str = ""


@dataclass(frozen=True)
class LeaseHolder:
    """Who takes a lease: a worker's stable name and its current process instance."""

    worker_name: str
    instance_id: str


@dataclass(frozen=True)
class EmbedResult:
    job_id: str
    lease_token: str
    content_hash: str
    vector: Sequence[float]
    # its sentences' vectors, concatenated (empty: a single sentence)
    parts: Sequence[float] = ()


@dataclass(frozen=True)
class EmbedCompletion:
    """CompleteEmbedJobs, checked (services/store/job_requests.py): each result
    with its vector normalised and packed."""

    model: str
    results: tuple[tuple[EmbedResult, mutations.SuppliedVector], ...]
    dimensions: int | None  # the vectors' one size (None: no result)


@dataclass(frozen=True)
class QueueStats:
    counts: dict[tuple[str, str], int]
    oldest_pending: str | None
    index_model: str
    index_dimensions: int
    indexed_memories: int
    live_memories: int


# ---- job kinds ---------------------------------------------------------------------
#
# What leasing does with each kind: a due job's lease content, or its end when
# there is nothing left to do. A handler returns (session id, content) for a
# job to lease, or None after completing the job with the reason it was skipped.

LeaseContent = Callable[[Any, Any, str], tuple[str, str] | None]


def _memory_content(conn: Connection, row: Any, at: str) -> tuple[str, str] | None:
    """A job about its memory's current content: one whose memory is gone is
    finished, not leased."""
    if row["content"] is None or row["is_deleted"]:
        repo.complete_job(conn, row["id"], at, '{"skipped":"memory deleted"}')
        return None
    return "", row["content"]


def _source_memory(conn: Connection, row: Any, at: str) -> tuple[str, str] | None:
    """An extract job: leased with its memory's content as it is."""
    return "", row["content"] or ""


def _document(conn: Connection, row: Any, at: str) -> tuple[str, str] | None:
    if not row["has_document"]:
        repo.complete_job(conn, row["id"], at, '{"skipped":"document deleted"}')
        return None
    return "", row["content"] or ""


def _session_transcript(conn: Connection, row: Any, at: str) -> tuple[str, str] | None:
    session_id, content = sessions.transcript(conn, row["id"], row["namespace"])
    if not content:
        repo.complete_job(conn, row["id"], at, '{"skipped":"no live turns"}')
        return None
    return session_id, content


def _session_memories(conn: Connection, row: Any, at: str) -> tuple[str, str] | None:
    session_id, content = consolidation.lease_content(conn, row["id"], row["namespace"])
    if not content:
        consolidation.nothing_to_consolidate(conn, row["id"], row["namespace"], at)
        return None
    return session_id, content


@dataclass(frozen=True)
class KindRules:
    """How the queue leases one kind of job. `while_frozen`: a frozen store
    still hands it out (an extract job completes in shadow mode); the other
    kinds' results it could not take, so it refuses their leases."""

    lease_content: LeaseContent
    while_frozen: bool = False


KINDS: dict[JobKind, KindRules] = {
    JobKind.EMBED: KindRules(_memory_content),
    JobKind.EXTRACT: KindRules(_source_memory, while_frozen=True),
    JobKind.DOCUMENT_INGEST: KindRules(_document),
    JobKind.SUMMARIZE_SESSION: KindRules(_session_transcript),
    JobKind.NEAR_DUPLICATE: KindRules(_memory_content),
    JobKind.CONSOLIDATE_SESSION: KindRules(_session_memories),
}


class JobQueue:
    def __init__(
        self,
        writer: Writer,
        reads: ReadPool,
        *,
        lease_timeout_ms: int,
        max_job_attempts: int,
        near_duplicates: bool = False,
    ) -> None:
        """`near_duplicates`: an embedded memory gets a near_duplicate job (`dedup.enabled`)."""
        self._writer = writer
        self._reads = reads
        self._lease_timeout_ms = lease_timeout_ms
        self._max_attempts = max_job_attempts
        self._near_duplicates = near_duplicates
        # long-polling leases wait on these; every writer commit settles them
        self._commit_waiters: set[asyncio.Future[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        writer.on_commit(self._committed)

    # ---- long polls ------------------------------------------------------------------

    def _committed(self) -> None:
        """On the writer thread, after each group: wake the long polls."""
        loop = self._loop
        if loop is not None and self._commit_waiters:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self._wake_waiters)

    def _wake_waiters(self) -> None:
        for future in self._commit_waiters:
            if not future.done():
                future.set_result(None)
        self._commit_waiters.clear()

    def _next_commit(self) -> asyncio.Future[None]:
        """A future settled by the next commit (registered now, so a commit that
        lands while the caller looks at the queue is not missed)."""
        self._loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = self._loop.create_future()
        self._commit_waiters.add(future)
        return future

    def stop_waiting(self) -> None:
        """Shutdown: every long poll answers (empty) now, and new ones do not wait."""
        self._closing = True
        self._wake_waiters()

    # ---- index model -----------------------------------------------------------

    async def adopt_index_model(self, model: str | None) -> int:
        """Make `model` the vector index's model. On a change the index is emptied,
        refilled from the vectors of the new model each namespace stored for
        itself, and every memory still without one gets an embed job. Returns
        the number of jobs queued. Nothing is written when the model is already
        the index's (so a frozen store starts as long as the model is unchanged)."""
        if model is None:
            return 0
        current = await self._reads.fetch_one(repo.index_model_query())
        if current is not None and current[0] == model:
            return 0

        def operation(conn: Connection) -> int:
            current = repo.index_model(conn)
            if current is not None and current[0] == model:
                return 0
            at = clock.now_text()
            repo.clear_vector_index(conn)
            repo.set_index_model(conn, model, repo.embedding_dimensions(conn, model), at)
            repo.index_all_embedded(conn)
            return repo.requeue_unembedded(conn, self._max_attempts, at)

        return await self._writer.submit(operation)

    # ---- leasing -------------------------------------------------------------------

    async def lease(
        self,
        job_type: JobKind,
        max_jobs: int,
        namespaces: Sequence[str],
        holder: LeaseHolder | None = None,
        wait_s: float = 0.0,
    ) -> list[LeasedJob]:
        """`holder` None is an anonymous lease (only the stale-lease reaper frees it).
        `wait_s` > 0: when nothing is due, wait that long for a commit that queues
        a due job (a long poll) before answering empty.

        A frozen store hands out only the kinds KINDS marks `while_frozen`.
        The arguments are checked (services/store/job_requests.py)."""
        owner = None if holder is None else (holder.worker_name, holder.instance_id)
        if wait_s <= 0 or self._closing:
            return await self._lease_now(job_type, max_jobs, namespaces, owner)
        deadline = asyncio.get_running_loop().time() + wait_s
        woken = self._next_commit()
        try:
            while True:
                jobs = await self._lease_now(job_type, max_jobs, namespaces, owner)
                if jobs:
                    return jobs
                # Wait for a commit after which a job is due. Each wake-up costs
                # one indexed read, never the writer (the lease's own commit wakes
                # us too, and finds nothing).
                while True:
                    remaining = deadline - asyncio.get_running_loop().time()
                    if remaining <= 0 or self._closing:
                        return []
                    try:
                        await asyncio.wait_for(woken, remaining)
                    except TimeoutError:
                        return []
                    woken = self._next_commit()
                    due = repo.due_job_query(job_type, namespaces, clock.now_text())
                    if await self._reads.fetch_one(due) is not None:
                        break
        finally:
            woken.cancel()
            self._commit_waiters.discard(woken)

    async def _lease_now(
        self,
        job_type: JobKind,
        max_jobs: int,
        namespaces: Sequence[str],
        owner: tuple[str, str] | None,
    ) -> list[LeasedJob]:

        rules = KINDS[job_type]

        def operation(conn: Connection) -> list[LeasedJob]:
            at = clock.now_text()
            leased: list[LeasedJob] = []
            for row in repo.due_jobs(conn, job_type, namespaces, at, max_jobs):
                prepared = rules.lease_content(conn, row, at)
                if prepared is None:
                    continue
                session_id, content = prepared
                token = uuid.uuid4().hex
                repo.mark_leased(conn, row["id"], token, at, owner)
                leased.append(
                    LeasedJob(
                        id=row["id"],
                        job_type=row["job_type"],
                        namespace=row["namespace"],
                        memory_id=row["memory_id"] or "",
                        lease_token=token,
                        attempts=row["attempts"] + 1,
                        max_attempts=row["max_attempts"],
                        content=content,
                        content_hash=row["content_hash"] or "",
                        document_id=row["document_id"] or "",
                        session_id=session_id,
                    )
                )
            return leased

        return await self._writer.submit(operation, while_frozen=rules.while_frozen)

    async def renew(self, leases: Sequence[tuple[str, str]]) -> list[bool]:
        return await self._for_held_leases(leases, repo.renew_lease)

    async def release(self, leases: Sequence[tuple[str, str]]) -> list[bool]:
        return await self._for_held_leases(leases, repo.release_job)

    async def _for_held_leases(
        self, leases: Sequence[tuple[str, str]], action: Callable[[Any, str, str], None]
    ) -> list[bool]:
        """Apply `action(conn, job_id, now)` to each job still leased with its token."""

        def operation(conn: Connection) -> list[bool]:
            at = clock.now_text()
            outcomes = []
            for job_id, token in leases:
                held = repo.leased_job(conn, job_id, token) is not None
                if held:
                    action(conn, job_id, at)
                outcomes.append(held)
            return outcomes

        return await self._writer.submit(operation, while_frozen=True)

    async def fail(self, failures: Sequence[tuple[str, str, str]]) -> tuple[list[bool], int]:
        def operation(conn: Connection) -> tuple[list[bool], int]:
            now = clock.now()
            at = clock.to_text(now)
            outcomes, dead = [], 0
            for job_id, token, error in failures:
                job = repo.leased_job(conn, job_id, token)
                outcomes.append(job is not None)
                if job is None:
                    continue
                message = error[:MAX_ERROR_CHARS] or "unknown error"
                if job["attempts"] >= job["max_attempts"] and job["document_id"]:
                    # A document out of attempts is a failed document (with
                    # the last error), not a dead job.
                    document_sql.fail_document(conn, job_id, job["document_id"], message, at)
                elif job["attempts"] >= job["max_attempts"]:
                    repo.bury_job(conn, job_id, message, at)
                    dead += 1
                else:
                    # The job's failed attempts so far are its consecutive failures.
                    retry_at = clock.to_text(now + timedelta(seconds=backoff_s(job["attempts"])))
                    repo.retry_job(conn, job_id, message, retry_at, at)
                    if job["document_id"]:
                        document_sql.set_status(conn, job["document_id"], "queued", at)
            return outcomes, dead

        return await self._writer.submit(operation, while_frozen=True)

    async def release_stale(self, lease_timeout_ms: int = 0) -> repo.EndedLeases:
        """End the leases older than the timeout; each used its attempt (the
        job is dead, or its document failed, when that was its last)."""
        timeout = lease_timeout_ms or self._lease_timeout_ms

        def operation(conn: Connection) -> repo.EndedLeases:
            now = clock.now()
            cutoff = clock.to_text(now - timedelta(milliseconds=timeout))
            return repo.release_stale_leases(conn, cutoff, clock.to_text(now))

        return await self._writer.submit(operation, while_frozen=True)

    async def release_prior_instances(self, holder: LeaseHolder) -> repo.EndedLeases:
        """A restarted worker takes back at once what its previous process held.

        Every job leased under `holder.worker_name` by another instance ends:
        the attempt stays used (a job that crashes its worker every time must
        reach the dead letter), so it returns to pending with attempts left,
        else is dead; clearing the token fences the old instance out of it."""

        def operation(conn: Connection) -> repo.EndedLeases:
            return repo.release_prior_instance_leases(
                conn, holder.worker_name, holder.instance_id, clock.now_text()
            )

        return await self._writer.submit(operation, while_frozen=True)

    # ---- results ---------------------------------------------------------------------

    async def complete_embeds(self, done: EmbedCompletion) -> list[bool]:
        """Store vectors, index them, complete the jobs: one transaction."""
        model, prepared, dims = done.model, done.results, done.dimensions

        def operation(conn: Connection) -> list[bool]:
            at = clock.now_text()
            current = repo.index_model(conn)
            mismatch = mutations.index_mismatch(model, dims, current)
            if mismatch == "model":
                raise FailedPrecondition(
                    f"the vector index holds {current[0] if current else 'no'} model, not {model}: "
                    "give the store and the pipeline the same providers.embedding model and "
                    "dimensions",
                    reason="EMBEDDING_MODEL_MISMATCH",
                    metadata={"index_model": current[0] if current else ""},
                )
            if mismatch == "dimensions":
                assert current is not None
                raise FailedPrecondition(
                    f"the vector index has {current[1]} dimensions, not {dims}: the provider "
                    "answered another size for the same model (providers.embedding.dimensions "
                    "sets one; another size is another model and re-embeds)",
                    reason="EMBEDDING_DIMENSIONS_MISMATCH",
                )
            outcomes = []
            for result, vector in prepared:
                job = repo.leased_job(conn, result.job_id, result.lease_token)
                outcomes.append(job is not None)
                if job is None:
                    continue
                # The job's namespace owns the vector: no other namespace reads it.
                mutations.store_vector(conn, job["namespace"], result.content_hash, vector, at)
                repo.complete_job(conn, result.job_id, at)
                memory = repo.memory_state(conn, job["memory_id"])
                if memory is None or memory["is_deleted"]:
                    continue
                # Indexed when the vector is for its content; else (the content
                # changed while this job was leased) a new embed job.
                indexed = mutations.index_or_enqueue(
                    conn,
                    [
                        mutations.vector_target(
                            job["memory_id"],
                            job["namespace"],
                            memory["content_hash"],
                            self._max_attempts,
                            at,
                        )
                    ],
                )
                if (
                    indexed
                    and self._near_duplicates
                    and may_merge(memory["type"], memory["expire_at"] is not None)
                ):
                    # in the queue, not the pipeline's memory: a restart loses no check
                    repo.enqueue_jobs(
                        conn,
                        [
                            repo.job_row(
                                job["namespace"],
                                job["memory_id"],
                                JobKind.NEAR_DUPLICATE,
                                self._max_attempts,
                                at,
                            )
                        ],
                    )
            return outcomes

        return await self._writer.submit(operation)

    # ---- reads -------------------------------------------------------------------------

    async def stats(self) -> QueueStats:
        counts = {
            (row[0], row[1]): row[2]
            for row in await self._reads.fetch_all(repo.queue_counts_query())
        }
        oldest = await self._reads.fetch_one(repo.oldest_pending_query())
        index = await self._reads.fetch_one(repo.index_stats_query())
        return QueueStats(
            counts=counts,
            oldest_pending=oldest[0] if oldest else None,
            index_model=index[0] or "",
            index_dimensions=index[1] or 0,
            indexed_memories=index[2],
            live_memories=index[3],
        )
