"""The common-terms cutoff of the unfiltered keyword channel
(RecallParams.keyword_postings_budget; SQLite's whole-index channel, Postgres's
from the store's kept statistics): when the query's terms match more
documents than the budget, the frequent terms are scored only where a rarer
term matched. A document matching a rare term keeps its exact BM25 (its common
terms included); documents matching common terms only are left out; under the
budget nothing changes.

A real store writes the database; recall runs in-process over it (keywords only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from recall_helpers import Stack
from services.common.memory_filter import MemoryFilterSpec
from services.common.providers.embedding import NoEmbedding
from services.search.embedder import QueryEmbedder
from services.search.recall import Recaller, RecallHit, RecallParams
from services.search.scoring import ScoringParams
from services.storage.db import open_read_pool

NS = "only"  # the one namespace: the collection is the whole index


def keyword_hits(stack: Stack, query: str, budget: int) -> dict[str, RecallHit]:
    async def run() -> dict[str, RecallHit]:
        reads = await open_read_pool(stack.config.storage, service="search")
        try:
            params = RecallParams(
                scoring=ScoringParams(min_score=0.0, episode_weight=0.0, neighbor_weight=0.0),
                keyword_postings_budget=budget,
            )
            recaller = Recaller(reads, QueryEmbedder(NoEmbedding()), params)
            outcome = await recaller.recall(NS, query, 100, MemoryFilterSpec())
            return {h.memory.content: h for h in outcome.hits}
        finally:
            await reads.close()

    return asyncio.run(run())


def test_common_terms_count_only_beside_a_rare_one(recall_stack: Callable[..., Any]) -> None:
    stack: Stack = recall_stack({"providers.embedding.kind": "none"}, search=False)
    for i in range(30):
        stack.remember(f"an apple a day number {i}", namespace=NS)
    stack.remember("apple apple apple apple", namespace=NS)
    stack.remember("the zeppelin carried an apple", namespace=NS)
    stack.remember("a zeppelin over the bay", namespace=NS)

    exact = keyword_hits(stack, "zeppelin apple", budget=0)
    assert len(exact) == 33  # every document with either term
    cut = keyword_hits(stack, "zeppelin apple", budget=5)  # zeppelin: 2 documents
    assert set(cut) == {"the zeppelin carried an apple", "a zeppelin over the bay"}
    both = "the zeppelin carried an apple"
    assert cut[both].keyword_score == exact[both].keyword_score  # the full BM25
    assert cut[both].keyword_rank == 1 and exact[both].keyword_rank == 1
    assert cut["a zeppelin over the bay"].keyword_score > 0

    # under the budget (or one term only): the plain OR query, same as exact
    roomy = keyword_hits(stack, "zeppelin apple", budget=1000)
    assert {k: v.keyword_score for k, v in roomy.items()} == {
        k: v.keyword_score for k, v in exact.items()
    }
    assert len(keyword_hits(stack, "apple", budget=5)) == 32
