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
is rolled back, that operation gets its error and the rest are run again. While one group commits, the next one
queues up, so throughput grows with concurrency instead of dying under it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("engram.store.writer")

T = TypeVar("T")
Operation = Callable[[Any], T]


@dataclass(slots=True)
class _Pending:
    operation: Operation[Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    retryable: bool = False


_STOP = object()
# Under concurrent load the writer waits up to this share of its recent commit
# time (at most MAX_LINGER_SECONDS) for more operations before committing.
LINGER_SHARE = 1.0
MAX_LINGER_SECONDS = 0.002


class WriterClosed(RuntimeError):
    pass


class Writer:
    def __init__(self, connection: Any, *, max_group: int = 512) -> None:
        self._conn = connection
        self._max_group = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._commit_seconds = 0.0  # moving average of a group's commit time
        self._linger = 0.0
        self._thread = threading.Thread(target=self._run, name="engram-writer", daemon=True)
        self._thread.start()

    async def submit(self, operation: Operation[T], *, retryable: bool = False) -> T:
        """Run `operation(connection)` in a write transaction; return after commit.

        `retryable`: the operation only touches the connection, so the writer may
        run it again after rolling back a group that another operation broke."""
        if self._closed:
            raise WriterClosed("the store is shutting down")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Pending(operation, future, loop, retryable))
        return await future

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
            deadline = time.perf_counter() + self._linger if concurrent else 0.0
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
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        break
                    try:
                        item = self._queue.get(timeout=remaining)
                    except queue.Empty:
                        break
            if group:
                started = time.perf_counter()
                self._commit_group(group)
                elapsed = time.perf_counter() - started
                concurrent = len(group) > 1 or not self._queue.empty()
                # Linger for at most a fraction of a recent commit's time.
                self._commit_seconds += (elapsed - self._commit_seconds) * 0.2
                self._linger = min(self._commit_seconds * LINGER_SHARE, MAX_LINGER_SECONDS)

    def _commit_group(self, group: list[_Pending]) -> None:
        if len(group) == 1 or all(p.retryable for p in group):
            self._commit_bare(group)
        else:
            self._deliver(group, self._run_with_savepoints(group))

    def _commit_bare(self, group: list[_Pending]) -> None:
        """No savepoints: an operation that raises rolls the transaction back; it
        gets its error and the others (all retryable, or none left) run again."""
        conn = self._conn
        while group:
            results: list[Any] = []
            failed: int | None = None
            error: BaseException | None = None
            try:
                conn.execute("BEGIN IMMEDIATE")
                for index, pending in enumerate(group):
                    failed = index
                    results.append(pending.operation(conn))
                failed = None
                conn.execute("COMMIT")
            except BaseException as exc:
                error = exc
                if failed is None:
                    log.exception("write transaction failed; nothing in this group was committed")
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            if error is None:
                self._deliver(group, [(result, None) for result in results])
                return
            if failed is None:  # BEGIN or COMMIT failed: the whole group fails
                self._deliver(group, [(None, error)] * len(group))
                return
            self._deliver([group[failed]], [(None, error)])
            group = group[:failed] + group[failed + 1 :]

    def _run_with_savepoints(self, group: list[_Pending]) -> list[tuple[Any, BaseException | None]]:
        outcomes: list[tuple[Any, BaseException | None]] = []
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for pending in group:
                conn.execute("SAVEPOINT op")
                try:
                    result = pending.operation(conn)
                except BaseException as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append((None, exc))
                else:
                    conn.execute("RELEASE op")
                    outcomes.append((result, None))
            conn.execute("COMMIT")
        except BaseException as exc:
            log.exception("write transaction failed; nothing in this group was committed")
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes = [(None, exc)] * len(group)
        return outcomes

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
