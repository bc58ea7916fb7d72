"""The single writer: one thread owns the only read-write connection.

Callers submit operations (plain functions of a connection). The thread takes
everything queued, runs it in one `BEGIN IMMEDIATE` transaction, each operation
inside its own savepoint so that one failing operation rolls back only itself,
commits once (group commit), and only then resolves the callers' futures: an
acknowledged write is a committed write. While one group commits, the next one
queues up, so throughput grows with concurrency instead of dying under it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("engram.store.writer")

T = TypeVar("T")
Operation = Callable[[Any], T]


@dataclass
class _Pending:
    operation: Operation[Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


_STOP = object()


class WriterClosed(RuntimeError):
    pass


class Writer:
    def __init__(self, connection: Any, *, max_group: int = 512) -> None:
        self._conn = connection
        self._max_group = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="engram-writer", daemon=True)
        self._thread.start()

    async def submit(self, operation: Operation[T]) -> T:
        """Run `operation(connection)` in a write transaction; return after commit."""
        if self._closed:
            raise WriterClosed("the store is shutting down")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Pending(operation, future, loop))
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
        while not stopping:
            group: list[_Pending] = []
            item = self._queue.get()
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
                self._commit_group(group)

    def _commit_group(self, group: list[_Pending]) -> None:
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
        for pending, (result, error) in zip(group, outcomes, strict=True):
            try:
                pending.loop.call_soon_threadsafe(_settle, pending.future, result, error)
            except RuntimeError:  # the caller's loop is gone; the write stands
                log.warning("writer result undeliverable: event loop closed")


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
