"""The keyword channel, one class per backend (chosen once, services.search.recall
Recaller): BM25 over the searched collection (namespace + filter) with that
collection's own statistics.

SQLite (SqliteKeywordChannel): FTS5 computes IDF over the whole index, which
would let other tenants' data shape this tenant's ranking, so each term's IDF
is recomputed over the searched collection; when the unfiltered namespace is
the whole index, FTS5's own BM25 is the collection's. PostgreSQL
(PgKeywordChannel, issue 21): services/storage/search/pg_text.py's BM25, computed in
one query with the namespace's kept statistics.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from services.common.fts import all_of, any_of, quoted
from services.common.memory_filter import MemoryFilterSpec
from services.search.keyword_statistics import (
    IndexStatistics,
    TermStatistics,
    bm25_idf,
    collection_statistics,
    rare_terms,
)
from services.search.recall_rows import Bm25Row, KeptStatistics
from services.search.recall_scope import RecallScope
from services.search.scoring import coverage, coverage_idf
from services.search.text import keyword_terms
from services.storage.db import ReadPool, Reads
from services.storage.search import pg_text, queries


@dataclass(frozen=True)
class Keywords:
    """The keyword channel's answer: (rowid, BM25) best first, the share of
    the query's IDF mass the best match holds (services.search.scoring.coverage),
    and the statistics it read (none when the query had no term)."""

    ranked: list[tuple[int, float]]
    coverage: float = 0.0
    statistics: TermStatistics | None = None


class KeywordChannel(Protocol):
    async def whole_index(self, reads: Reads, namespace: str, spec: MemoryFilterSpec) -> bool:
        """Whether the searched collection is the whole index (RecallScope.whole_index)."""
        ...

    async def ranked(
        self,
        scope: RecallScope,
        query: str,
        known: TermStatistics | None = None,
        *,
        with_coverage: bool = True,
    ) -> Keywords:
        """(rowid, score) best first, BM25 with the searched collection's IDF,
        and the share of the query's IDF mass in that collection the best match
        holds (0 without `with_coverage`). `known`: statistics another query
        read in this snapshot over the same collection (a question's, for its
        parts): only what they lack is read."""
        ...


class SqliteKeywordChannel:
    """FTS5, with the searched collection's IDF. `pool`: for the rare-terms
    query beside the snapshot (_beside); `depth`: matches kept; `budget`:
    RecallParams.keyword_postings_budget."""

    def __init__(self, pool: ReadPool, depth: int, budget: int) -> None:
        self._pool = pool
        self._depth = depth
        self._budget = budget
        self._index_statistics = IndexStatistics()

    async def whole_index(self, reads: Reads, namespace: str, spec: MemoryFilterSpec) -> bool:
        whole = await reads.fetch_one(queries.namespace_is_whole_index(namespace))
        return spec.is_empty() and bool(whole[0])

    async def ranked(
        self,
        scope: RecallScope,
        query: str,
        known: TermStatistics | None = None,
        *,
        with_coverage: bool = True,
    ) -> Keywords:
        matches = list(dict.fromkeys(quoted(term) for term in keyword_terms(query)))
        if not matches:
            return Keywords([])
        reads, depth = scope.reads, self._depth
        if scope.whole_index:  # the collection is the whole index: FTS5's IDF is ours
            statistics = await self._index_statistics.read(reads, matches, known)
            counts = {m: statistics.terms[m][0] for m in matches}
            ranked = await self._whole_index_keyword(reads, matches, counts)
            if not with_coverage:
                return Keywords(ranked, statistics=statistics)
            weights = {m: coverage_idf(statistics.size, counts[m]) for m in matches}
            return Keywords(ranked, await self._coverage(reads, weights, ranked), statistics)
        namespace, spec = scope.namespace, scope.spec
        statistics = await collection_statistics(reads, namespace, spec, matches, known)
        collection_size, index_size = statistics.size, statistics.index_size
        in_collection = {m: statistics.terms[m][0] for m in matches}
        weighted = [
            (m, bm25_idf(collection_size, local) / bm25_idf(index_size, overall))
            for m in matches
            for local, overall in [statistics.terms[m]]
            if local
        ]
        if not weighted:
            return Keywords([], statistics=statistics)
        rows = await reads.fetch_all(queries.weighted_keyword_top(weighted, namespace, spec, depth))
        ranked = [(rowid, score) for rowid, score in rows]
        if not with_coverage:
            return Keywords(ranked, statistics=statistics)
        weights = {m: coverage_idf(collection_size, in_collection[m]) for m in matches}
        return Keywords(ranked, await self._coverage(reads, weights, ranked), statistics)

    async def _coverage(
        self, reads: Reads, weights: dict[str, float], ranked: list[tuple[int, float]]
    ) -> float:
        """The share of the query's IDF mass held by the best match's terms."""
        if not ranked:
            return 0.0
        rows = await reads.fetch_all(queries.terms_in_memory(list(weights), ranked[0][0]))
        return coverage(weights, {row[0] for row in rows})

    async def _whole_index_keyword(
        self, reads: Reads, matches: list[str], counts: dict[str, int]
    ) -> list[tuple[int, float]]:
        """FTS5's BM25 over the OR of the terms. When the terms match more than
        `keyword_postings_budget` documents in total, the rarest terms that fit the
        budget are "rare" and the rest "common": a document is then scored only
        when it matches a rare term, with its full BM25 (common terms included)
        when it also matches a common one. Documents matching common terms only,
        which carry the least IDF, are left out. Costs follow the rare terms'
        documents instead of every posting of every term."""
        depth = self._depth
        rare = rare_terms(matches, counts, self._budget)
        if rare is not None:
            common = [m for m in matches if m not in rare]
            rare_only, with_common = await asyncio.gather(
                self._beside(reads, queries.whole_index_keyword_top(any_of(rare), depth)),
                reads.fetch_all(
                    queries.whole_index_keyword_top(all_of([any_of(rare), any_of(common)]), depth)
                ),
            )
            # the AND query's score is the full one (every term's part); a
            # rare-only score stands where the document has no common term
            scores = {rowid: score for rowid, score in rare_only}
            scores.update((rowid, score) for rowid, score in with_common)
            ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
            return ranked[:depth]
        rows = await reads.fetch_all(queries.whole_index_keyword_top(any_of(matches), depth))
        return [(rowid, score) for rowid, score in rows]

    async def _beside(self, reads: Reads, query: queries.Query) -> list[Any]:
        """A whole-index FTS5 query run on another connection of SQLite's pool
        when one is idle (its own snapshot, on its own thread: beside the
        snapshot's reads, half the keyword channel's time at 100k), else in the
        snapshot. Its rowids are proposals like the vector cache's, read under
        the namespace in the snapshot (Recaller._pool); a write landing between
        the two snapshots moves its BM25 statistics by a hair, as the cached
        counts do."""
        rows = await self._pool.fetch_all_spare(query)
        if rows is not None:
            return rows
        return await reads.fetch_all(query)


class PgKeywordChannel:
    """BM25 in one query (services/storage/search/pg_text.py), which also returns the
    statistics and the best match's terms the coverage needs. The statistics
    are the namespace's, kept by the store (one indexed read, exact at the
    snapshot), with the common-terms cutoff as on SQLite's whole index,
    filtered Recalls included: a filter (a time window the query names, a
    type) narrows which memories are scored, not the IDF, as Lucene scores
    a filtered query. Counting a filtered collection's statistics and
    scoring every match without a cutoff scanned the namespace: 3.6 s at
    the p95 of Recall at 1M (bench/README.md "Recall at 1M")."""

    def __init__(self, depth: int, budget: int) -> None:
        self._depth = depth
        self._budget = budget

    async def whole_index(self, reads: Reads, namespace: str, spec: MemoryFilterSpec) -> bool:
        return False  # the statistics are per namespace: no whole-index path

    async def ranked(
        self,
        scope: RecallScope,
        query: str,
        known: TermStatistics | None = None,
        *,
        with_coverage: bool = True,
    ) -> Keywords:
        # (the coverage comes with the query: `with_coverage` saves no read here)
        terms = list(dict.fromkeys(keyword_terms(query)))
        if not terms:
            return Keywords([])
        reads, namespace = scope.reads, scope.namespace
        statistics = known  # (a question's, when this is one of its parts)
        missing = terms if statistics is None else statistics.missing(terms)
        if missing:
            kept = KeptStatistics._make(
                await reads.fetch_one(pg_text.kept_statistics(missing, namespace))
            )
            read = {t: (int(n), int(n)) for t, n in zip(missing, kept.frequencies, strict=True)}
            size = int(kept.size)
            statistics = (
                TermStatistics(size, size, float(kept.average), read)
                if statistics is None
                else statistics.with_terms(read)
            )
        if statistics is None or not statistics.size:
            return Keywords([], statistics=statistics)
        frequencies = [statistics.terms[t][0] for t in terms]
        counts = dict(zip(terms, frequencies, strict=True))
        rare = rare_terms(terms, counts, self._budget)
        required = None if rare is None else [terms.index(t) + 1 for t in rare]
        collection = (statistics.size, statistics.average)
        query_rows = await reads.fetch_all(
            pg_text.bm25_top(
                terms, namespace, self._depth, scope.spec, collection, frequencies, required
            )
        )
        if not query_rows:
            return Keywords([], statistics=statistics)
        best = Bm25Row(*query_rows[0])
        size = int(best.size)
        weights = {
            t: coverage_idf(size, int(n)) for t, n in zip(terms, best.frequencies, strict=True)
        }
        held = {terms[int(i) - 1] for i in best.held}
        ranked = [(rowid, float(score)) for rowid, score, _held, _size, _df, _average in query_rows]
        return Keywords(ranked, coverage(weights, held), statistics)
