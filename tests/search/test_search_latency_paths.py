"""What Recall does to be fast at 100k must not change what it answers: the
selection's early stop, the rare-terms FTS5 query on a spare connection of the
read pool (only when one is idle, never waiting for one), mapped readers.

A real store writes the database; recall runs in-process over it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import Any

import sqlean

from recall_helpers import Stack
from services.common.memory_filter import MemoryFilterSpec
from services.common.providers.embedding import NoEmbedding
from services.search.embedder import QueryEmbedder
from services.search.recall import Recaller, RecallParams
from services.search.scoring import Candidate, ScoringParams, select, squash
from services.storage.db import MIB, ReadPool, open_read_only, open_read_pool
from services.storage.dialect import SQLITE

NS = "only"  # the one namespace: the collection is the whole index


def full_scan_select(
    candidates: Sequence[Candidate], limit: int, penalty: float, min_score: float
) -> list[tuple[int, float]]:
    """select() as specified: every remaining candidate examined for each pick."""
    remaining = sorted(candidates, key=lambda c: (-c.score, c.rowid))
    picked: list[tuple[int, float]] = []
    per_episode: dict[str, int] = {}
    while remaining and len(picked) < limit:
        best_index, best_score = 0, float("-inf")
        for index, c in enumerate(remaining):
            effective = c.score - penalty * per_episode.get(c.event_time, 0)
            if effective > best_score:
                best_index, best_score = index, effective
        if squash(best_score) < min_score:
            break
        chosen = remaining.pop(best_index)
        per_episode[chosen.event_time] = per_episode.get(chosen.event_time, 0) + 1
        picked.append((chosen.rowid, squash(best_score)))
    return picked


def test_select_stops_early_with_the_full_scans_picks() -> None:
    rng = random.Random(19)
    for trial in range(300):
        # few distinct scores and episodes: many ties, many penalised picks
        scores = [round(rng.uniform(0, 1.5), 1 if trial % 2 else 6) for _ in range(200)]
        candidates = [
            Candidate(rowid, event_time=f"e{rng.randrange(6)}", score=score)
            for rowid, score in enumerate(scores)
        ]
        penalty = rng.choice([0.0, 0.03, 0.1, 0.5])
        limit, min_score = rng.choice([1, 10, 50, 200]), rng.choice([0.0, 0.5])
        expected = full_scan_select(candidates, limit, penalty, min_score)
        got = select(candidates, limit, penalty, min_score)
        assert [(c.rowid, c.score) for c in got] == expected


def test_a_spare_read_never_waits_nor_opens(tmp_path: Any) -> None:
    path = tmp_path / "spare.db"
    sqlean.connect(str(path)).close()  # a read-only open needs the file

    async def run() -> None:
        pool = ReadPool(path, size=1)
        await pool.open()
        try:
            assert [tuple(r) for r in await pool.fetch_all_spare(("SELECT 7", [])) or []] == [(7,)]
            async with pool.snapshot() as snapshot:  # the only connection
                assert await pool.fetch_all_spare(("SELECT 7", [])) is None
                assert [tuple(r) for r in await snapshot.fetch_all(("SELECT 8", []))] == [(8,)]
            assert len(pool._connections) == 1  # none opened for the spare read
            assert [tuple(r) for r in await pool.fetch_all_spare(("SELECT 9", [])) or []] == [(9,)]
        finally:
            await pool.close()

    asyncio.run(run())


def test_readers_map_the_file(tmp_path: Any) -> None:
    path = tmp_path / "mapped.db"
    sqlean.connect(str(path)).close()
    conn = open_read_only(path)
    try:
        assert conn.execute("PRAGMA mmap_size").fetchone()[0] == 32 * MIB  # storage.read_mmap_mb
    finally:
        conn.close()


def cutoff_hits(stack: Stack, query: str, pool_size: int) -> list[tuple[str, float, float]]:
    async def run() -> list[tuple[str, float, float]]:
        reads = await open_read_pool(stack.config.storage, service="search")
        if isinstance(reads, ReadPool) and reads.dialect is SQLITE and pool_size == 1:
            await reads.close()  # one connection: the snapshot's, so no spare one
            reads = ReadPool(stack.config.storage.path, size=1)
            await reads.open()
        try:
            params = RecallParams(scoring=ScoringParams(min_score=0.0), keyword_postings_budget=5)
            recaller = Recaller(reads, QueryEmbedder(NoEmbedding()), params)
            outcome = await recaller.recall(NS, query, 100, MemoryFilterSpec())
            return [(h.memory.content, h.keyword_score, h.score) for h in outcome.hits]
        finally:
            await reads.close()

    return asyncio.run(run())


def test_cutoff_recall_is_the_same_with_or_without_a_spare_connection(
    recall_stack: Callable[..., Any],
) -> None:
    stack: Stack = recall_stack({"providers.embedding.kind": "none"}, search=False)
    for i in range(30):
        stack.remember(f"an apple a day number {i}", namespace=NS)
    stack.remember("the zeppelin carried an apple", namespace=NS)
    stack.remember("a zeppelin over the bay", namespace=NS)
    stack.remember("zeppelin zeppelin and one apple", namespace=NS)

    spare = cutoff_hits(stack, "zeppelin apple", pool_size=4)
    alone = cutoff_hits(stack, "zeppelin apple", pool_size=1)
    assert spare == alone
    # the cutoff applied (zeppelin is rare): documents with apple only are left out
    assert {content for content, _, _ in spare} == {
        "the zeppelin carried an apple",
        "a zeppelin over the bay",
        "zeppelin zeppelin and one apple",
    }
