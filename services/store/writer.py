"""The single writer: one thread owns the only read-write connection.

Callers submit operations (plain functions of a connection). The thread takes
everything queued, runs it in one `BEGIN IMMEDIATE` transaction, each operation
inside its own savepoint so that one failing operation rolls back only itself,
commits once (group commit), and only then resolves the callers' futures: an
acknowledged write is a committed write.

Savepoints are not free (with FTS5 in the transaction they cost about as much
as the rows themselves), so a group of one runs without one (its failure rolls
back the whole transaction, which holds only it), and operations submitted with
`retryable=True` (no effect outside the connection, safe to run again) run
bare when the whole group is retryable: if one of them fails, the transaction
is rolled back, that operation gets its error and the rest are run again.

A full disk (SQLite's SQLITE_FULL, "database or disk is full"; PostgreSQL's
SQLSTATE 53100 disk_full) fails the whole group with StorageFull
(RESOURCE_EXHAUSTED / STORAGE_FULL): nothing of it was committed and nobody is
acknowledged. The writer counts these refusals for the diagnostics and takes
writes again as soon as there is room; the database is left as it was before
the group.

On PostgreSQL the connection can be lost (a server restart, a failover, a
network cut). The group in flight fails with StorageUnavailable (UNAVAILABLE /
STORAGE_UNAVAILABLE): nobody is acknowledged, and a retry is safe (a loss
during COMMIT may have committed it: Remember's dedup by content makes the
retry a no-op then). The writer does not stop: before its next group it opens
a new connection (`reconnect`), and while that fails each group fails the same
way, so the store comes back by itself when the database does. SQLite's
connection is a file and is never lost.

Mutations frozen (`memory.pipelineV2.mutationsFrozen`) is checked here and
nowhere else: every write of the store goes through this writer, and every
write is refused with UNAVAILABLE / MUTATIONS_FROZEN before it is queued
(memories, vectors and the vector index, documents, graph, access counts,
repairs, retention, backfills), except those submitted with
`while_frozen=True`. Seed 000 makes a frozen pipeline a shadow pipeline
(proposals recorded in `memory_history`, no memory written), so a frozen store
takes exactly these writes, all of them JobQueueService calls:
- leasing `extract` jobs (embed and document jobs are not handed out: their
  results would be writes a frozen store refuses), and renewing, releasing
  and failing any held lease (a failed document job moves its document's
  status with it), including the stale-lease reaper and a restarted worker's
  release of its previous instance's leases;
- CompleteExtractJob in shadow mode: one audit row per proposal in
  `memory_history` and the job's completion; no memory row, vector, graph row
  or extraction status changes.
Reads (the read pool) go on.

`submit_batched` items of the same batch function that land in one group run
as one call (Remember: one multi-row INSERT per table for the whole group).
While one group commits, the next one queues up, so throughput grows with
concurrency instead of dying under it.

On SQLite the writer also keeps the WAL bounded (WalLimit, storage.wal_restart_mb):
SQLite's automatic checkpoints are passive, and a WAL can only start over once a
checkpoint has copied every frame while no reader holds an older snapshot.
Search's Recalls, always several in flight, overlap without a gap, so passive
checkpoints never get there and the WAL grows without bound ("checkpoint
starvation"). Past the limit the writer, between groups (no write in flight),
runs `wal_checkpoint(RESTART)`, which waits a bounded time for the older
snapshots to end (newer readers read the database file and do not block it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from services.common import clock
from services.common.errors import EngramError, ErrorKind, MutationsFrozen, StorageUnavailable
from services.common.metrics import (
    WRITER_COMMIT_SECONDS,
    WRITER_GROUP_SIZE,
    WRITER_WAL_BYTES,
    WRITER_WAL_RESTARTS,
)
from services.storage import sqlite, transactions
from services.storage.connection import Connection
from services.storage.db import MIB

log = logging.getLogger("engram.store.writer")

T = TypeVar("T")
ItemT = TypeVar("ItemT")
Operation = Callable[[Any], T]
# Runs many callers' items in one call: (connection, items) -> one result per item.
BatchOperation = Callable[[Any, list[ItemT]], list[T]]


@dataclass(slots=True)
class _Pending:
    operation: Operation[Any] | None
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    retryable: bool = False
    batch: BatchOperation[Any, Any] | None = None
    item: Any = None


_STOP = object()
# Under concurrent load the writer waits up to this share of its recent commit
# time (at most MAX_LINGER_SECONDS) for more operations before committing.
LINGER_SHARE = 1.0
MAX_LINGER_SECONDS = 0.002


class WriterClosed(RuntimeError):
    pass


SQLITE_FULL = 13  # the primary result code; extended codes keep it in the low byte


class StorageFull(EngramError):
    kind = ErrorKind.RESOURCE_EXHAUSTED
    reason = "STORAGE_FULL"

    def __init__(self) -> None:
        super().__init__("the store's disk is full (database or disk is full); nothing was written")


PG_DISK_FULL = "53100"  # SQLSTATE disk_full


def is_storage_full(error: BaseException) -> bool:
    """SQLite's SQLITE_FULL or PostgreSQL's disk_full, by the error's own code."""
    if getattr(error, "sqlstate", None) == PG_DISK_FULL:
        return True
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == SQLITE_FULL


LOST_CONNECTION = "the store lost its database connection; this write was not acknowledged, retry"


@dataclass(frozen=True)
class StorageFullStats:
    """Groups refused because the disk was full, since the writer started."""

    count: int = 0
    last_at: str | None = None  # clock text of the last refusal


def connection_lost(conn: Connection) -> bool:
    """Whether the server dropped `conn` (SqliteApi.broken; SQLite never does)."""
    return bool(getattr(conn, "broken", False))


# How long a forced checkpoint waits for read snapshots to end (writes wait
# meanwhile). RESTART waits for every snapshot older than its last frame, then for
# those begun while it copied: about two Recalls' time, which load stretches
# (Recall p50 near 1 s, p99 3 s at 8 in flight on 2 busy cores). So the wait
# adapts: it starts at the least, doubles (up to the most) each time snapshots
# outlast it, and halves after a restart that needed under half of it. A try
# given up is retried once the WAL has grown by another limit: writes pause at
# most one wait per storage.wal_restart_mb written, and the WAL stays within
# (2 + tries given up in a row) x the limit (at most 4 in a row while no
# snapshot outlasts the most).
WAL_RESTART_LEAST_WAIT_MS = 200
WAL_RESTART_MOST_WAIT_MS = 3200


class WalLimit:
    """Restarts a SQLite WAL that grew past `limit_mb` MiB (module docstring).

    Run on the writer thread between groups. `journal_size_limit` is set to the
    limit, so the first commit after a restart cuts the file back to it and the
    WAL is reused from its start: the file's size then stays near the limit,
    which is what is compared (one stat() a group)."""

    def __init__(self, connection: Any, limit_mb: int) -> None:
        self._limit = limit_mb * MIB
        # the main database's file, as SQLite opened it (absolute)
        self._wal_path = sqlite.main_file(connection) + "-wal"
        sqlite.set_journal_size_limit(connection, self._limit)
        self._next_try = self._limit  # WAL bytes past which the next checkpoint is forced
        self._wait_ms = WAL_RESTART_LEAST_WAIT_MS

    def after_group(self, conn: Connection) -> None:
        try:
            size = os.stat(self._wal_path).st_size
        except FileNotFoundError:  # no WAL yet
            size = 0
        WRITER_WAL_BYTES.set(size)
        if size <= self._limit:  # restarted (by us or SQLite) or never grown
            self._next_try = self._limit
        if size <= self._next_try:
            return
        started = time.perf_counter()
        restarted = self._restart(conn, size)
        took_ms = (time.perf_counter() - started) * 1000
        if restarted:
            self._next_try = self._limit
            if took_ms < self._wait_ms / 2:
                self._wait_ms = max(self._wait_ms // 2, WAL_RESTART_LEAST_WAIT_MS)
        else:
            self._next_try = size + self._limit
            self._wait_ms = min(self._wait_ms * 2, WAL_RESTART_MOST_WAIT_MS)

    def _restart(self, conn: Connection, size: int) -> bool:
        """Whether the WAL was restarted (its next write starts at its beginning)."""
        busy_timeout = sqlite.busy_timeout(conn)
        try:
            sqlite.set_busy_timeout(conn, self._wait_ms)
            busy, frames, copied = sqlite.restart_wal(conn)
        except Exception as exc:  # a full disk, an I/O error: the next group writes on
            WRITER_WAL_RESTARTS.labels("failed").inc()
            log.warning(
                "forced WAL checkpoint failed; retrying later",
                extra={"error": str(exc), "wal_bytes": size},
            )
            return False
        finally:
            sqlite.set_busy_timeout(conn, busy_timeout)
        if busy:  # snapshots outlasted the wait: frames copied so far stay copied
            WRITER_WAL_RESTARTS.labels("gave_up").inc()
            log.info(
                "WAL past storage.wal_restart_mb; read snapshots outlasted the wait, retrying later",
                extra={
                    "wal_bytes": size,
                    "frames": frames,
                    "copied": copied,
                    "wait_ms": self._wait_ms,
                },
            )
            return False
        WRITER_WAL_RESTARTS.labels("restarted").inc()
        return True


class Writer:
    def __init__(
        self,
        connection: Any,
        *,
        max_group: int = 512,
        mutations_frozen: bool = False,
        reconnect: Callable[[], Any] | None = None,
        wal_restart_mb: int = 0,
    ) -> None:
        """`reconnect` opens a replacement for a lost connection (PostgreSQL);
        `wal_restart_mb` bounds a SQLite WAL (WalLimit; 0 = not)."""
        self._conn = connection
        self._wal_limit = WalLimit(connection, wal_restart_mb) if wal_restart_mb > 0 else None
        self._reconnect = reconnect
        self._max_group = max_group
        self._frozen = mutations_frozen
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._commit_seconds = 0.0  # moving average of a group's commit time
        self._linger = 0.0
        self._storage_full = StorageFullStats()
        self._commit_listeners: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name="engram-writer", daemon=True)
        self._thread.start()

    async def submit(
        self, operation: Operation[T], *, retryable: bool = False, while_frozen: bool = False
    ) -> T:
        """Run `operation(connection)` in a write transaction; return after commit.

        `retryable`: the operation only touches the connection, so the writer may
        run it again after rolling back a group that another operation broke.
        `while_frozen`: one of the writes a frozen store takes (the module
        docstring lists them); every other write is refused while frozen."""
        self.check_writable(while_frozen=while_frozen)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Pending(operation, future, loop, retryable))
        return await future

    async def submit_batched(self, batch: BatchOperation[ItemT, T], item: ItemT) -> T:
        """Run `batch(connection, [item, ...])` once for every item of the same
        `batch` that lands in one group; return this item's result after commit.

        One call per group instead of one per caller: each SQL statement the writer
        runs hands the GIL back and forth with the event loop, so fewer, larger
        statements keep both threads busier with real work. `batch` must only
        touch the connection (it may be run again) and return results in order;
        if it raises, its items are run again one by one to find the culprit."""
        self.check_writable()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Pending(None, future, loop, True, batch, item))
        return await future

    def check_writable(self, *, while_frozen: bool = False) -> None:
        """Raise what a write would get now: MutationsFrozen when the store is
        frozen (unless `while_frozen`), WriterClosed while it shuts down. For
        callers that must refuse before they start (an import stream), as
        submit does for every write."""
        if self._frozen and not while_frozen:
            raise MutationsFrozen()
        if self._closed:
            raise WriterClosed("the store is shutting down")

    def on_commit(self, listener: Callable[[], None]) -> None:
        """Call `listener()` on the writer thread after every group (committed or
        not): a cheap hint that data may have changed, for long polls. It must be
        quick and thread-safe (loop.call_soon_threadsafe)."""
        self._commit_listeners.append(listener)

    @property
    def storage_full(self) -> StorageFullStats:
        return self._storage_full

    def close(self) -> None:
        """Finish everything already queued, then stop the thread and close."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        stopping = False
        concurrent = False  # did the last group see more than one caller?
        while not stopping:
            group: list[_Pending] = []
            item = self._queue.get()
            # Under concurrent load, wait briefly for more callers before
            # committing: otherwise the first arrival after a commit gets a group
            # (and an fsync) of its own while the rest queue behind it. A lone
            # caller does not wait: `concurrent` stays False (only the first
            # group after a burst may wait once, at most MAX_LINGER_SECONDS).
            # The wait is a plain sleep: waking on every arrival would cost a
            # thread switch (and a GIL hand-off) per caller.
            if concurrent and self._linger > 0:
                time.sleep(self._linger)
            while True:
                if item is _STOP:
                    stopping = True
                    break
                group.append(item)
                if len(group) >= self._max_group:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if group:
                started = time.perf_counter()
                self._commit_group(group)
                for listener in self._commit_listeners:
                    try:
                        listener()
                    except Exception:  # a hint must never stop the writer
                        log.exception("commit listener failed")
                elapsed = time.perf_counter() - started
                WRITER_GROUP_SIZE.observe(len(group))
                WRITER_COMMIT_SECONDS.observe(elapsed)
                concurrent = len(group) > 1 or not self._queue.empty()
                # Linger for at most a fraction of a recent commit's time.
                self._commit_seconds += (elapsed - self._commit_seconds) * 0.2
                self._linger = min(self._commit_seconds * LINGER_SHARE, MAX_LINGER_SECONDS)
                if self._wal_limit is not None:  # after the timing: not a group's cost
                    try:
                        self._wal_limit.after_group(self._conn)
                    except Exception:  # never stop the writer; the next group tries again
                        log.exception("WAL size check failed")

    def _commit_group(self, group: list[_Pending]) -> None:
        if connection_lost(self._conn) and not self._reconnected():
            self._deliver(group, [(None, StorageUnavailable(LOST_CONNECTION))] * len(group))
            return
        units = _units(group)
        if len(group) == 1 or all(p.retryable for p in group):
            self._commit_bare(units)
        else:
            self._deliver(*self._run_with_savepoints(units))

    def _commit_bare(self, units: list[list[_Pending]]) -> None:
        """No savepoints: a unit that raises rolls the transaction back; it gets its
        error (a batch is first split into single items to find the culprit) and
        the others (all retryable, or none left) run again."""
        conn = self._conn
        while units:
            results: list[Any] = []
            failed: int | None = None
            error: BaseException | None = None
            whole: BaseException | None = None
            try:
                transactions.begin(conn)
                for index, unit in enumerate(units):
                    failed = index
                    results.extend(_run_unit(conn, unit))
                failed = None
                transactions.commit(conn)
            except BaseException as exc:
                error = exc
                whole = self._group_error(exc)
                if failed is None and whole is None:
                    log.exception("write transaction failed; nothing in this group was committed")
                _rollback(conn)
            everyone = [p for unit in units for p in unit]
            if error is None:
                self._deliver(everyone, [(result, None) for result in results])
                return
            if whole is not None:  # not this unit's fault: the whole group fails
                self._deliver(everyone, [(None, whole)] * len(everyone))
                return
            if failed is None:  # BEGIN or COMMIT failed: the whole group fails
                self._deliver(everyone, [(None, error)] * len(everyone))
                return
            culprit = units[failed]
            rest = units[:failed] + units[failed + 1 :]
            if len(culprit) > 1:
                units = [*rest, *([p] for p in culprit)]
                continue
            self._deliver(culprit, [(None, error)])
            units = rest

    def _run_with_savepoints(
        self, units: list[list[_Pending]]
    ) -> tuple[list[_Pending], list[tuple[Any, BaseException | None]]]:
        settled: list[_Pending] = []
        outcomes: list[tuple[Any, BaseException | None]] = []
        conn = self._conn
        try:
            transactions.begin(conn)
            for unit in units:
                try:
                    results = _in_savepoint(conn, unit)
                except BaseException as exc:
                    if is_storage_full(exc) or connection_lost(conn):
                        raise
                    if len(unit) == 1:
                        settled.append(unit[0])
                        outcomes.append((None, exc))
                        continue
                    for pending in unit:  # find the culprit: one item at a time
                        settled.append(pending)
                        try:
                            outcomes.append((_in_savepoint(conn, [pending])[0], None))
                        except BaseException as item_exc:
                            if is_storage_full(item_exc) or connection_lost(conn):
                                raise
                            outcomes.append((None, item_exc))
                    continue
                settled.extend(unit)
                outcomes.extend((result, None) for result in results)
            transactions.commit(conn)
        except BaseException as exc:
            whole = self._group_error(exc)
            if whole is None:
                log.exception("write transaction failed; nothing in this group was committed")
            error: BaseException = exc if whole is None else whole
            _rollback(conn)
            settled = [p for unit in units for p in unit]
            outcomes = [(None, error)] * len(settled)
        return settled, outcomes

    def _reconnected(self) -> bool:
        """Replace the lost connection; False (logged) when that fails too."""
        if self._reconnect is None:
            log.error("database connection lost and no way to reopen it")
            return False
        try:
            fresh = self._reconnect()
        except Exception as exc:
            log.error("database connection lost; reconnecting failed", extra={"error": str(exc)})
            return False
        old, self._conn = self._conn, fresh
        with contextlib.suppress(Exception):  # already gone
            old.close()
        log.warning("database connection lost; reconnected")
        return True

    def _group_error(self, error: BaseException) -> BaseException | None:
        """What the whole group fails with when `error` is not one operation's
        fault (a full disk, a lost connection); None when it may be."""
        if is_storage_full(error):
            return self._refused_for_full_disk(error)
        if connection_lost(self._conn):
            log.error(
                "database connection lost: nothing in this group was acknowledged",
                extra={"error": str(error)},
            )
            return StorageUnavailable(LOST_CONNECTION)
        return None

    def _refused_for_full_disk(self, error: BaseException) -> StorageFull:
        """Count the refusal (for diagnostics) and say it once in the log."""
        self._storage_full = StorageFullStats(self._storage_full.count + 1, clock.now_text())
        log.warning(
            "disk full: write refused, nothing in this group was committed",
            extra={"error": str(error), "refusals": self._storage_full.count},
        )
        return StorageFull()

    @staticmethod
    def _deliver(group: list[_Pending], outcomes: list[tuple[Any, BaseException | None]]) -> None:
        """One wake-up per event loop for the whole group, not one per caller."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Any, Any]]] = {}
        for pending, (result, error) in zip(group, outcomes, strict=True):
            by_loop.setdefault(pending.loop, []).append((pending.future, result, error))
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, settled)
            except RuntimeError:  # the caller's loop is gone; the write stands
                log.warning("writer result undeliverable: event loop closed")


def _rollback(conn: Connection) -> None:
    """Undo what is left of a failed transaction (SQLite may already have; a
    lost connection took it with it)."""
    if connection_lost(conn) or not conn.in_transaction:
        return
    try:
        transactions.rollback(conn)
    except Exception:
        log.exception("rollback failed")


def _units(group: list[_Pending]) -> list[list[_Pending]]:
    """The group as units of work: each plain operation alone, every item of one
    batch operation together (at the place of its first item)."""
    units: list[list[_Pending]] = []
    batches: dict[Any, list[_Pending]] = {}
    for pending in group:
        if pending.batch is None:
            units.append([pending])
            continue
        unit = batches.get(pending.batch)
        if unit is None:
            unit = batches[pending.batch] = []
            units.append(unit)
        unit.append(pending)
    return units


def _run_unit(conn: Connection, unit: list[_Pending]) -> list[Any]:
    first = unit[0]
    if first.batch is None:
        assert first.operation is not None
        return [first.operation(conn)]
    results = first.batch(conn, [p.item for p in unit])
    if len(results) != len(unit):
        raise RuntimeError(f"batch operation returned {len(results)} results for {len(unit)} items")
    return results


def _in_savepoint(conn: Connection, unit: list[_Pending]) -> list[Any]:
    """The unit's results; on error, the unit's writes are undone and it raises."""
    transactions.savepoint(conn)
    try:
        results = _run_unit(conn, unit)
    except BaseException:
        transactions.undo_unit(conn)
        raise
    transactions.release(conn)
    return results


def _settle_all(settled: list[tuple[Any, Any, Any]]) -> None:
    for future, result, error in settled:
        _settle(future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
