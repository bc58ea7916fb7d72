"""The vector channel's first pass, one class per backend (chosen once,
services.search.recall Recaller): rowids nearest the query first, proposals
only (each is read under the namespace when the pool reads its row, and
rescored there by its exact cosine).

SQLite (SqliteVectorChannel): the in-process cache's Hamming first pass
(services.search.vector_cache) when the Recall has no filter, else SQL with the
filter applied before the cut. PostgreSQL (PgVectorChannel): pg_vectors.py's
HNSW scan with the namespace and filter inside it, instead of the cache: the
scan is faster than the cache's first pass plus rescore at 100k
(bench/README.md "Vectors on Postgres": p50 6.4 against 12.8 ms, recall@10
0.976 against 0.972), and Postgres has no change log for a cache to follow.
"""

from __future__ import annotations

from typing import Any, Protocol

from services.search.recall_scope import RecallScope
from services.search.vector_cache import VectorCache
from services.storage.search import pg_vectors, queries


class VectorChannel(Protocol):
    async def nearest(self, scope: RecallScope, query_f32: bytes) -> list[int]:
        """First-pass rowids for the normalised float32 query, nearest first."""
        ...


class SqliteVectorChannel:
    """`depth`: RecallParams.channel_depth; `first_pass`: its vector_candidates
    (the Hamming first pass's size; 0 = the exact float32 scan); `cache`: the
    unfiltered first pass in memory, or None."""

    def __init__(self, depth: int, first_pass: int, cache: VectorCache | None) -> None:
        self._depth = depth
        self._first_pass = first_pass
        self._cache = cache

    async def nearest(self, scope: RecallScope, query_f32: bytes) -> list[int]:
        namespace, spec, depth = scope.namespace, scope.spec, self._depth
        if self._first_pass <= 0:
            sql = queries.exact_vector_candidates(query_f32, scope.model, namespace, spec, depth)
        else:
            size = max(self._first_pass, depth)
            if self._cache is not None and spec.is_empty():
                # a filter keeps its first pass in SQL: applied before the cut
                cached = await self._cache.nearest(namespace, query_f32, size)
                if cached is not None:
                    return cached
            sql = queries.vector_candidates(query_f32, namespace, spec, size, scope.whole_index)
        return [row[0] for row in await scope.reads.fetch_all(sql)]


class PgVectorChannel:
    """The HNSW scan for the channel's depth (its settings hold for the rest
    of the snapshot's transaction), or the exact query when the scan comes back
    short (pg_vectors.nearest's rule); `first_pass` 0 asks for the exact query
    at once."""

    def __init__(self, depth: int, first_pass: int) -> None:
        self._depth = depth
        self._first_pass = first_pass

    async def nearest(self, scope: RecallScope, query_f32: bytes) -> list[int]:
        reads, namespace, spec, depth = scope.reads, scope.namespace, scope.spec, self._depth
        rows: list[Any] = []
        if self._first_pass > 0:
            await reads.fetch_all(pg_vectors.scan_settings())
            rows = await reads.fetch_all(
                pg_vectors.vector_candidates(query_f32, namespace, spec, depth)
            )
        if len(rows) < depth:
            rows = await reads.fetch_all(
                pg_vectors.exact_vector_candidates(query_f32, namespace, spec, depth)
            )
        return [row[0] for row in rows]
