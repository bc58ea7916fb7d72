"""Recall's rows by name: each a result shape of one query builder, in its
column order. A NamedTuple is made from a row of either backend (sqlite3.Row
or services.storage.pg.Row) by unpacking it, where a Recall reads a few; the
pool's rows, hundreds a Recall, are unpacked by name where they are used."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, TypeAlias

# A pool member (services.storage.search.queries.pool_rows): (rowid, event time, the
# exact float32 vector or None when not embedded, who, the sentence vectors
# (float16) or None for one sentence or unread). Used as read, never copied (a
# Recall reads hundreds: a NamedTuple each cost ~1% of its time), so this is the
# tuple it unpacks as; sqlite3.Row and services.storage.pg.Row unpack alike.
PoolRow: TypeAlias = tuple[int, str, bytes | None, str | None, bytes | None]


def pool_rows_by_rowid(rows: Iterable[Any]) -> dict[int, PoolRow]:
    """queries.pool_rows' rows by rowid."""
    return {row[0]: row for row in rows}


class Bm25Row(NamedTuple):
    """A keyword match on Postgres (services.storage.search.pg_text.bm25_top); the
    last three are the same on every row (read from the best one)."""

    rowid: int
    score: float
    held: list[int]  # the 1-based positions of the query's terms the memory holds
    size: int  # the collection's live memories
    frequencies: list[int]  # each term's documents in the collection, in term order
    average: float  # the collection's average length


class KeptStatistics(NamedTuple):
    """The namespace's kept text statistics (services.storage.search.pg_text.kept_statistics)."""

    size: int
    average: float
    frequencies: list[int]  # each term's documents, in term order


class Restatement(NamedTuple):
    """A memory's `restated` event (services.storage.search.queries.restatements)."""

    memory_id: str
    metadata: str
    recorded_at: str
