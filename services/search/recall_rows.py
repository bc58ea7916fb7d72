"""Recall's rows by name: each a result shape of one query builder, in its
column order (a row of either backend, sqlite3.Row or services.common.pg.Row,
is made one by unpacking it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple


class PoolRow(NamedTuple):
    """A pool member (services.search.queries.pool_rows)."""

    rowid: int
    event_time: str
    vector: bytes | None  # the exact float32 vector; None when not embedded
    who: str | None
    parts: bytes | None  # the sentence vectors (float16); None for one sentence or unread


def pool_rows_by_rowid(rows: Iterable[Any]) -> dict[int, PoolRow]:
    """queries.pool_rows' rows as PoolRows, by rowid."""
    pooled = (PoolRow(*row) for row in rows)
    return {row.rowid: row for row in pooled}


class Bm25Row(NamedTuple):
    """A keyword match on Postgres (services.search.pg_text.bm25_top); the
    last three are the same on every row."""

    rowid: int
    score: float
    held: list[int]  # the 1-based positions of the query's terms the memory holds
    size: int  # the collection's live memories
    frequencies: list[int]  # each term's documents in the collection, in term order
    average: float  # the collection's average length


class KeptStatistics(NamedTuple):
    """The namespace's kept text statistics (services.search.pg_text.kept_statistics)."""

    size: int
    average: float
    frequencies: list[int]  # each term's documents, in term order


class Restatement(NamedTuple):
    """A memory's `restated` event (services.search.queries.restatements)."""

    memory_id: str
    metadata: str
    recorded_at: str
