"""The test's own database on either backend, opened outside the services, so
tests keep their sqlite3-style SQL (`?`, `:name`) and read rows the same way.

A test names its database by `storage.path` (the `db_path` fixture, or a stack's
`config.storage.path`) on both backends: on Postgres that file is never created,
and tests/conftest.py registers the Postgres database the test's configuration
points at under it. A location that is not registered is a SQLite file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from services.storage import db
from services.storage.dialect import POSTGRES, SQLITE, Dialect


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def storage_backend(request: pytest.FixtureRequest) -> str:
    """Both backends: a directory's conftest.py imports this fixture, and every test
    there that reaches the database (make_config, db_path, the stacks) runs twice.
    Module scope: a module's stacks (module_recall_stack) follow its backend, and
    each module runs all its SQLite ids, then all its Postgres ones."""
    return str(request.param)


_POSTGRES: dict[str, str] = {}  # storage.path -> the DSN of the test's Postgres database


def _key(location: str | Path) -> str:
    return str(Path(location))


def register(location: str | Path, dsn: str) -> None:
    _POSTGRES[_key(location)] = dsn


def forget(location: str | Path) -> None:
    _POSTGRES.pop(_key(location), None)


def dsn_of(location: str | Path) -> str | None:
    """The Postgres DSN behind `location`, or None for a SQLite file."""
    return _POSTGRES.get(_key(location))


def dialect(location: str | Path) -> Dialect:
    return POSTGRES if dsn_of(location) else SQLITE


@contextmanager
def connect(location: str | Path, *, write: bool = False) -> Iterator[Any]:
    """A connection with sqlite3's API (services/storage/pg.py's SqliteApi on
    Postgres, autocommitting each statement); read-only unless `write`."""
    dsn = dsn_of(location)
    if dsn is None:
        conn = db.open_read_write(location) if write else db.open_read_only(location)
    else:
        from services.storage import pg

        conn = pg.SqliteApi(pg.open_read_write(dsn) if write else pg.open_read_only(dsn))
    try:
        yield conn
    finally:
        conn.close()


def rows(location: str | Path, sql: str, *params: Any) -> list[Any]:
    with connect(location) as conn:
        return list(conn.execute(sql, params).fetchall())


def execute(location: str | Path, sql: str, *params: Any) -> int:
    """Write directly, as a crash or a bug could have; the rows changed."""
    with connect(location, write=True) as conn:
        return int(conn.execute(sql, params).rowcount)


def stored_bytes(location: str | Path) -> bytes:
    """Everything the database holds, for "this value is stored nowhere" checks:
    the SQLite file and its WAL byte for byte; on Postgres every row of every
    table as text (what a dump of the database would hold)."""
    if dsn_of(location) is None:
        path = Path(location)
        files = (path, path.with_name(path.name + "-wal"))
        return b"".join(f.read_bytes() for f in files if f.exists())
    with connect(location) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
        ]
        return "\n".join(
            str(r[0])
            for table in tables
            for r in conn.execute(f'SELECT t::text FROM "{table}" t').fetchall()
        ).encode()


def refuse_inserts(location: str | Path, table: str, message: str) -> None:
    """Make every INSERT into `table` fail with `message`: a real database
    failure, injected into the database the store writes."""
    if dsn_of(location) is None:
        execute(
            location,
            f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{message}'); END",
        )
        return
    execute(
        location,
        f"CREATE FUNCTION refuse_{table}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION '{message}'; END $$",
    )
    execute(
        location,
        f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION refuse_{table}()",
    )


def migrate_to(version: int, *, path: str | Path = "", dsn: str = "") -> None:
    """Migrate a fresh database (the SQLite file at `path`, or the Postgres database at
    `dsn`) with its backend's own chain, its first `version` migrations only."""
    if dsn:
        from services.storage import pg
        from services.storage.pg_migrations import PG_MIGRATIONS, apply_pg_migrations

        raw = pg.open_read_write(dsn)
        try:
            apply_pg_migrations(raw, PG_MIGRATIONS[:version])
        finally:
            raw.close()
        return
    from services.storage.sqlite_migrations import MIGRATIONS, apply_migrations

    conn = db.open_read_write(path)
    try:
        apply_migrations(conn, MIGRATIONS[:version])
    finally:
        conn.close()


# ---- SQL that cannot be the same text on both backends --------------------------

# For tests that write FTS5's external index apart from its memories: on
# Postgres the index is a generated column of the memory's row, so no such
# state can exist.
FTS5_ONLY = pytest.mark.sqlite_only(
    "FTS5's external index edited apart from memories; on Postgres it is a generated column"
)

# Rows in the full-text index: FTS5's table on SQLite; live memories' tsvector on
# Postgres (services/storage/pg_migrations.py: content_tsv is NULL for tombstones).
FTS_COUNT = {
    "sqlite": "SELECT count(*) FROM memories_fts",
    "postgres": "SELECT count(*) FROM memories WHERE content_tsv IS NOT NULL",
}
# Ids of the memories whose indexed text holds `?` (one word or a phrase).
FTS_MATCH_IDS = {
    "sqlite": "SELECT m.id FROM memories_fts f JOIN memories m ON m.rowid = f.rowid "
    "WHERE memories_fts MATCH '\"' || ? || '\"'",
    "postgres": "SELECT id FROM memories "
    "WHERE content_tsv @@ phraseto_tsquery('engram_english', ?)",
}
# The full-text index's own per-memory entries (rowid, its length record).
FTS_ENTRIES = {
    "sqlite": "SELECT id, sz FROM memories_fts_docsize",
    "postgres": "SELECT rowid, content_tokens FROM memories WHERE content_tokens IS NOT NULL",
}


# Entries of the index whose memory is gone (none can exist on Postgres: the
# entry is a column of the memory's row).
FTS_ORPHANS = {
    "sqlite": "SELECT count(*) FROM memories_fts_docsize WHERE id NOT IN (SELECT rowid FROM memories)",
    "postgres": "SELECT 0",
}
# The index's stored form, for "nothing rewrote it" checks.
FTS_STORAGE = {
    "sqlite": "SELECT id, block FROM memories_fts_data ORDER BY id",
    "postgres": "SELECT rowid, content_tsv::text FROM memories ORDER BY rowid",
}
# The database's size in bytes, as StoreAdmin's diagnostics report it.
DB_SIZE = {
    "sqlite": "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
    "postgres": "SELECT pg_database_size(current_database())",
}
# Insertion order of a table without a key that says it (maintenance_audit):
# SQLite's rowid; Postgres has no rowid there, and its times are written by one clock.
INSERTION_ORDER = {"sqlite": "rowid", "postgres": "created_at, id"}


def fts_count(location: str | Path) -> int:
    return int(rows(location, FTS_COUNT[dialect(location).name])[0][0])


def fts_ids(location: str | Path, text: str) -> set[str]:
    return {r[0] for r in rows(location, FTS_MATCH_IDS[dialect(location).name], text)}
