"""The database's connections on the configured backend (`storage.kind`): the one
module that picks SQLite (services/storage/sqlite.py) or PostgreSQL
(services/storage/pg.py, imported only when configured: psycopg is the
`postgres` extra). `backend_for` picks a Backend once, at start; everything a
service does differently by backend when it opens the database (the writer's
connection and its migrations, its replacement after a lost connection, the
read pool, a one-off read-only connection, waiting for the schema, the name
for the log) is that Backend's. The readers' interface (ReadPool, whose
PostgreSQL twin is pg.PgReadPool, and Reads), the storage errors and the
SQLite connections are offered here from their homes.

pg.py imports sqlite.py, never this module, so picking a backend here is no
import cycle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from services.common.config import StorageSettings
from services.common.errors import StorageTimedOut, StorageUnavailable
from services.common.startup import StartupError
from services.storage.connection import Connection
from services.storage.dialect import POSTGRES, SQLITE, Dialect
from services.storage.schema import schema_version_query
from services.storage.sqlite import (
    DEFAULT_READ_CONNECTIONS,
    DEFAULT_READ_MMAP_MB,
    MIB,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
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
    "Backend",
    "Connection",
    "DatabaseError",
    "IntegrityError",
    "OperationalError",
    "PostgresBackend",
    "ReadPool",
    "ReadSnapshot",
    "Reads",
    "Row",
    "SqliteBackend",
    "StorageTimedOut",
    "StorageUnavailable",
    "backend_for",
    "complete_statement",
    "connect_read_only",
    "create_private",
    "open_read_only",
    "open_read_pool",
    "open_read_write",
    "sqlite3",
]


Service = Literal["store", "search"]


class Backend(Protocol):
    """What a service does differently by backend when it opens the database."""

    dialect: Dialect

    def describe(self, service: Service = "store") -> str:
        """The database for a log line: the file, or the server, database and
        the service's role (never a password)."""
        ...

    def open_writer(self) -> tuple[Connection, list[str]]:
        """The store's read-write connection, migrated, and the migrations
        applied; a database it cannot open or migrate is a StartupError."""
        ...

    def writer_reconnect(self) -> Callable[[], Connection] | None:
        """How the writer replaces a lost connection (None: it is a file, never lost)."""
        ...

    @property
    def wal_restart_mb(self) -> int:
        """The writer's WAL bound (services/store/writer.py; 0: no WAL to bound)."""
        ...

    def connect_read_only(self, *, application_name: str = "engram-cli") -> Connection:
        """One read-only connection with sqlite3's API, for a one-off read off
        the event loop (the CLI, the metrics scrape). The caller closes it."""
        ...

    async def open_read_pool(self, service: Service) -> ReadPool:
        """The read pool, open."""
        ...

    async def wait_for_schema(self, version: int, poll_s: float = 0.2) -> None:
        """Until the store has created and migrated the database to `version`
        (search waits rather than racing it)."""
        ...


def backend_for(storage: StorageSettings, log: logging.Logger | None = None) -> Backend:
    """The configured backend: the one place that reads `storage.kind`. It logs
    (waiting for the schema, a reader role it cannot learn) to `log`, the
    service's own logger."""
    log = log or logging.getLogger("engram.storage")
    if storage.kind == "postgres":
        return PostgresBackend(storage, log)
    return SqliteBackend(storage, log)


class SqliteBackend:
    dialect = SQLITE

    def __init__(self, storage: StorageSettings, log: logging.Logger | None = None) -> None:
        self._storage = storage
        self._log = log or logging.getLogger("engram.storage")

    def describe(self, service: Service = "store") -> str:
        return str(self._storage.path)

    def open_writer(self) -> tuple[Connection, list[str]]:
        """A directory or file the store cannot write (read-only, missing and
        not creatable, not a directory, disk full) is a StartupError naming the
        path and the cause."""
        from services.storage.sqlite_migrations import MigrationMismatch, apply_migrations

        storage, connection = self._storage, None
        try:
            connection = open_read_write(
                storage.path,
                synchronous=storage.synchronous,
                busy_timeout_ms=storage.busy_timeout_ms,
            )
            return connection, apply_migrations(connection)
        except (OSError, DatabaseError) as exc:
            if connection is not None:
                connection.close()
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise StartupError(f"cannot open the database {storage.path}: {cause}") from exc
        except MigrationMismatch as exc:
            if connection is not None:
                connection.close()
            raise StartupError(f"refusing to start on the database {storage.path}: {exc}") from exc

    def writer_reconnect(self) -> Callable[[], Connection] | None:
        return None

    @property
    def wal_restart_mb(self) -> int:
        return self._storage.wal_restart_mb

    def connect_read_only(self, *, application_name: str = "engram-cli") -> Connection:
        storage = self._storage
        return open_read_only(
            storage.path, busy_timeout_ms=storage.busy_timeout_ms, mmap_mb=storage.read_mmap_mb
        )

    async def open_read_pool(self, service: Service) -> ReadPool:
        storage = self._storage
        pool = ReadPool(
            storage.path,
            busy_timeout_ms=storage.busy_timeout_ms,
            max_size=storage.read_connections,
            mmap_mb=storage.read_mmap_mb,
        )
        await pool.open()
        return pool

    async def wait_for_schema(self, version: int, poll_s: float = 0.2) -> None:
        path = self._storage.path
        announced = False
        while True:
            if Path(path).exists():
                conn = open_read_only(path)
                try:
                    if conn.execute(*schema_version_query()).fetchone()[0] >= version:
                        return
                except Exception:  # no migrations table yet
                    pass
                finally:
                    conn.close()
            if not announced:
                self._log.info(
                    "waiting for the store to create the database", extra={"path": str(path)}
                )
                announced = True
            await asyncio.sleep(poll_s)


class PostgresBackend:
    """PostgreSQL (the `postgres` extra: psycopg is imported when first used).
    The store reads and writes as storage.postgres.dsn's role; search reads as
    reader_dsn's, which the store grants SELECT (_reader_role)."""

    dialect = POSTGRES

    def __init__(self, storage: StorageSettings, log: logging.Logger | None = None) -> None:
        self._storage = storage
        self._log = log or logging.getLogger("engram.storage")

    def describe(self, service: Service = "store") -> str:
        from services.storage import pg

        storage = self._storage
        return pg.describe(storage.postgres.dsn if service == "store" else storage.reader_dsn)

    def open_writer(self) -> tuple[Connection, list[str]]:
        """The connection (SqliteApi over psycopg), migrated, and the search role
        granted SELECT when it is not the store's. A server that does not
        answer, a role refused, a database whose migrations differ from the
        code's, or a reader role that does not exist is a StartupError naming
        the database (never the password)."""
        import psycopg

        from services.storage import pg
        from services.storage.pg_migrations import apply_pg_migrations
        from services.storage.sqlite_migrations import MigrationMismatch

        where = self.describe()
        raw = None
        try:
            raw = self._connect_writer()
            applied = apply_pg_migrations(raw)
            reader = self._reader_role()
            with raw.transaction():
                own = raw.execute("SELECT current_user").fetchone()[0]
                if reader is not None and reader != own:
                    pg.grant_reader(raw, reader)
            return pg.SqliteApi(raw), applied
        except psycopg.Error as exc:
            if raw is not None:
                raw.close()
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StartupError(f"cannot open the PostgreSQL database {where}: {cause}") from exc
        except MigrationMismatch as exc:
            if raw is not None:
                raw.close()
            raise StartupError(f"refusing to start on the database {where}: {exc}") from exc

    def _connect_writer(self) -> Any:
        """The writer's connection: no statement timeout (storage.postgres says why)."""
        from services.storage import pg

        settings = self._storage.postgres
        return pg.open_read_write(settings.dsn, connect_timeout_s=settings.connect_timeout_s)

    def _reader_role(self) -> str | None:
        """The role search reads as, which the store grants SELECT when it is not
        its own: none when storage.postgres.reader_dsn is "" (search reads as the
        store); the user reader_dsn names; else the role it logs in as (PGUSER, a
        service file, the OS user), asked of the server over one connection. A
        reader that cannot connect is search's to report (it waits, logging why):
        the store starts, logs it, grants none."""
        import psycopg

        from services.storage import pg

        settings = self._storage.postgres
        if not settings.reader_dsn:
            return None
        named = pg.dsn_user(settings.reader_dsn)
        if named is not None:
            return named
        try:
            with pg.open_read_only(
                settings.reader_dsn,
                application_name="engram-store",
                connect_timeout_s=settings.connect_timeout_s,
            ) as conn:
                return str(conn.execute("SELECT current_user").fetchone()[0])
        except psycopg.Error as exc:
            self._log.warning(
                "cannot connect as storage.postgres.reader_dsn to learn its role; granted none",
                extra={
                    "database": pg.describe(settings.reader_dsn),
                    "error": str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                },
            )
            return None

    def writer_reconnect(self) -> Callable[[], Connection] | None:
        return self.reconnect_writer

    def reconnect_writer(self) -> Connection:
        """The writer's replacement for a lost connection (services/store/writer.py)."""
        from services.storage import pg

        return pg.SqliteApi(self._connect_writer())

    @property
    def wal_restart_mb(self) -> int:
        return 0

    def connect_read_only(self, *, application_name: str = "engram-cli") -> Connection:
        """Through the store's role."""
        from services.storage import pg

        settings = self._storage.postgres
        return pg.SqliteApi(
            pg.open_read_only(
                settings.dsn,
                statement_timeout_ms=settings.statement_timeout_ms,
                application_name=application_name,
                connect_timeout_s=settings.connect_timeout_s,
            )
        )

    async def open_read_pool(self, service: Service) -> ReadPool:
        """The store reads with its own role (storage.postgres.dsn) and search
        with the read-only one (reader_dsn), each session read-only."""
        from services.storage.pg import PgReadPool

        storage, settings = self._storage, self._storage.postgres
        pool = PgReadPool(
            settings.dsn if service == "store" else storage.reader_dsn,
            size=settings.pool_size,
            statement_timeout_ms=settings.statement_timeout_ms,
            application_name=f"engram-{service}-reads",
            connect_timeout_s=settings.connect_timeout_s,
        )
        await pool.open()
        return pool

    async def wait_for_schema(self, version: int, poll_s: float = 0.2) -> None:
        """Until the reader role sees the store's migrations (connected, the table
        there, SELECT granted); each new reason for waiting is logged once."""
        from services.storage import pg

        storage = self._storage
        reason = None
        while True:
            try:
                rows = await pg.fetch_once(
                    storage.reader_dsn,
                    schema_version_query(),
                    application_name="engram-search",
                    connect_timeout_s=storage.postgres.connect_timeout_s,
                )
                found = int(rows[0][0])
                now = None if found >= version else f"schema version {found}, waiting for {version}"
            except Exception as exc:  # not up yet, no migrations yet, not granted yet
                now = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if now is None:
                return
            if now != reason:
                self._log.info(
                    "waiting for the store to migrate the database",
                    extra={"database": pg.describe(storage.reader_dsn), "reason": now},
                )
                reason = now
            await asyncio.sleep(poll_s)


def connect_read_only(
    storage: StorageSettings, *, application_name: str = "engram-cli"
) -> Connection:
    """Backend.connect_read_only on the configured backend."""
    return backend_for(storage).connect_read_only(application_name=application_name)


async def open_read_pool(storage: StorageSettings, *, service: Service) -> ReadPool:
    """Backend.open_read_pool on the configured backend."""
    return await backend_for(storage).open_read_pool(service)
