"""The Postgres tests run on the session's real PostgreSQL (with pgvector): the
fixtures `postgres_server`, `pgvector_problem`, `needs_pgvector` and `pg_dsn`
(a fresh database per test) live in tests/conftest.py, on tests/pg_server.py,
because the store, search, pipeline and maintenance suites run on it too."""

from __future__ import annotations

import os
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
    from services.common import db, pg
    from services.store.migrations import apply_migrations
    from services.store.pg_migrations import apply_pg_migrations

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
