"""SQLite connections, opened the same way everywhere.

Driver: sqlean.py (the `sqlean-py` wheel), a drop-in `sqlite3` that bundles a recent
SQLite with FTS5 and extension loading. The standard `sqlite3` module is often built
without extension loading, so it cannot load sqlite-vec; sqlean.py has wheels for
Linux x86-64/arm64 and macOS arm64 and the same DB-API, so aiosqlite and our own
code use it unchanged (README "SQLite driver" says why this one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlean as sqlite3
import sqlite_vec

Connection = sqlite3.Connection
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
    Path(path).parent.mkdir(parents=True, exist_ok=True)
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


def open_read_only(path: str | Path, *, busy_timeout_ms: int = 5000) -> Any:
    """A reader that cannot write, whatever SQL it is given (mode=ro)."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    _prepare(conn, busy_timeout_ms)
    conn.execute("PRAGMA query_only = ON")
    return conn


class ReadPool:
    """A few read-only aiosqlite connections used round-robin, so reads run off the
    event loop and never wait behind the writer (WAL gives them a snapshot)."""

    def __init__(self, path: str | Path, size: int = 4, busy_timeout_ms: int = 5000) -> None:
        self._path = path
        self._size = size
        self._busy_timeout_ms = busy_timeout_ms
        self._connections: list[Any] = []
        self._next = 0

    async def open(self) -> None:
        import aiosqlite

        for _ in range(self._size):
            conn = aiosqlite.Connection(
                lambda: open_read_only(self._path, busy_timeout_ms=self._busy_timeout_ms),
                iter_chunk_size=256,
            )
            self._connections.append(await conn)

    async def close(self) -> None:
        for conn in self._connections:
            await conn.close()
        self._connections.clear()

    def _pick(self) -> Any:
        self._next = (self._next + 1) % len(self._connections)
        return self._connections[self._next]

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        return list(await self._pick().execute_fetchall(query[0], query[1]))

    async def fetch_one(self, query: tuple[str, list[Any]]) -> Any:
        rows = await self.fetch_all(query)
        return rows[0] if rows else None
