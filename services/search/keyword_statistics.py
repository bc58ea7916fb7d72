"""The keyword channels' statistics: what each term's IDF is computed from.

TermStatistics is what a keyword channel read in one snapshot (a question's
parts search with it instead of reading it again); `collection_statistics` is
SQLite's namespace path (the searched collection's counts beside the index's);
IndexStatistics is SQLite's whole-index path, whose counts a large index keeps
for a few minutes. `bm25_idf` is FTS5's IDF and `rare_terms` the common-terms
cutoff both backends apply (services/search/keyword_channel.py).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from services.common.memory_filter import MemoryFilterSpec
from services.storage.db import Reads
from services.storage.search import queries

_NO_FILTER = MemoryFilterSpec()
_DOCUMENT_COUNT_TTL_S = 300.0
_DOCUMENT_COUNT_ENTRIES = 50_000
# Under this many live memories the whole-index statistics are counted afresh
# on every Recall (cheap there, and a small index changes fast in relative terms).
_FRESH_COUNTS_BELOW = 10_000


@dataclass(frozen=True)
class TermStatistics:
    """What a keyword channel read for its IDF, for the question's parts
    (services.search.decompose) to search with instead of reading it again:
    their terms are nearly always the question's, and all of it is read in
    the same snapshot. `size`: the searched collection's live memories (the
    index's on SQLite's whole-index path, the namespace text index's on
    Postgres); `index_size`: the whole index's (SQLite's namespace path
    re-weights FTS5's IDF by it; else `size`); `average`: the collection's
    average length (Postgres's BM25; else 0); `terms`: per term (SQLite's
    FTS5 MATCH string, Postgres's term) its documents in the collection and
    in the index (the same count twice where the path has one)."""

    size: int
    index_size: int
    average: float = 0.0
    terms: dict[str, tuple[int, int]] = field(default_factory=dict)

    def missing(self, terms: Sequence[str]) -> list[str]:
        """The terms not counted here, in order."""
        return [t for t in terms if t not in self.terms]

    def with_terms(self, counted: dict[str, tuple[int, int]]) -> TermStatistics:
        return replace(self, terms=self.terms | counted)


def rare_terms(terms: list[str], counts: dict[str, int], budget: int) -> list[str] | None:
    """The common-terms cutoff (RecallParams.keyword_postings_budget), on both
    backends: the rarest terms whose documents fit the budget together, when
    the others are then left over (common) and a rare one matches anything;
    None: every matching document is scored."""
    if budget <= 0 or len(terms) < 2:
        return None
    rare: list[str] = []
    total = 0
    for term in sorted(terms, key=lambda t: counts[t]):
        if rare and total + counts[term] > budget:
            break
        rare.append(term)
        total += counts[term]
    if len(rare) == len(terms) or not any(counts[t] for t in rare):
        return None
    return rare


def bm25_idf(collection_size: int, containing: int) -> float:
    """FTS5's IDF, including its floor for terms in more than half the documents.
    Total: counts out of range (negative, or more containing documents than the
    collection holds) are clamped, so a bad count costs ranking, never the Recall."""
    size = max(collection_size, 0)
    hits = min(max(containing, 0), size)
    try:
        idf = math.log((size - hits + 0.5) / (hits + 0.5))
    except OverflowError:  # counts beyond a float's range: the same ratio, as int logs
        idf = math.log(2 * (size - hits) + 1) - math.log(2 * hits + 1)
    return idf if idf > 0 else 1e-6


async def collection_statistics(
    reads: Reads,
    namespace: str,
    spec: MemoryFilterSpec,
    matches: list[str],
    known: TermStatistics | None,
) -> TermStatistics:
    """SQLite's namespace path: the collection's and the index's live
    memories, and each term's documents in both, reading only what `known`
    lacks."""
    if known is None:
        collection, everything = await asyncio.gather(
            reads.fetch_one(queries.live_count(namespace, spec)),
            reads.fetch_one(queries.live_count(None, _NO_FILTER)),
        )
        known = TermStatistics(int(collection[0]), int(everything[0]))
    missing = known.missing(matches)
    if not missing:
        return known
    in_collection = await asyncio.gather(
        *(reads.fetch_one(queries.term_collection_count(m, namespace, spec)) for m in missing)
    )
    in_index = await asyncio.gather(
        *(reads.fetch_one(queries.term_document_count(m)) for m in missing)
    )
    return known.with_terms(
        {
            m: (int(local[0]), int(overall[0]))
            for m, local, overall in zip(missing, in_collection, in_index, strict=True)
        }
    )


class IndexStatistics:
    """SQLite's whole-index statistics: (live memories, documents per term)
    across the index, for the IDF. On a large index both are cached for a few
    minutes: they decide which terms count as common and scale the keyword
    share, where a count a few minutes old moves an IDF by a hair. A small
    index is counted afresh every Recall: once, when `known` (read in this
    snapshot) has them. One per Recaller (its cache lives as long)."""

    def __init__(self) -> None:
        self._document_counts: dict[str, tuple[int, float]] = {}  # match -> (count, when)
        self._index_size: tuple[int, float] = (0, float("-inf"))  # (live memories, when)

    async def read(
        self, reads: Reads, matches: list[str], known: TermStatistics | None = None
    ) -> TermStatistics:
        if known is not None and not known.missing(matches):
            return known
        now = time.monotonic()
        size, when = self._index_size
        if known is not None:
            size = known.size
        elif size < _FRESH_COUNTS_BELOW or now - when > _DOCUMENT_COUNT_TTL_S:
            size = int((await reads.fetch_one(queries.live_count(None, _NO_FILTER)))[0])
            self._index_size = (size, now)
        fresh = size < _FRESH_COUNTS_BELOW
        counted = known.terms if known is not None else {}
        wanted = [m for m in matches if m not in counted]
        counts: dict[str, int] = {}
        if not fresh:
            for m in wanted:
                entry = self._document_counts.get(m)
                if entry is not None and now - entry[1] <= _DOCUMENT_COUNT_TTL_S:
                    counts[m] = entry[0]
        missing = [m for m in wanted if m not in counts]
        if missing:
            rows = await asyncio.gather(
                *(reads.fetch_one(queries.term_document_count(m)) for m in missing)
            )
            if len(self._document_counts) > _DOCUMENT_COUNT_ENTRIES:
                self._document_counts.clear()
            for match, row in zip(missing, rows, strict=True):
                counts[match] = int(row[0])
                self._document_counts[match] = (counts[match], now)
        read = {m: (counts[m], counts[m]) for m in wanted}
        if known is not None:
            return known.with_terms(read)
        return TermStatistics(size, size, terms=read)
