"""Recall's Postgres keyword channel through a real read pool: the statistics
are the namespace's, kept by the store (exact after every write, so a Recall
follows the namespace at once), equal to a count over its memories, filtered
Recalls included (a filter narrows what is scored, not the IDF); the
common-terms cutoff works from them, with or without a filter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.common.memory_filter import MemoryFilterSpec
from services.common.providers.embedding import NoEmbedding
from services.search.embedder import QueryEmbedder
from services.search.recall import Recaller, RecallParams
from services.search.scoring import ScoringParams
from services.storage import pg
from services.storage.search import pg_text

AT = "2026-01-01T00:00:00.000000000Z"
FILLER = (
    "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type,"
    " importance, created_at, updated_at, event_time)"
    " SELECT 'f' || ? || '-' || i, 'ns', 'filler words number ' || i, 'filler', 'h' || ? || i,"
    " 'fact', 0.5, ?, ?, ? FROM generate_series(1, ?) AS i"
)


def _fill(pg_conn: Any, batch: str, count: int) -> None:
    pg_conn.execute(FILLER, [batch, batch, AT, AT, AT, count])


def _insert(pg_conn: Any, memory_id: str, content: str) -> None:
    pg_conn.execute(
        "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type,"
        " importance, created_at, updated_at, event_time)"
        " VALUES (?, 'ns', ?, ?, ?, 'fact', 0.5, ?, ?, ?)",
        [memory_id, content, content, f"h-{memory_id}", AT, AT, AT],
    )


def _found(pg_dsn: str, budget: int, spec: MemoryFilterSpec) -> set[str]:
    """The ids a keyword Recall of "lake zebra" returns with this postings budget."""

    async def run() -> set[str]:
        reads = pg.PgReadPool(pg_dsn, size=1)
        await reads.open()
        try:
            params = RecallParams(
                scoring=ScoringParams(min_score=0.0), keyword_postings_budget=budget
            )
            recaller = Recaller(reads, QueryEmbedder(NoEmbedding()), params)
            outcome = await recaller.recall("ns", "lake zebra", 10, spec)
            return {h.memory.id for h in outcome.hits}
        finally:
            await reads.close()

    return asyncio.run(run())


def test_the_kept_statistics_follow_the_namespace_and_equal_a_count(
    pg_conn: Any, pg_dsn: str
) -> None:
    """Two terms of different frequencies: the lesser match's score relative to
    the best one follows the collection's size (through each term's IDF)."""
    _insert(pg_conn, "rare", "a frozen lake")
    _insert(pg_conn, "common-1", "a zebra")
    _insert(pg_conn, "common-2", "another zebra")
    _fill(pg_conn, "a", 100)
    params = RecallParams(scoring=ScoringParams(min_score=0.0))
    everything = MemoryFilterSpec()
    facts = MemoryFilterSpec(types=("fact",))  # the same memories, as a filter

    async def run() -> list[float]:
        reads = pg.PgReadPool(pg_dsn, size=1)
        await reads.open()
        try:
            recaller = Recaller(reads, QueryEmbedder(NoEmbedding()), params)

            async def relative(spec: MemoryFilterSpec) -> float:
                outcome = await recaller.recall("ns", "lake zebra", 10, spec)
                scores = {h.memory.id: h.keyword_score for h in outcome.hits}
                return scores["common-1"] / scores["rare"]

            first = await relative(everything)
            await asyncio.to_thread(_fill, pg_conn, "b", 100)  # the namespace grows
            return [first, await relative(everything), await relative(facts)]
        finally:
            await reads.close()

    first, again, filtered = asyncio.run(run())
    assert again != pytest.approx(first)  # followed at once: 203 memories, not 103
    assert again == pytest.approx(filtered, rel=1e-12)  # the filter keeps the IDF


def test_the_kept_statistics_equal_a_count_over_the_namespace(pg_conn: Any, pg_dsn: str) -> None:
    """What the kept tables say is what counting the namespace's memories says
    (pg_text.bm25_top computes both ways)."""
    _insert(pg_conn, "rare", "a frozen lake")
    _insert(pg_conn, "common-1", "a zebra")
    _fill(pg_conn, "a", 50)
    terms = ["lake", "zebra", "filler", "absent"]
    size, average, kept = pg_conn.execute(*pg_text.kept_statistics(terms, "ns")).fetchone()
    counted = pg_conn.execute(*pg_text.bm25_top(terms, "ns", 100)).fetchone()
    assert (int(size), list(kept)) == (int(counted[3]), list(counted[4]))
    assert float(average) == pytest.approx(float(counted[5]), rel=1e-12)


def test_an_unfiltered_recall_scores_common_terms_only_beside_a_rare_one(
    pg_conn: Any, pg_dsn: str
) -> None:
    """The common-terms cutoff (keyword_postings_budget), as on SQLite's
    whole-index channel, from the kept document frequencies: a memory holding
    only the common term is not scored; one holding the rare term is, common
    term included. Budget 0 scores every match."""
    _insert(pg_conn, "rare", "a frozen lake and a zebra")
    _insert(pg_conn, "common-1", "a zebra")
    _insert(pg_conn, "common-2", "another zebra")

    assert _found(pg_dsn, 1, MemoryFilterSpec()) == {"rare"}
    assert _found(pg_dsn, 0, MemoryFilterSpec()) == {"rare", "common-1", "common-2"}


def test_a_filtered_recall_scores_only_its_memories_with_the_cutoff(
    pg_conn: Any, pg_dsn: str
) -> None:
    """A filter narrows the scored memories and keeps the cutoff (a time window
    over a large namespace once scored every match: seconds at 1M)."""
    _insert(pg_conn, "rare", "a frozen lake and a zebra")
    _insert(pg_conn, "common-1", "a zebra")
    _insert(pg_conn, "common-2", "another zebra")
    _insert(pg_conn, "rare-other", "a frozen lake")
    pg_conn.execute("UPDATE memories SET type = 'preference' WHERE id = 'rare-other'")
    facts = MemoryFilterSpec(types=("fact",))

    assert _found(pg_dsn, 2, facts) == {"rare"}
    assert _found(pg_dsn, 0, facts) == {"rare", "common-1", "common-2"}
