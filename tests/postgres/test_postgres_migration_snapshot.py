"""The Postgres migrations are pinned like SQLite's, and are SQLite's steps one
for one. No server needed: these run wherever the suite runs."""

from __future__ import annotations

from pathlib import Path

from services.storage.pg_migrations import PG_MIGRATIONS, pg_checksum, pg_statements
from services.storage.sqlite_migrations import MIGRATIONS, checksum

SNAPSHOT = Path(__file__).parents[1] / "store" / "pg_migrations.snapshot"


def _snapshot() -> list[tuple[int, str, str]]:
    entries = []
    for line in SNAPSHOT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, name, digest = line.split()
            entries.append((int(version), name, digest))
    return entries


def _snapshot_line(version: int) -> str:
    name, sql = PG_MIGRATIONS[version - 1]
    return f"{version} {name} {pg_checksum(sql)}"


def test_postgres_has_sqlites_migrations_by_name_and_in_order() -> None:
    """Both backends are at version N together: step N has the same name on each."""
    assert [name for name, _ in PG_MIGRATIONS] == [name for name, _ in MIGRATIONS]


def test_every_shipped_postgres_migration_matches_the_committed_snapshot() -> None:
    entries = _snapshot()
    assert [version for version, _, _ in entries] == list(range(1, len(entries) + 1))
    for version, name, digest in entries:
        assert version <= len(PG_MIGRATIONS), f"migration {version} ({name}) was removed"
        assert f"{version} {name} {digest}" == _snapshot_line(version), (
            f"Postgres migration {version} ({name}) differs from the one that shipped: never "
            "edit a shipped migration; restore it and append a new one"
        )
    missing = [_snapshot_line(v) for v in range(len(entries) + 1, len(PG_MIGRATIONS) + 1)]
    assert not missing, f"append to {SNAPSHOT.name}:\n" + "\n".join(missing)


def test_a_plpgsql_body_is_one_statement_of_the_checksum() -> None:
    script = (
        "-- why\nCREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n"
        "    DELETE FROM t;\n    RETURN NULL;\nEND $$;\nCREATE TABLE u (a INTEGER);\n"
    )
    statements = pg_statements(script)
    assert len(statements) == 2 and statements[0].endswith("END $$;")


def test_the_postgres_checksum_is_sqlites_scheme() -> None:
    """Comments and layout do not count, the SQL does; on a script without
    `$$` it is exactly migrations.py's checksum."""
    sql = "-- why\nCREATE TABLE t (\n    a INTEGER\n);\nCREATE INDEX t_a ON t(a);\n"
    assert pg_checksum(sql) == checksum(sql)
    assert pg_checksum(sql) == pg_checksum(
        "-- other\nCREATE TABLE t ( a INTEGER );\nCREATE INDEX t_a ON t(a);"
    )
    assert pg_checksum(sql) != pg_checksum("CREATE TABLE t (a TEXT);\nCREATE INDEX t_a ON t(a);")


def test_every_step_with_nothing_to_do_on_postgres_says_why() -> None:
    for name, sql in PG_MIGRATIONS:
        if not pg_statements(sql):
            assert "Nothing on Postgres" in sql, name
