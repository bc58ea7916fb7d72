"""The vector channel's query on PostgreSQL (issue 21): the
namespace's nearest memories by cosine distance, with the namespace and the
memory filter applied inside the HNSW scan, in the shape of the SQLite
channel's rows (services/storage/search/queries.py vector_candidates: (memory_rowid,
distance), nearest first).

The filter is the one filter builder's SQL (services/storage/memory_filter_sql.py:
live_sql, and filter_sql in the POSTGRES dialect for the tags and categories
arrays). The queries are sqlite3-style (`?`, SQLite's clock) like every other
query of the search service: the read pool translates them
(services/storage/pg.py translate: the clock becomes the statement's timestamp
in SQLite's stored form), and `nearest` does so for a bare psycopg connection.

The scan: pgvector's iterative scan (`hnsw.iterative_scan = relaxed_order`) keeps
walking the graph until LIMIT rows pass the namespace and the filter (or
`hnsw.max_scan_tuples` is reached), so a filter never cuts the top k short
the way a filter after a plain HNSW top-k would. relaxed_order can return rows
slightly out of order, so the rows are re-sorted after the scan (pgvector's
advice). When the scan still comes back short (a namespace or filter too rare
for max_scan_tuples to reach LIMIT rows), the channel runs the exact query over
the namespace's rows instead: the top k is complete, never silently truncated.

ef_search (the candidate list of one scan iteration) is EF_SEARCH, chosen in
bench/pg_vectors.py (bench/README.md "Vectors on Postgres"): at 100k memories
the channel's top 10 agrees with the exact float32 top 10 as often as the
SQLite channel's does, at the lowest latency that does so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from services.common.memory_filter import MemoryFilterSpec
from services.storage.dialect import POSTGRES
from services.storage.memory_filter_sql import filter_sql, spec_live_sql
from services.storage.pg import translate

Query = tuple[str, list[Any]]
EF_SEARCH = 100


def halfvec_text(query_f32: bytes) -> str:
    """A float32 vector in pgvector's text form."""
    values = np.frombuffer(query_f32, dtype="<f4")
    return "[" + ",".join(repr(float(x)) for x in values) + "]"


def scan_settings(ef_search: int = EF_SEARCH) -> Query:
    """The HNSW scan's settings for the rest of the transaction (SET LOCAL)."""
    return (
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
        "set_config('hnsw.ef_search', ?, true)",
        [str(int(ef_search))],
    )


def _nearest_sql(
    query_f32: bytes, namespace: str, spec: MemoryFilterSpec, limit: int, *, exact: bool
) -> Query:
    clauses, params = filter_sql(spec, "m", POSTGRES)
    # The query vector is a parameter in ORDER BY itself (the index scan needs
    # it there); `+ 0` hides the distance from the HNSW index, so the exact
    # query sorts the namespace's rows (found by memory_vectors_namespace).
    distance = "v.embedding <=> ?::halfvec"
    order = f"({distance}) + 0" if exact else distance
    vector = halfvec_text(query_f32)
    return (
        "WITH nearest AS MATERIALIZED ("
        f"SELECT v.memory_rowid, {distance} AS d "
        "FROM memory_vectors v JOIN memories m ON m.rowid = v.memory_rowid "
        f"WHERE v.namespace = ? AND m.namespace = ? AND {spec_live_sql(spec, 'm')}{clauses} "
        f"ORDER BY {order} LIMIT ?) "
        "SELECT memory_rowid, d FROM nearest ORDER BY d, memory_rowid",
        [vector, namespace, namespace, *params, vector, limit],
    )


def vector_candidates(
    query_f32: bytes, namespace: str, spec: MemoryFilterSpec, limit: int
) -> Query:
    """The HNSW scan: (memory_rowid, cosine distance) of the namespace's live
    memories passing the filter, nearest first, at most `limit`. Run after
    `scan_settings` in the same transaction."""
    return _nearest_sql(query_f32, namespace, spec, limit, exact=False)


def exact_vector_candidates(
    query_f32: bytes, namespace: str, spec: MemoryFilterSpec, limit: int
) -> Query:
    """The same rows by an exact scan of the namespace: the reference, and the
    fallback when the HNSW scan comes back short."""
    return _nearest_sql(query_f32, namespace, spec, limit, exact=True)


def nearest(
    conn: Any,
    query_f32: bytes,
    namespace: str,
    spec: MemoryFilterSpec,
    limit: int,
    ef_search: int = EF_SEARCH,
) -> list[Any]:
    """The vector channel on a psycopg read connection, in the caller's
    transaction: the HNSW scan, or the exact query when the scan finds fewer
    than `limit` rows and the namespace may hold more. (Recall runs the same
    queries through its read snapshot: services/search/vector_channel.py.)"""

    def run(query: Query) -> Sequence[Any]:
        return conn.execute(translate(query[0]), query[1]).fetchall()

    run(scan_settings(ef_search))
    rows = run(vector_candidates(query_f32, namespace, spec, limit))
    if len(rows) < limit:
        rows = run(exact_vector_candidates(query_f32, namespace, spec, limit))
    return list(rows)
