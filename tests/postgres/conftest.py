"""The Postgres tests run on the session's real PostgreSQL (with pgvector): the
fixtures `postgres_server`, `pgvector_problem`, `needs_pgvector` and `pg_dsn`
(a fresh database per test) live in tests/conftest.py, on tests/pg_server.py,
because the store, search, pipeline and maintenance suites run on it too."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pg_server import STRICT_ENV

try:
    import psycopg  # noqa: F401
except ImportError:  # no `postgres` extra: only the server-less checks are collected
    if os.environ.get(STRICT_ENV) != "1":  # (`make setup` installs it: `make test` fails)
        collect_ignore_glob = ["test_pg_*.py"]


@pytest.fixture(params=["sqlite", "postgres"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """The store's read-write connection on a migrated database of each backend (the
    module-level tests' one home; psycopg is imported here, not at load)."""
    from services.storage import db, pg
    from services.storage.pg_migrations import apply_pg_migrations
    from services.storage.sqlite_migrations import apply_migrations

    if request.param == "sqlite":
        lite = db.open_read_write(tmp_path / "store.db")
        apply_migrations(lite)
        yield lite
        lite.close()
        return
    raw = pg.open_read_write(request.getfixturevalue("pg_dsn"))
    apply_pg_migrations(raw)
    with pg.SqliteApi(raw) as adapted:
        yield adapted


@pytest.fixture
def dsn(db_path: Path) -> str:
    """The test's database (the one make_config's storage.postgres.dsn names)."""
    import backend_db

    found = backend_db.dsn_of(db_path)
    assert found is not None
    return found


@pytest.fixture
def reader_role(dsn: str) -> Iterator[str]:
    """A login role of this test's own (the cluster's roles are shared)."""
    import psycopg
    from psycopg import sql

    role = f"engram_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def pg_conn(pg_dsn: str) -> Iterator[Any]:
    """The store's read-write connection on a migrated PostgreSQL database only."""
    from services.storage import pg
    from services.storage.pg_migrations import apply_pg_migrations

    raw = pg.open_read_write(pg_dsn)
    apply_pg_migrations(raw)
    with pg.SqliteApi(raw) as adapted:
        yield adapted
