"""services/storage/schema.py, the schema's one definition (issue 36, item 2): every
memory column the store and search select exists in a database migrated to
SCHEMA_VERSION, on both backends, and the row mapper reads exactly those columns.
A column a reader starts selecting without a migration (or a migration search
is not told about) fails here, not in a Recall."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend_db import migrate_to
from services.common.memory_filter import MemoryFilterSpec
from services.common.memory_record import MemoryRecord
from services.storage import pg
from services.storage.db import open_read_only
from services.storage.dialect import Dialect, dialect_of
from services.storage.pg_migrations import PG_MIGRATIONS
from services.storage.schema import MEMORY_COLUMNS, SCHEMA_VERSION, memory_columns
from services.storage.search import context_queries, queries
from services.storage.sqlite_migrations import MIGRATIONS
from services.storage.store import decay_sql, repository

NOW = "2026-12-02T00:00:00.000000000Z"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Dialect]]:
    """(connection with sqlite3's API, dialect) on a fresh database migrated to
    SCHEMA_VERSION by its backend's chain, and no further."""
    if request.param == "sqlite":
        migrate_to(SCHEMA_VERSION, path=tmp_path / "engram.db")
        conn = open_read_only(tmp_path / "engram.db")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        migrate_to(SCHEMA_VERSION, dsn=dsn)
        conn = pg.SqliteApi(pg.open_read_only(dsn))
    try:
        yield conn, dialect_of(conn)
    finally:
        conn.close()


def test_both_chains_ship_the_schema_version() -> None:
    assert len(MIGRATIONS) == len(PG_MIGRATIONS) == SCHEMA_VERSION


def readers(dialect: Dialect) -> dict[str, tuple[str, list[Any]]]:
    """Every query that selects the memory columns, built as its service builds it."""
    spec = MemoryFilterSpec()
    return {
        "store: the column list": (f"SELECT {repository.MEMORY_COLUMNS} FROM memories", []),
        "store: GetMemory": repository.get_memory_query("default", "m1"),
        "store: ListMemories": repository.list_memories_query(
            "default", spec, (NOW, "m1"), 10, dialect=dialect
        ),
        "store: tombstones": repository.list_tombstones_query(
            "default", spec, NOW, None, 10, dialect=dialect
        ),
        "store: weak memories": decay_sql.weak_page_query(
            "default", 0.3, 0.1, NOW, None, 10, dialect=dialect
        ),
        "search: memory rows": queries.memories_by_rowid("default", [1, 2], dialect=dialect),
        "search: pinned": context_queries.pinned_memories("default", 5),
        "search: session": context_queries.session_memories("default", "s1", 5, None),
    }


def test_every_memory_column_a_reader_selects_exists_at_the_schema_version(
    migrated: tuple[Any, str],
) -> None:
    conn, dialect = migrated
    for name, (sql, params) in readers(dialect).items():
        try:
            conn.execute(sql, params).fetchall()
        except Exception as exc:  # the reader's name, not only the database's complaint
            pytest.fail(f"{name}: {type(exc).__name__}: {exc}")


def test_the_row_mapper_reads_exactly_the_selected_columns() -> None:
    class Row(dict[str, Any]):
        """A row that remembers which columns were read (every value a JSON list)."""

        def __init__(self) -> None:
            super().__init__()
            self.read: set[str] = set()

        def __getitem__(self, column: str) -> Any:
            self.read.add(column)
            return "[]"

    row = Row()
    MemoryRecord.from_row(row)
    assert sorted(row.read) == sorted(MEMORY_COLUMNS)


def test_the_readers_select_the_one_column_list() -> None:
    assert memory_columns() == repository.MEMORY_COLUMNS
    assert "m.rowid AS rowid, " + memory_columns("m") == queries.MEMORY_COLUMNS
