"""The database's connections on the configured backend (`storage.kind`): the one
module that picks SQLite (services/storage/sqlite.py) or PostgreSQL
(services/storage/pg.py, imported only when configured: psycopg is the
`postgres` extra), and the one callers import: the readers' interface
(ReadPool, whose PostgreSQL twin is pg.PgReadPool, and Reads), the storage
errors and the SQLite connections are offered here from their homes.

pg.py imports sqlite.py, never this module, so picking a backend here is no
import cycle.
"""

from __future__ import annotations

from typing import Any, Literal

from services.common.config import StorageSettings
from services.common.errors import StorageTimedOut, StorageUnavailable
from services.storage.sqlite import (
    DEFAULT_READ_CONNECTIONS,
    DEFAULT_READ_MMAP_MB,
    MIB,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
    Connection,
    DatabaseError,
    IntegrityError,
    OperationalError,
    ReadPool,
    Reads,
    ReadSnapshot,
    Row,
    complete_statement,
    create_private,
    open_read_only,
    open_read_write,
    sqlite3,
)

__all__ = [
    "DEFAULT_READ_CONNECTIONS",
    "DEFAULT_READ_MMAP_MB",
    "MIB",
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "Connection",
    "DatabaseError",
    "IntegrityError",
    "OperationalError",
    "ReadPool",
    "ReadSnapshot",
    "Reads",
    "Row",
    "StorageTimedOut",
    "StorageUnavailable",
    "complete_statement",
    "connect_read_only",
    "create_private",
    "open_read_only",
    "open_read_pool",
    "open_read_write",
    "sqlite3",
]


def connect_read_only(storage: StorageSettings, *, application_name: str = "engram-cli") -> Any:
    """One read-only connection with sqlite3's API on the configured backend
    (pg.SqliteApi on PostgreSQL, through the store's role): for a one-off read
    off the event loop (the CLI, the metrics scrape). The caller closes it."""
    if storage.kind == "sqlite":
        return open_read_only(
            storage.path, busy_timeout_ms=storage.busy_timeout_ms, mmap_mb=storage.read_mmap_mb
        )
    from services.storage import pg

    return pg.SqliteApi(
        pg.open_read_only(
            storage.postgres.dsn,
            statement_timeout_ms=storage.postgres.statement_timeout_ms,
            application_name=application_name,
            connect_timeout_s=storage.postgres.connect_timeout_s,
        )
    )


async def open_read_pool(
    storage: StorageSettings, *, service: Literal["store", "search"]
) -> ReadPool:
    """The configured backend's read pool, open: the one place that picks it.
    On PostgreSQL the store reads with its own role (storage.postgres.dsn) and
    search with the read-only one (reader_dsn), each session read-only."""
    if storage.kind == "sqlite":
        pool = ReadPool(
            storage.path,
            busy_timeout_ms=storage.busy_timeout_ms,
            max_size=storage.read_connections,
            mmap_mb=storage.read_mmap_mb,
        )
    else:
        from services.storage.pg import PgReadPool  # the `postgres` extra, only when used

        settings = storage.postgres
        pool = PgReadPool(
            settings.dsn if service == "store" else storage.reader_dsn,
            size=settings.pool_size,
            statement_timeout_ms=settings.statement_timeout_ms,
            application_name=f"engram-{service}-reads",
            connect_timeout_s=settings.connect_timeout_s,
        )
    await pool.open()
    return pool
