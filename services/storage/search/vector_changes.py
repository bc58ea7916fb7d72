"""The vector cache's statements (services/search/vector_cache.py): the change log
of memory_vectors and the rows it names, read on search's own SQLite connection
inside one read transaction so the log position and the rows are one snapshot."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

# SQLite binds at most 999 parameters in older builds: ask for changed rows in parts
ROWS_PER_QUERY = 500


def has_change_log(conn: Any) -> bool:
    """Whether the database has the change log (a schema older than it has none)."""
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_vector_changes'"
        ).fetchone()
        is not None
    )


def begin_snapshot(conn: Any) -> None:
    conn.execute("BEGIN")


def end_snapshot(conn: Any) -> None:
    conn.execute("ROLLBACK")


def newest_change(conn: Any) -> int:
    # one statement per aggregate: SQLite's min/max shortcut (an index seek)
    # applies only to a query with a single min() or max()
    return conn.execute("SELECT max(seq) FROM memory_vector_changes").fetchone()[0] or 0


def oldest_change(conn: Any) -> int:
    return conn.execute("SELECT min(seq) FROM memory_vector_changes").fetchone()[0] or 0


def changed_rowids(conn: Any, after: int, through: int) -> list[int]:
    """The memory rowids whose vector rows changed in (after, through] of the log."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT DISTINCT memory_rowid FROM memory_vector_changes WHERE seq > ? AND seq <= ?",
            (after, through),
        )
    ]


def vector_rows(conn: Any, rowids: Sequence[int]) -> Iterator[tuple[int, str, bytes]]:
    """(memory_rowid, namespace, bits) of each of `rowids` that still has a vector."""
    for start in range(0, len(rowids), ROWS_PER_QUERY):
        part = list(rowids[start : start + ROWS_PER_QUERY])
        marks = ", ".join("?" * len(part))
        yield from conn.execute(
            "SELECT memory_rowid, namespace, bits FROM memory_vectors "
            f"WHERE memory_rowid IN ({marks})",
            part,
        )


def namespace_rows(conn: Any, namespace: str) -> list[tuple[int, bytes]]:
    """(memory_rowid, bits) of every vector of the namespace."""
    return conn.execute(
        "SELECT memory_rowid, bits FROM memory_vectors WHERE namespace = ?", (namespace,)
    ).fetchall()
