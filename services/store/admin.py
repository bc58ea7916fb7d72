"""Store administration for the maintenance service: raw diagnostics counts,
idempotent repairs, and the retention sweep (seed 000 "Retention Worker").

Every repair and every retention step is one short writer transaction that
also writes one `maintenance_audit` row, so no write lock is held across a
whole sweep. Mutations frozen means nothing here writes (the writer refuses).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from services.common import clock
from services.common.config import PIPELINE_OFF_HINT, Config
from services.common.errors import PipelineDisabled
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import admin_sql as sql
from services.storage.store import graph_sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import mutations
from services.store.weak import DecayPolicy, WeakMemories
from services.store.writer import Writer

T = TypeVar("T")
RETENTION_ACTOR = mutations.RETENTION_ACTOR


@dataclass(frozen=True)
class RetentionWindows:
    """seed 002 defaults: tombstones 30 d, history 180 d, completed jobs 14 d,
    dead jobs 30 d; at most `batch_limit` rows per step per sweep."""

    tombstone_days: float = 30
    history_days: float = 180
    completed_job_days: float = 14
    dead_job_days: float = 30
    batch_limit: int = 500


@dataclass(frozen=True)
class OrphanCounts:
    """Rows that point at a memory that is gone, per table (admin_sql.ORPHAN_TABLES);
    every one is 0 unless a write path forgot something or the file was edited."""

    memory_links: int = 0
    entity_mentions: int = 0
    entities: int = 0
    document_chunks: int = 0
    vector_index: int = 0
    fts_entries: int = 0
    jobs: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, name) for name in sql.ORPHAN_TABLES)


@dataclass(frozen=True)
class StoreDiagnostics:
    jobs: dict[tuple[str, str], int]
    total_jobs: int
    dead_jobs: int
    leased_jobs: int
    stale_leases: int
    lease_timeout_ms: int
    active_memories: int
    tombstones: int
    expired_tombstones: int
    fts_rows: int
    fts_missing: int
    fts_orphaned: int
    index_model: str
    vector_rows: int
    embedded_memories: int
    vector_missing: int
    vector_orphaned: int
    db_size_bytes: int
    audit_rows: int
    storage_full_count: int = 0
    last_storage_full_at: str | None = None
    data_dir_free_bytes: int = 0
    orphans: OrphanCounts = OrphanCounts()
    weak_memories: int = 0  # seed 003: below decay_threshold now (services/store/weak.py)

    @property
    def total_memories(self) -> int:
        return self.active_memories + self.tombstones


@dataclass(frozen=True)
class RetentionStep:
    step: str
    removed: int
    entities_removed: int = 0
    relations_removed: int = 0


class StoreAdmin:
    def __init__(
        self,
        writer: Writer,
        reads: ReadPool,
        *,
        lease_timeout_ms: int,
        windows: RetentionWindows,
        database_path: Path | None = None,
        max_job_attempts: int = 3,
        weak: WeakMemories | None = None,
        extraction_enabled: bool = True,
    ) -> None:
        self._writer = writer
        self._extraction_enabled = extraction_enabled
        self._weak = weak or WeakMemories(reads, DecayPolicy())
        self._max_attempts = max_job_attempts
        self._database_path = database_path
        self._reads = reads
        self._lease_timeout_ms = lease_timeout_ms
        self._windows = windows

    # ---- diagnostics -------------------------------------------------------------

    async def diagnostics(self) -> StoreDiagnostics:
        now = clock.now()
        stale_before = clock.to_text(now - timedelta(milliseconds=self._lease_timeout_ms))
        expired_before = clock.days_ago_text(self._windows.tombstone_days, now)
        jobs = {
            (row[0], row[1]): int(row[2])
            for row in await self._reads.fetch_all(sql.job_counts_query())
        }
        dialect = self._reads.dialect
        row = await self._reads.fetch_one(
            sql.diagnostics_query(stale_before, expired_before, dialect=dialect)
        )
        orphans = await self._reads.fetch_one(sql.orphans_query(dialect=dialect))

        def by_status(status: str) -> int:
            return sum(n for (_, s), n in jobs.items() if s == status)

        return StoreDiagnostics(
            jobs=jobs,
            total_jobs=sum(jobs.values()),
            dead_jobs=by_status("dead"),
            leased_jobs=by_status("leased"),
            stale_leases=row["stale_leases"],
            lease_timeout_ms=self._lease_timeout_ms,
            active_memories=row["active_memories"],
            tombstones=row["tombstones"],
            expired_tombstones=row["expired_tombstones"],
            fts_rows=row["fts_rows"],
            fts_missing=row["fts_missing"],
            fts_orphaned=row["fts_orphaned"],
            index_model=row["index_model"] or "",
            vector_rows=row["vector_rows"],
            embedded_memories=row["embedded_memories"],
            vector_missing=row["vector_missing"],
            vector_orphaned=row["vector_orphaned"],
            db_size_bytes=row["db_size_bytes"],
            audit_rows=row["audit_rows"],
            storage_full_count=self._writer.storage_full.count,
            last_storage_full_at=self._writer.storage_full.last_at,
            data_dir_free_bytes=self._free_bytes(),
            orphans=OrphanCounts(**{name: int(orphans[name]) for name in sql.ORPHAN_TABLES}),
            weak_memories=await self._weak.count(),
        )

    def _free_bytes(self) -> int:
        """Free space where the database lives (0 when it cannot be read)."""
        if self._database_path is None:
            return 0
        try:
            return shutil.disk_usage(self._database_path.parent).free
        except OSError:
            return 0

    # ---- repairs -------------------------------------------------------------------

    async def requeue_dead_jobs(self) -> tuple[int, int]:
        """(requeued, skipped): skipped jobs have an open twin and stay dead."""

        def operation(conn: Connection, at: str) -> tuple[tuple[int, int], dict[str, Any]]:
            requeued = skipped = 0
            for job_id in sql.dead_job_ids(conn, self._windows.batch_limit):
                if sql.requeue_dead_job(conn, job_id, at):
                    requeued += 1
                else:
                    skipped += 1
            return (requeued, skipped), {"requeued": requeued, "skipped": skipped}

        return await self._audited("requeue_dead_jobs", operation)

    async def release_stale_leases(self) -> int:
        """The job queue's own release, measured from `leased_at`."""

        def operation(conn: Connection, at: str) -> tuple[int, dict[str, Any]]:
            cutoff = clock.to_text(
                clock.from_text(at) - timedelta(milliseconds=self._lease_timeout_ms)
            )
            ended = repo.release_stale_leases(conn, cutoff, at)
            return ended.released, {
                "released": ended.released,
                "dead": ended.dead,
                "lease_timeout_ms": self._lease_timeout_ms,
            }

        return await self._audited("release_stale_leases", operation)

    async def repair_fts(self) -> tuple[int, int, int]:
        """(missing before, orphaned before, entries after) around a rebuild."""

        def operation(conn: Connection, at: str) -> tuple[tuple[int, int, int], dict[str, Any]]:
            missing, orphaned = sql.fts_mismatch(conn)
            rows = sql.rebuild_fts(conn)
            return (missing, orphaned, rows), {
                "missing_before": missing,
                "orphaned_before": orphaned,
                "fts_rows": rows,
            }

        return await self._audited("repair_fts", operation)

    async def repair_vectors(self) -> tuple[int, int]:
        """(removed, added) index rows."""

        def operation(conn: Connection, at: str) -> tuple[tuple[int, int], dict[str, Any]]:
            removed = sql.remove_unbacked_vectors(conn)
            added = sql.add_missing_vectors(conn)
            return (removed, added), {"removed": removed, "added": added}

        return await self._audited("repair_vectors", operation)

    async def backfill_extraction(self, namespace: str) -> tuple[int, int]:
        """(queued, remaining): an `extract` job for each of up to `batch_limit`
        live memories never queued for extraction (remembered while
        `memory.pipelineV2.enabled` was off), oldest first. Each memory gets
        at most one, so calling again until nothing remains always ends.
        Refused (PipelineDisabled) while the pipeline is off: no worker would
        take the jobs. `namespace`: "" for every namespace."""
        if not self._extraction_enabled:
            raise PipelineDisabled("no extraction would run", PIPELINE_OFF_HINT)

        def operation(conn: Connection, at: str) -> tuple[tuple[int, int], dict[str, Any]]:
            targets = sql.never_extracted(conn, namespace, self._windows.batch_limit)
            repo.enqueue_jobs(
                conn,
                [
                    repo.job_row(ns, memory_id, JobKind.EXTRACT, self._max_attempts, at)
                    for ns, memory_id in targets
                ],
            )
            remaining = sql.count_never_extracted(conn, namespace)
            return (len(targets), remaining), {
                "namespace": namespace,
                "queued": len(targets),
                "remaining": remaining,
            }

        return await self._audited("backfill_extraction", operation)

    # ---- retention ------------------------------------------------------------------

    async def sweep_retention(self) -> list[RetentionStep]:
        """The seed's strict order; each step is its own transaction. Pruning weak
        memories (seed 003, only with `memory.decay_prune`) comes first: its
        tombstones then wait out the tombstone window like any other."""
        steps: list[tuple[str, Callable[[Any, str], RetentionStep]]] = [
            *([("weak_memories", self._weak_memories)] if self._weak.policy.prune else []),
            ("expired_memories", self._expired_memories),
            ("graph_links", self._graph_links),
            ("embeddings", self._embeddings),
            ("tombstones", self._tombstones),
            ("history", self._history),
            ("completed_jobs", self._completed_jobs),
            ("dead_jobs", self._dead_jobs),
        ]
        results = []
        for name, step in steps:

            def operation(
                conn: Connection, at: str, step: Callable[[Any, str], RetentionStep] = step
            ) -> tuple[RetentionStep, dict[str, Any]]:
                result = step(conn, at)
                return result, {
                    "removed": result.removed,
                    "entities_removed": result.entities_removed,
                    "relations_removed": result.relations_removed,
                }

            results.append(await self._audited(f"retention:{name}", operation))
        return results

    def _cutoff(self, days: float, at: str) -> str:
        return clock.days_ago_text(days, clock.from_text(at))

    def _weak_memories(self, conn: Connection, at: str) -> RetentionStep:
        return RetentionStep("weak_memories", self._weak.prune(conn, at, self._windows.batch_limit))

    def _expired_memories(self, conn: Connection, at: str) -> RetentionStep:
        """Short-term memories past their expire_time (gone from reads since
        then), removed for good with everything pointing at them; a `purged`
        event each. Long-term memories (no expire_time) are never touched."""
        rows = repo.expired_memories(conn, self._windows.batch_limit)
        purged = mutations.purge_expired(
            conn,
            [mutations.PurgeTarget(r["id"], r["namespace"], r["content_hash"]) for r in rows],
            at,
        )
        return RetentionStep(
            "expired_memories", len(rows), purged.entities_removed, purged.relations_removed
        )

    def _graph_links(self, conn: Connection, at: str) -> RetentionStep:
        cutoff = self._cutoff(self._windows.tombstone_days, at)
        mentions = sql.expired_mentions(conn, cutoff, self._windows.batch_limit)
        for memory_id, entity_id in mentions:
            graph_sql.delete_mention(conn, memory_id, entity_id, at)
        entities, relations = graph_sql.delete_orphaned_entities(
            conn, list(dict.fromkeys(e for _, e in mentions))
        )
        return RetentionStep("graph_links", len(mentions), entities, relations)

    def _embeddings(self, conn: Connection, at: str) -> RetentionStep:
        cutoff = self._cutoff(self._windows.tombstone_days, at)
        removed = sql.delete_expired_embeddings(conn, cutoff, self._windows.batch_limit)
        return RetentionStep("embeddings", removed)

    def _tombstones(self, conn: Connection, at: str) -> RetentionStep:
        """Hard delete; a `purged` history event keeps the id known, so that
        RecoverMemory can say RETENTION_EXPIRED instead of NOT_FOUND."""
        cutoff = self._cutoff(self._windows.tombstone_days, at)
        rows = sql.purgeable_tombstones(conn, cutoff, self._windows.batch_limit)
        mutations.purge(
            conn,
            [mutations.PurgeTarget(r["id"], r["namespace"], r["content_hash"]) for r in rows],
            at,
        )
        repo.insert_history(
            conn,
            [
                repo.history_row(
                    memory_id=row["id"],
                    namespace=row["namespace"],
                    event=mutations.PURGED_EVENT,
                    old_content=None,
                    new_content=None,
                    actor=RETENTION_ACTOR,
                    reason="tombstone retention window expired",
                    metadata={
                        "deleted_at": row["deleted_at"],
                        "tombstone_days": self._windows.tombstone_days,
                    },
                    at=at,
                )
                for row in rows
            ],
        )
        return RetentionStep("tombstones", len(rows))

    def _history(self, conn: Connection, at: str) -> RetentionStep:
        cutoff = self._cutoff(self._windows.history_days, at)
        return RetentionStep(
            "history", sql.delete_old_history(conn, cutoff, self._windows.batch_limit)
        )

    def _completed_jobs(self, conn: Connection, at: str) -> RetentionStep:
        cutoff = self._cutoff(self._windows.completed_job_days, at)
        removed = sql.delete_old_jobs(
            conn, "completed", "completed_at", cutoff, self._windows.batch_limit
        )
        return RetentionStep("completed_jobs", removed)

    def _dead_jobs(self, conn: Connection, at: str) -> RetentionStep:
        cutoff = self._cutoff(self._windows.dead_job_days, at)
        removed = sql.delete_old_jobs(conn, "dead", "failed_at", cutoff, self._windows.batch_limit)
        return RetentionStep("dead_jobs", removed)

    # ---- plumbing ---------------------------------------------------------------------

    async def _audited(
        self, action: str, operation: Callable[[Any, str], tuple[T, dict[str, Any]]]
    ) -> T:
        """Run `operation(conn, now)` in one writer transaction with its audit row."""

        def write(conn: Connection) -> T:
            at = clock.now_text()
            value, audit = operation(conn, at)
            sql.insert_audit(conn, action, audit, at)
            return value

        return await self._writer.submit(write)


def store_admin(writer: Writer, reads: ReadPool, config: Config) -> StoreAdmin:
    """The admin over the store's writer, with the store's own configuration."""
    return StoreAdmin(
        writer,
        reads,
        lease_timeout_ms=config.memory.pipelineV2.leaseTimeoutMs,
        windows=RetentionWindows(
            tombstone_days=config.retention.tombstone_days,
            history_days=config.retention.history_days,
            completed_job_days=config.retention.completed_job_days,
            dead_job_days=config.retention.dead_job_days,
            batch_limit=config.retention.batch_limit,
        ),
        # a Postgres server's disk is not the store's to read: free space unknown (0)
        database_path=Path(config.storage.path) if config.storage.kind == "sqlite" else None,
        max_job_attempts=config.memory.pipelineV2.workerMaxRetries,
        weak=WeakMemories(reads, DecayPolicy.from_config(config)),
        extraction_enabled=config.memory.pipelineV2.enabled,
    )
