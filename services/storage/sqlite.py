"""SQLite connections, opened the same way everywhere.

Driver: sqlean.py (the `sqlean-py` wheel), a drop-in `sqlite3` that bundles a recent
SQLite with FTS5 and extension loading. The standard `sqlite3` module is often built
without extension loading, so it cannot load sqlite-vec; sqlean.py has wheels for
Linux x86-64/arm64 and macOS arm64 and the same DB-API, so aiosqlite and our own
code use it unchanged (docs/storage.md "SQLite driver" says why this one).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import sqlean as sqlite3
import sqlite_vec

from services.common.config import StorageSettings
from services.common.metrics import READ_POOL_CONNECTIONS
from services.storage.dialect import SQLITE

Row = sqlite3.Row
IntegrityError = sqlite3.IntegrityError
OperationalError = sqlite3.OperationalError
DatabaseError = sqlite3.DatabaseError
complete_statement = sqlite3.complete_statement


def _prepare(conn: Any, busy_timeout_ms: int) -> None:
    conn.row_factory = sqlite3.Row
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    conn.enable_load_extension(False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA foreign_keys = ON")


def open_read_write(
    path: str | Path, *, synchronous: str = "FULL", busy_timeout_ms: int = 5000
) -> Any:
    """The store's one read-write connection: WAL, explicit transactions."""
    create_private(path)
    # A larger statement cache: multi-row INSERTs vary in size (repository.insert_rows).
    conn = sqlite3.connect(
        str(path), isolation_level=None, check_same_thread=False, cached_statements=512
    )
    _prepare(conn, busy_timeout_ms)
    conn.execute("PRAGMA journal_mode = WAL")
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous}")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


# A new data directory and database are their owner's only: the database holds
# every namespace's memories, like the keys, backups and TLS keys beside it.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def create_private(path: str | Path) -> None:
    """Create the database's directory (0700) and an empty database file (0600)
    where none exists yet, so SQLite never creates it with the umask's 0644.
    SQLite gives the -wal and -shm it creates the main file's permission bits,
    so they are 0600 too. An existing directory or file keeps its mode: an
    operator may have widened it on purpose."""
    path = Path(path)
    path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))


# Readers map the first storage.read_mmap_mb of the file: a page read there is
# a memory access instead of a pread() into each connection's own 2 MB cache
# (Recall at 100k, all mapped: its SQL took 20% less CPU and the pool rows 40%
# less, bench/README.md "Recall latency"). The kernel counts a mapped page in
# RSS once per connection mapping it, so the map is bounded: mapped without
# limit, search's RSS grew with the database times its read connections
# (bench/README.md "Search memory under load").
DEFAULT_READ_MMAP_MB: int = StorageSettings.model_fields["read_mmap_mb"].default
DEFAULT_READ_CONNECTIONS: int = StorageSettings.model_fields["read_connections"].default
MIB = 1 << 20


def open_read_only(
    path: str | Path, *, busy_timeout_ms: int = 5000, mmap_mb: int = DEFAULT_READ_MMAP_MB
) -> Any:
    """A reader that cannot write, whatever SQL it is given (mode=ro), mapping
    the first `mmap_mb` MiB of the file (0: none)."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    _prepare(conn, busy_timeout_ms)
    conn.execute("PRAGMA query_only = ON")
    conn.execute(f"PRAGMA mmap_size = {int(mmap_mb) * MIB}")
    return conn


# ---- the writer's WAL bound (services/store/writer.py) and backup/restore's checks ----


def main_file(conn: Any) -> str:
    """The main database's file, as SQLite opened it (absolute)."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def set_journal_size_limit(conn: Any, limit_bytes: int) -> None:
    conn.execute(f"PRAGMA journal_size_limit = {int(limit_bytes)}")


def busy_timeout(conn: Any) -> int:
    return int(conn.execute("PRAGMA busy_timeout").fetchone()[0])


def set_busy_timeout(conn: Any, ms: int) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(ms)}")


def restart_wal(conn: Any) -> tuple[int, int, int]:
    """A RESTART checkpoint: (busy, WAL frames, frames copied), as SQLite reports."""
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
    return busy, frames, copied


def leave_wal(conn: Any) -> None:
    """journal_mode DELETE: a copy that is no one's database yet keeps no -wal."""
    conn.execute("PRAGMA journal_mode = DELETE")


def integrity_problems(conn: Any) -> list[str]:
    """SQLite's integrity check: ["ok"] for a sound file."""
    return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def take_exclusive_lock_briefly(conn: Any) -> None:
    """Take and give back the file's exclusive lock; OperationalError ("locked",
    "busy") while another connection has it open."""
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("ROLLBACK")


class Reads(Protocol):
    """What a reader needs: the pool itself, or one of its snapshots."""

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]: ...

    async def fetch_all_isolated(self, query: tuple[str, list[Any]]) -> list[Any]: ...

    async def fetch_one(self, query: tuple[str, list[Any]]) -> Any: ...


class ReadPool:
    """Read-only aiosqlite connections, each used by one caller at a time, so reads
    run off the event loop and never wait behind the writer (WAL).

    A plain fetch is one statement, so one snapshot of its own. `snapshot()` holds a
    connection in one read transaction for a sequence of reads that must agree with
    each other (counts and the rows they count, a check and the queries it allows).
    `size` connections open up front; more open when every one is checked out (up to
    `max_size`, storage.read_connections), since a snapshot may be held while its
    caller awaits something else; past that a caller waits for one to come back.
    Each connection is a thread, two fds and its own map of the file (`mmap_mb`),
    so `max_size` bounds what the pool holds (engram_read_pool_connections).

    `dialect` is the SQL the database speaks (services/storage/dialect.py):
    every pool takes sqlite3-style SQL (pg.py's PgReadPool translates it), and
    a query builder whose SQL must differ asks the pool's dialect for it.
    """

    dialect = SQLITE

    def __init__(
        self,
        path: str | Path,
        size: int = 4,
        busy_timeout_ms: int = 5000,
        max_size: int = DEFAULT_READ_CONNECTIONS,
        mmap_mb: int = DEFAULT_READ_MMAP_MB,
    ) -> None:
        self._path = path
        self._size = size
        self._max_size = max(size, max_size)
        self._busy_timeout_ms = busy_timeout_ms
        self._mmap_mb = mmap_mb
        self._connections: list[Any] = []
        self._opening = 0
        self._idle: asyncio.Queue[Any] = asyncio.Queue()

    async def open(self) -> None:
        for _ in range(self._size):
            self._idle.put_nowait(await self._connect())

    async def close(self) -> None:
        for conn in self._connections:
            await conn.close()
        self._connections.clear()
        READ_POOL_CONNECTIONS.set(0)

    @property
    def connections(self) -> int:
        """Connections open now (checked out or idle)."""
        return len(self._connections)

    async def _connect(self) -> Any:
        import aiosqlite

        self._opening += 1  # counted before the await: concurrent callers see it
        try:
            conn = await aiosqlite.Connection(
                lambda: open_read_only(
                    self._path, busy_timeout_ms=self._busy_timeout_ms, mmap_mb=self._mmap_mb
                ),
                iter_chunk_size=256,
            )
        finally:
            self._opening -= 1
        self._connections.append(conn)
        READ_POOL_CONNECTIONS.set(len(self._connections))
        return conn

    async def _checkout(self) -> Any:
        if self._idle.empty() and len(self._connections) + self._opening < self._max_size:
            return await self._connect()
        return await self._idle.get()

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        conn = await self._checkout()
        try:
            return list(await conn.execute_fetchall(query[0], query[1]))
        finally:
            self._idle.put_nowait(conn)

    async def fetch_one(self, query: tuple[str, list[Any]]) -> Any:
        rows = await self.fetch_all(query)
        return rows[0] if rows else None

    async def fetch_all_spare(self, query: tuple[str, list[Any]]) -> list[Any] | None:
        """fetch_all on a connection idle right now, or None when none is: no
        wait and no new connection. For a caller holding a snapshot that can run
        the read there instead: waiting for a second connection could deadlock a
        pool whose every connection is such a caller's snapshot."""
        try:
            conn = self._idle.get_nowait()
        except asyncio.QueueEmpty:
            return None
        try:
            return list(await conn.execute_fetchall(query[0], query[1]))
        finally:
            self._idle.put_nowait(conn)

    async def fetch_all_isolated(self, query: tuple[str, list[Any]]) -> list[Any]:
        """fetch_all for a read allowed to fail without failing the reads
        around it (an optional channel). A plain fetch is a statement of its
        own: nothing else to protect."""
        return await self.fetch_all(query)

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[ReadSnapshot]:
        """Reads that all see the database as of the first of them (one read
        transaction on a connection no one else uses meanwhile)."""
        conn = await self._checkout()
        try:
            await conn.execute_fetchall("BEGIN")
        except BaseException:
            await asyncio.shield(self._end(conn))
            raise
        try:
            yield ReadSnapshot(conn)
        finally:
            # shielded: a cancelled caller still ends the transaction before the
            # connection is reused (aiosqlite runs its statements in order)
            await asyncio.shield(self._end(conn))

    async def _end(self, conn: Any) -> None:
        try:
            await conn.execute_fetchall("ROLLBACK")  # a read transaction: nothing to keep
        except OperationalError:  # no transaction (BEGIN failed, or SQLite ended it)
            pass
        except BaseException:
            self._connections.remove(conn)  # unusable: replace it on demand
            READ_POOL_CONNECTIONS.set(len(self._connections))
            await conn.close()
            raise
        self._idle.put_nowait(conn)


class ReadSnapshot:
    """A ReadPool connection inside one read transaction (see ReadPool.snapshot)."""

    dialect = SQLITE

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        return list(await self._conn.execute_fetchall(query[0], query[1]))

    async def fetch_one(self, query: tuple[str, list[Any]]) -> Any:
        rows = await self.fetch_all(query)
        return rows[0] if rows else None

    async def fetch_all_isolated(self, query: tuple[str, list[Any]]) -> list[Any]:
        """ReadPool.fetch_all_isolated: a failed SQLite statement leaves its
        transaction as it was (PgReadSnapshot's differs)."""
        return await self.fetch_all(query)
