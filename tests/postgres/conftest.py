"""The Postgres tests run on the session's real PostgreSQL (with pgvector): the
fixtures `postgres_server`, `pgvector_problem`, `needs_pgvector` and `pg_dsn`
(a fresh database per test) live in tests/conftest.py, on tests/pg_server.py,
because the store, search, pipeline and maintenance suites run on it too."""

from __future__ import annotations

import os

from pg_server import STRICT_ENV

try:
    import psycopg  # noqa: F401
except ImportError:  # no `postgres` extra: only the server-less checks are collected
    if os.environ.get(STRICT_ENV) != "1":  # (`make setup` installs it: `make test` fails)
        collect_ignore_glob = ["test_pg_*.py"]
