"""Migrations are pinned: each shipped one's name and SQL checksum are recorded
in the database and in a committed snapshot, and the store refuses a database
whose recorded migrations differ from the code's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.storage.db import open_read_write
from services.storage.sqlite_migrations import (
    MIGRATIONS,
    MigrationMismatch,
    apply_migrations,
    checksum,
)

SNAPSHOT = Path(__file__).with_name("migrations.snapshot")
NAMESPACE_ORDER_INDEX = "CREATE INDEX memories_namespace_order ON memories(namespace, is_deleted);"


def _snapshot() -> list[tuple[int, str, str]]:
    entries = []
    for line in SNAPSHOT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, name, digest = line.split()
            entries.append((int(version), name, digest))
    return entries


def _snapshot_line(version: int) -> str:
    name, sql = MIGRATIONS[version - 1]
    return f"{version} {name} {checksum(sql)}"


def test_every_shipped_migration_matches_the_committed_snapshot() -> None:
    """Editing a shipped migration's SQL (or renaming or reordering it) fails
    here; comments and indentation may change."""
    entries = _snapshot()
    assert [version for version, _, _ in entries] == list(range(1, len(entries) + 1))
    for version, name, digest in entries:
        assert version <= len(MIGRATIONS), f"migration {version} ({name}) was removed"
        assert f"{version} {name} {digest}" == _snapshot_line(version), (
            f"migration {version} ({name}) differs from the one that shipped: never edit a "
            "shipped migration; restore it and append a new one"
        )
    missing = [_snapshot_line(v) for v in range(len(entries) + 1, len(MIGRATIONS) + 1)]
    assert not missing, f"append to {SNAPSHOT.name}:\n" + "\n".join(missing)


def test_the_checksum_ignores_comments_and_layout_but_not_sql() -> None:
    sql = "-- why\nCREATE TABLE t (\n    a INTEGER\n);\n"
    assert checksum(sql) == checksum("-- a better why\nCREATE TABLE t ( a INTEGER );")
    assert checksum(sql) != checksum("CREATE TABLE t (a TEXT);")


def test_each_applied_migration_records_its_name_and_checksum(tmp_path: Path) -> None:
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn)
    recorded = conn.execute(
        "SELECT version, name, checksum FROM schema_migrations ORDER BY version"
    ).fetchall()
    assert [tuple(r) for r in recorded] == [
        (v, name, checksum(sql)) for v, (name, sql) in enumerate(MIGRATIONS, start=1)
    ]


def test_a_migration_edited_after_it_ran_is_refused_naming_it(tmp_path: Path) -> None:
    conn = open_read_write(tmp_path / "m.db")
    edited = list(MIGRATIONS)
    name, sql = edited[1]
    edited[1] = (name, sql.replace("(namespace, is_deleted)", "(namespace)"))
    apply_migrations(conn, edited)
    with pytest.raises(MigrationMismatch, match=r"migration 2 \(embeddings_and_vector_index\)"):
        apply_migrations(conn)


def test_a_migration_recorded_under_another_name_is_refused(tmp_path: Path) -> None:
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn)
    conn.execute("UPDATE schema_migrations SET name = 'something_else' WHERE version = 3")
    with pytest.raises(MigrationMismatch, match=r"migration 3 is recorded as 'something_else'"):
        apply_migrations(conn)


def test_a_database_migrated_by_a_newer_engram_is_refused(tmp_path: Path) -> None:
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn)
    future = len(MIGRATIONS) + 1
    conn.execute(
        "INSERT INTO schema_migrations(version, name, applied_at, checksum)"
        " VALUES (?, 'from_the_future', '2030-01-01T00:00:00Z', 'x')",
        (future,),
    )
    with pytest.raises(MigrationMismatch, match=rf"migration {future} \(from_the_future\)"):
        apply_migrations(conn)


def _legacy_database(path: Path, migrations: list[tuple[str, str]]) -> Any:
    """A database as the store before checksums left it: schema_migrations
    without a checksum column."""
    conn = open_read_write(path)
    apply_migrations(conn, migrations)
    conn.execute("ALTER TABLE schema_migrations DROP COLUMN checksum")
    return conn


def test_a_database_from_before_checksums_gets_them_from_the_current_sql(tmp_path: Path) -> None:
    conn = _legacy_database(tmp_path / "m.db", list(MIGRATIONS))
    assert apply_migrations(conn) == []
    recorded = conn.execute(
        "SELECT version, checksum FROM schema_migrations ORDER BY version"
    ).fetchall()
    assert [tuple(r) for r in recorded] == [
        (v, checksum(sql)) for v, (_, sql) in enumerate(MIGRATIONS, start=1)
    ]
    assert apply_migrations(conn) == []


def test_a_database_that_ran_the_first_text_of_migration_2_gets_its_missing_index(
    tmp_path: Path,
) -> None:
    """Migration 2 first shipped without memories_namespace_order; such a
    database (recorded before checksums) is trusted and given the index by
    a later migration, so every database ends with the same schema."""
    name, sql = MIGRATIONS[1]
    first_text = sql.replace(NAMESPACE_ORDER_INDEX, "")
    assert first_text != sql
    fix = [n for n, _ in MIGRATIONS].index("memories_namespace_order_for_early_databases")
    before = [MIGRATIONS[0], (name, first_text), *MIGRATIONS[2:fix]]
    conn = _legacy_database(tmp_path / "old.db", before)
    assert apply_migrations(conn) == [n for n, _ in MIGRATIONS[fix:]]  # the fix and any later

    fresh = open_read_write(tmp_path / "new.db")
    apply_migrations(fresh)
    assert _schema(conn) == _schema(fresh)


def _schema(conn: Any) -> list[tuple[str, str, str]]:
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
    return [(kind, name, " ".join((sql or "").split())) for kind, name, sql in rows]


def _time_columns(conn: Any) -> list[tuple[str, str]]:
    """Every (table, column) of the schema that holds a stored time."""
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " AND sql NOT LIKE 'CREATE VIRTUAL%' AND name NOT LIKE 'memories_fts_%'"
        )
    ]
    found = []
    for table in tables:
        for column in conn.execute(f"PRAGMA table_info({table})"):
            name = column[1]
            if name.endswith(("_at", "_time")) or name in (
                "last_accessed",
                "valid_from",
                "valid_until",
            ):
                found.append((table, name))
    return found


def test_stored_times_from_before_nanoseconds_are_rewritten_to_the_fixed_width(
    tmp_path: Path,
) -> None:
    """Six fraction digits (and an early release's unpadded years) become the
    30-character form in every time column, so text order stays time order
    next to rows written with nine digits."""
    upto = [n for n, _ in MIGRATIONS].index("timestamps_to_nanoseconds")
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn, MIGRATIONS[:upto])
    written = {
        "a": "2024-05-01T10:00:00.123456Z",
        "b": "1-01-01T00:00:00.000000Z",
        "c": "0999-12-31T23:59:59.999999Z",
        "d": "9999-12-31T23:59:59.999999Z",
    }
    for memory_id, at in written.items():
        conn.execute(
            "INSERT INTO memories (id, namespace, content, normalized_content, content_hash,"
            " type, importance, created_at, updated_at, event_time, deleted_at)"
            " VALUES (?, 'ns', ?, ?, ?, 'fact', 0.5, ?, ?, ?, NULL)",
            (memory_id, f"content {memory_id}", f"content {memory_id}", memory_id, at, at, at),
        )
        conn.execute(
            "INSERT INTO memory_jobs (id, namespace, memory_id, job_type, available_at,"
            " created_at, updated_at) VALUES (?, 'ns', ?, 'embed', ?, ?, ?)",
            (f"job-{memory_id}", memory_id, at, at, at),
        )
    assert apply_migrations(conn) == [n for n, _ in MIGRATIONS[upto:]]

    rows = conn.execute("SELECT id, event_time, created_at FROM memories ORDER BY event_time")
    assert [tuple(r) for r in rows] == [
        ("b", "0001-01-01T00:00:00.000000000Z", "0001-01-01T00:00:00.000000000Z"),
        ("c", "0999-12-31T23:59:59.999999000Z", "0999-12-31T23:59:59.999999000Z"),
        ("a", "2024-05-01T10:00:00.123456000Z", "2024-05-01T10:00:00.123456000Z"),
        ("d", "9999-12-31T23:59:59.999999000Z", "9999-12-31T23:59:59.999999000Z"),
    ]
    for table, column in _time_columns(conn):
        lengths = conn.execute(
            f"SELECT DISTINCT length({column}) FROM {table} WHERE {column} IS NOT NULL"
        ).fetchall()
        assert {r[0] for r in lengths} <= {30}, (table, column)


def test_the_nanosecond_migration_rewrites_every_time_column_of_its_schema(
    tmp_path: Path,
) -> None:
    """A time column the migration missed would keep six digits and sort wrong."""
    upto = [n for n, _ in MIGRATIONS].index("timestamps_to_nanoseconds")
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn, MIGRATIONS[:upto])
    sql = MIGRATIONS[upto][1]
    statements = [" ".join(s.split()) for s in sql.split(";")]
    for table, column in _time_columns(conn):
        widen = [s for s in statements if s.startswith(f"UPDATE {table} SET") and "'000Z'" in s]
        assert widen and f"{column} = CASE WHEN length({column}) = 27" in widen[0], (table, column)
