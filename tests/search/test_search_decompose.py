"""Question decomposition through Recall (issue 19, services/search/decompose.py):
a question about two things ("..., the red kayak or the blue tent?") also
searches each part, so the memory only the second part meets reaches the top
results. Every vector is chosen by the test (a scripted Ollama server)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from http_fakes import VectorBook
from recall_helpers import Stack, ids, vec
from services.common.memory_filter import MemoryFilterSpec
from services.common.providers.embedding import NoEmbedding
from services.search.decompose import parts
from services.search.embedder import QueryEmbedder
from services.search.recall import Recaller, RecallParams
from services.search.scoring import ScoringParams
from services.storage.db import Reads, open_read_pool
from services.storage.dialect import SQLITE
from services.storage.search import pg_text, queries

QUESTION = "Which did I buy first, the red kayak or the blue tent?"
KAYAK = "Picked up a paddle boat at the lake shop"
TENT = "A camping shelter for two arrived today"
OTHERS = [
    "Booked a table at the noodle place",
    "Watched the rowing final on television",
    "Cleaned the garage on a rainy afternoon",
]
KAYAK_VECTOR, TENT_VECTOR = vec(0.6, axis=2), vec(0.1, axis=3)


def vectors(book: VectorBook) -> None:
    """The question sits near the kayak and far from the tent; each part is
    its own memory's vector; the others are nearer the question than the tent."""
    book.vectors[QUESTION] = vec(1.0)
    first, second = parts(QUESTION)
    book.vectors[first], book.vectors[second] = KAYAK_VECTOR, TENT_VECTOR
    book.vectors[KAYAK], book.vectors[TENT] = KAYAK_VECTOR, TENT_VECTOR
    for axis, text in enumerate(OTHERS, start=4):
        book.vectors[text] = vec(0.5, axis=axis)


@pytest.mark.parametrize("weight", [0.0, 1.0], ids=["off", "on"])
def test_the_second_parts_memory_reaches_the_top_only_with_decomposition(
    vector_stack: Callable[..., tuple[Stack, VectorBook]], weight: float
) -> None:
    stack, book = vector_stack({"search.decompose_weight": weight})
    vectors(book)
    kayak, tent = stack.remember(KAYAK), stack.remember(TENT)
    for text in OTHERS:
        stack.remember(text)
    stack.embed_pending(book)

    response = stack.recall(QUESTION, limit=3)
    assert not response.degraded, list(response.warnings)
    top = ids(response)
    assert top[0] == kayak.id
    if weight:
        assert top[1] == tent.id
        assert response.results[1].vector.score == pytest.approx(1.0, abs=1e-3)
    else:
        assert tent.id not in top
        assert tent.id in ids(stack.recall(QUESTION, limit=10))


def test_a_question_about_one_thing_is_searched_as_before(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """No split: the setting changes nothing (the same ranking and scores,
    the same database read with decomposition off, then on)."""
    query = "what did I buy at the lake"
    assert parts(query) == []
    answers = []
    for weight in (0.0, 1.0):
        stack, book = vector_stack({"search.decompose_weight": weight})
        book.vectors[query] = vec(1.0)
        for axis, text in enumerate([KAYAK, TENT, *OTHERS], start=2):
            book.vectors[text] = vec(0.1 * axis, axis=axis)
            if not weight:
                stack.remember(text)
        stack.embed_pending(book)
        response = stack.recall(query)
        answers.append([(r.memory.content, round(r.score, 6)) for r in response.results])
        stack.search_thread.stop()
        stack.store_thread.stop()
    assert len(answers[0]) == 5
    assert answers[0] == answers[1]


# ---- the parts share the question's keyword statistics -------------------------------

NS = "trips"
PART_QUESTION = "Which did I buy first, the red kayak or the blue tent?"
TRIP_MEMORIES = [
    "Bought a red kayak at the lake shop",
    "The blue tent arrived today, first one I ever owned",
    "A red scarf for the winter trip",
    "Which tent to buy: the blue one or the green one",
    "Paddled the kayak across the lake before the storm",
]


class Recording:
    """A read snapshot (services.storage.db.Reads) that notes every statement,
    with its parameters, before the real snapshot runs it."""

    def __init__(self, reads: Reads) -> None:
        self.reads = reads
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    def _note(self, query: tuple[str, list[Any]]) -> None:
        self.statements.append((query[0], tuple(str(p) for p in query[1])))

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        self._note(query)
        return await self.reads.fetch_all(query)

    async def fetch_one(self, query: tuple[str, list[Any]]) -> Any:
        self._note(query)
        return await self.reads.fetch_one(query)

    async def fetch_all_isolated(self, query: tuple[str, list[Any]]) -> list[Any]:
        self._note(query)
        return await self.reads.fetch_all_isolated(query)


def statistics_sql(spec: MemoryFilterSpec) -> set[str]:
    """The statements that read the keyword channels' statistics, on either backend."""
    return {
        queries.live_count(NS, spec)[0],
        queries.live_count(None, MemoryFilterSpec())[0],
        queries.term_document_count("x")[0],
        queries.term_collection_count("x", NS, spec)[0],
        pg_text.kept_statistics(["x"], NS)[0],
    }


PATHS = {
    # the namespace holds every live memory: SQLite reads FTS5's own statistics
    "whole index": (False, MemoryFilterSpec()),
    # another namespace's memory: SQLite counts the collection and the index
    "namespace": (True, MemoryFilterSpec()),
    "filtered": (True, MemoryFilterSpec(tags=("trip",))),
}


def trip_stack(recall_stack: Callable[..., Stack], other: bool) -> Stack:
    stack: Stack = recall_stack({"providers.embedding.kind": "none"}, search=False)
    for text in TRIP_MEMORIES:
        stack.remember(text, namespace=NS, tags=["trip"])
    stack.remember("A blue kayak nobody here bought", namespace=NS)
    if other:
        stack.remember("Someone else's red tent and kayak", namespace="elsewhere")
    return stack


def recorded_recall(
    stack: Stack, spec: MemoryFilterSpec, weight: float
) -> tuple[list[tuple[str, float]], list[tuple[str, tuple[Any, ...]]]]:
    """(content and score of each hit, the statements read) of one Recall of
    PART_QUESTION, in-process over the stack's database, keywords only."""

    async def run() -> tuple[list[tuple[str, float]], list[tuple[str, tuple[Any, ...]]]]:
        pool = await open_read_pool(stack.config.storage, service="search")
        try:
            params = RecallParams(scoring=ScoringParams(min_score=0.0), decompose_weight=weight)
            recaller = Recaller(pool, QueryEmbedder(NoEmbedding()), params)
            async with pool.snapshot() as snapshot:
                recording = Recording(snapshot)
                outcome = await recaller.recall(
                    NS, PART_QUESTION, 10, spec, snapshot=recording, track_access=False
                )
            hits = [(h.memory.content, round(h.score, 6)) for h in outcome.hits]
            return hits, recording.statements
        finally:
            await pool.close()

    return asyncio.run(run())


@pytest.mark.parametrize("path", list(PATHS))
def test_the_parts_read_no_statistic_the_question_read(
    recall_stack: Callable[..., Stack], path: str
) -> None:
    """With decomposition on, the parts' keyword channels run (more statements)
    but every statistic (collection and index sizes, each term's documents) is
    read once, as with decomposition off: the parts' terms are the question's."""
    other, spec = PATHS[path]
    stack = trip_stack(recall_stack, other)
    assert len(parts(PART_QUESTION)) == 2
    off_hits, off = recorded_recall(stack, spec, 0.0)
    on_hits, on = recorded_recall(stack, spec, 1.0)
    assert off_hits and on_hits
    assert len(on) > len(off)  # the parts searched
    counted = statistics_sql(spec)
    read_off = Counter(s for s in off if s[0] in counted)
    read_on = Counter(s for s in on if s[0] in counted)
    assert read_off  # (the channel read statistics: the test sees them)
    assert max(read_off.values()) == 1
    assert read_on == read_off


@pytest.mark.parametrize("path", list(PATHS))
def test_a_part_ranks_with_shared_statistics_as_alone(
    recall_stack: Callable[..., Stack], path: str
) -> None:
    """A part's keyword ranking with the question's statistics is the one it
    reads alone, a term the question lacks counted afresh (and only it)."""
    other, spec = PATHS[path]
    stack = trip_stack(recall_stack, other)
    question, part = "red kayak lake", "the red kayak or the blue tent"

    async def run() -> None:
        pool = await open_read_pool(stack.config.storage, service="search")
        try:
            params = RecallParams(scoring=ScoringParams(min_score=0.0))
            recaller = Recaller(pool, QueryEmbedder(NoEmbedding()), params)
            async with pool.snapshot() as snapshot:
                scope = await recaller.scope(snapshot, NS, spec)
                whole_index = scope.whole_index
                assert whole_index == (pool.dialect is SQLITE and not other)
                known = await recaller.keyword.ranked(scope, question)
                alone = await recaller.keyword.ranked(scope, part)
                recording = Recording(snapshot)
                shared = await recaller.keyword.ranked(
                    replace(scope, reads=recording), part, known.statistics, with_coverage=False
                )
            assert known.statistics is not None and shared.statistics is not None
            assert alone.ranked and shared.ranked == alone.ranked
            read = " ".join(
                p for sql, ps in recording.statements if sql in statistics_sql(spec) for p in ps
            )
            assert "blue" in read and "tent" in read
            assert "kayak" not in read and "red" not in read
        finally:
            await pool.close()

    asyncio.run(run())
