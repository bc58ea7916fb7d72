"""services/storage/pg.py against a real PostgreSQL: the store's connection
writes only inside explicit transactions under its statement timeout, and a
reader cannot write, by its own guard and, with a reader role, by privilege."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from services.storage.pg import grant_reader, open_read_only, open_read_write


def test_the_store_connection_commits_only_what_its_transaction_commits(pg_dsn: str) -> None:
    writer = open_read_write(pg_dsn)
    other = open_read_write(pg_dsn)
    assert writer.autocommit is False
    with writer.transaction():
        writer.execute("CREATE TABLE t (a INTEGER)")
    with pytest.raises(RuntimeError), writer.transaction():
        writer.execute("INSERT INTO t VALUES (1)")
        raise RuntimeError("the operation failed")
    with writer.transaction():
        writer.execute("INSERT INTO t VALUES (2)")
    with other.transaction():
        assert [r[0] for r in other.execute("SELECT a FROM t")] == [2]


def test_rows_read_by_position_and_by_column_name(pg_dsn: str) -> None:
    conn = open_read_write(pg_dsn)
    row = conn.execute("SELECT 1 AS one, 'two' AS two").fetchone()
    assert (row[0], row["one"], row[1], row["two"]) == (1, 1, "two", "two")
    assert tuple(row) == (1, "two") and row.keys() == ["one", "two"]


def test_the_statement_timeout_cancels_a_long_statement(pg_dsn: str) -> None:
    conn = open_read_write(pg_dsn, statement_timeout_ms=50)
    assert conn.execute("SHOW statement_timeout").fetchone()[0] == "50ms"
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SELECT pg_sleep(30)")


def test_a_reader_cannot_write_by_mistake(pg_dsn: str) -> None:
    with open_read_write(pg_dsn) as writer, writer.transaction():
        writer.execute("CREATE TABLE t (a INTEGER)")
    reader = open_read_only(pg_dsn)
    assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    reader.rollback()
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        reader.execute("INSERT INTO t VALUES (1)")


def test_a_reader_role_holds_select_only_even_with_the_guard_turned_off(pg_dsn: str) -> None:
    """The guard is a session setting anyone can change; the role is the boundary."""
    role = f"engram_reader_{uuid.uuid4().hex[:8]}"  # roles are per server, not per database
    with open_read_write(pg_dsn) as owner, owner.transaction():
        owner.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'reader'")
        owner.execute("CREATE TABLE t (a INTEGER)")
        owner.execute("INSERT INTO t VALUES (1)")
        grant_reader(owner, role)
        owner.execute("CREATE TABLE later (b INTEGER)")  # default privileges cover it
    try:
        reader = open_read_only(make_conninfo(pg_dsn, user=role, password="reader"))
        assert reader.execute("SELECT a FROM t").fetchone()[0] == 1
        assert reader.execute("SELECT count(*) FROM later").fetchone()[0] == 0
        reader.execute("SET default_transaction_read_only = off")
        reader.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.execute("INSERT INTO t VALUES (2)")
        reader.close()
    finally:
        with open_read_write(pg_dsn) as owner, owner.transaction():
            owner.execute(f"DROP OWNED BY {role}")
            owner.execute(f"DROP ROLE {role}")
