"""PostgreSQL connections (issue 21's backend; not selectable yet), opened the same
way everywhere, like services/common/db.py's SQLite ones.

psycopg 3 is only imported here and by the Postgres modules, so an install
without the `postgres` extra never needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

Connection = psycopg.Connection
IntegrityError = psycopg.errors.IntegrityError


class Row(tuple[Any, ...]):
    """A result row read by position or by column name, as sqlite3.Row is, so the
    Postgres modules read rows the way the SQLite repository does."""

    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    names = [column.name for column in cursor.description or ()]
    row_type = type("Row", (Row,), {"_index": {name: i for i, name in enumerate(names)}})
    return lambda values: row_type(values)


def _connect(dsn: str, application_name: str, options: dict[str, str]) -> Any:
    settings = " ".join(f"-c {name}={value}" for name, value in options.items())
    return psycopg.connect(
        dsn,
        autocommit=False,
        row_factory=row_factory,
        application_name=application_name,
        options=settings,
    )


def open_read_write(
    dsn: str, *, statement_timeout_ms: int = 0, application_name: str = "engram-store"
) -> Any:
    """The store's read-write connection. Autocommit is off: every write runs in
    an explicit transaction (`with conn.transaction():`), committed before the
    write is acknowledged, as with SQLite's BEGIN IMMEDIATE. `statement_timeout_ms`
    0 means none. Times are TEXT written by services/common/clock.py, so the
    session time zone never enters a stored value; UTC is set all the same."""
    return _connect(
        dsn,
        application_name,
        {"statement_timeout": str(int(statement_timeout_ms)), "TimeZone": "UTC"},
    )


def open_read_only(
    dsn: str, *, statement_timeout_ms: int = 0, application_name: str = "engram-search"
) -> Any:
    """A reader: every transaction it opens is read-only
    (`default_transaction_read_only`), so a write by mistake fails as SQLite's
    `mode=ro` makes it fail. That setting is a guard, not a boundary: a session
    may turn it off. The boundary is the role in the reader's DSN: give the
    search service a role created by `grant_reader`, which holds SELECT only, and
    no SQL it runs can write (issue 21: "search reads through its own read-only
    role"). Both, because the guard also protects a deployment that reuses the
    store's role."""
    return _connect(
        dsn,
        application_name,
        {
            "default_transaction_read_only": "on",
            "statement_timeout": str(int(statement_timeout_ms)),
            "TimeZone": "UTC",
        },
    )


def grant_reader(conn: Any, role: str) -> None:
    """Let `role` (an existing login role) read every table of the schema, now and
    those later migrations create, and nothing else. Run by the owner of the
    tables (the store's role), in the caller's transaction."""
    ident = sql.Identifier(role)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(ident))
    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(ident))
    conn.execute(
        sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}").format(
            ident
        )
    )
