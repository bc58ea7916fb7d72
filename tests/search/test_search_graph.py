"""Graph-augmented recall (seed 000 "Graph-Augmented Search"): memories linked
to the query's entities (and their one-hop neighbours) get an additive boost and
may join the results; namespaces, filters and deletions still hold; a slow or
broken graph never fails recall. The graph is written the way the pipeline
writes it: CompleteExtractJob with entity triples."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram.store.v1 import store_pb2
from extract_write_helpers import link, write_directly
from recall_helpers import Stack, ids
from services.common.memory_filter import MemoryFilterSpec
from services.search.graph_boost import graph_boost, query_tokens
from services.storage.db import open_read_pool
from store_helpers import rows

# The pipeline on (no pipeline process runs): Remember queues the extract jobs
# through which these tests record entity triples.
KEYWORDS_ONLY = {
    "providers.embedding.kind": "none",
    "search.min_score": 0.0,
    "memory.pipelineV2.enabled": True,
}
GRAPH_ON = {"memory.pipelineV2.graphEnabled": True, "memory.pipelineV2.graphBoostWeight": 0.3}


def people(stack: Stack, namespace: str = "default") -> dict[str, Any]:
    """alice: mentions Alice Smith; bob: mentions Acme (Alice's employer, one hop);
    tea: matches the keyword 'alice' only; far: unrelated."""
    memories = {
        "alice": stack.remember("Alice Smith joined the platform team", namespace=namespace),
        "bob": stack.remember("Bob runs the payroll department", namespace=namespace),
        "tea": stack.remember("alice likes green tea", namespace=namespace),
        "far": stack.remember("The office plants need water", namespace=namespace),
    }
    link(stack, memories["alice"], ("Alice Smith", "works_at", "Acme Corp"))
    link(stack, memories["bob"], ("Bob", "works_at", "Acme Corp"))
    return memories


def by_id(response: Any) -> dict[str, Any]:
    return {r.memory.id: r for r in response.results}


def test_graph_linked_memories_are_boosted_and_join_the_results(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({**KEYWORDS_ONLY, **GRAPH_ON})
    m = people(stack)
    response = stack.recall("Where does alice work?")
    results = by_id(response)
    assert list(response.warnings) == []
    assert results[m["alice"].id].graph_boost == pytest.approx(0.3)
    assert results[m["bob"].id].graph_boost == pytest.approx(0.3), "one hop through Acme Corp"
    assert results[m["bob"].id].keyword.rank == 0, "brought in by the graph alone"
    assert results[m["tea"].id].graph_boost == 0.0
    assert m["far"].id not in results
    assert ids(response)[0] == m["alice"].id, "lifted above the shorter keyword match"


def test_graph_off_changes_nothing(recall_stack: Callable[..., Stack]) -> None:
    stack = recall_stack(KEYWORDS_ONLY)  # graphEnabled defaults to false
    m = people(stack)
    response = stack.recall("Where does alice work?")
    results = by_id(response)
    assert ids(response) == [m["tea"].id, m["alice"].id]
    assert {r.graph_boost for r in results.values()} == {0.0}


def test_the_graph_stays_in_the_namespace_and_respects_filters_and_deletes(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({**KEYWORDS_ONLY, **GRAPH_ON})
    a = people(stack, "team-a")
    b = people(stack, "team-b")
    results = by_id(stack.recall("alice", namespace="team-a"))
    assert set(results) == {a["alice"].id, a["bob"].id, a["tea"].id}
    assert not set(results) & {m.id for m in b.values()}

    only_issue = stack.recall("alice", namespace="team-a", types=["issue"])
    assert list(only_issue.results) == []

    stack.store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace="team-a", id=a["bob"].id, reason="left")
    )
    assert a["bob"].id not in by_id(stack.recall("alice", namespace="team-a"))


def test_a_broken_graph_never_fails_recall(recall_stack: Callable[..., Stack]) -> None:
    stack = recall_stack({**KEYWORDS_ONLY, **GRAPH_ON})
    m = people(stack)
    write_directly(stack, "DROP TABLE relations")
    response = stack.recall("alice")
    assert set(ids(response)) == {m["alice"].id, m["tea"].id}
    assert {r.graph_boost for r in response.results} == {0.0}
    assert list(response.warnings) == ["graph boost failed; results without it"]


def _boost(storage: Any, namespace: str, query: str, timeout_s: float) -> Any:
    async def run() -> Any:
        reads = await open_read_pool(storage, service="search")
        try:
            return await graph_boost(
                reads, namespace, query, MemoryFilterSpec(), timeout_s, dialect=reads.dialect
            )
        finally:
            await reads.close()

    return asyncio.run(run())


def test_the_lookup_returns_what_it_has_when_the_deadline_has_passed(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({**KEYWORDS_ONLY, **GRAPH_ON}, search=False)
    m = people(stack)
    path = Path(stack.config.storage.path)
    rowid = {r[0]: r[1] for r in rows(path, "SELECT id, rowid FROM memories")}
    storage = stack.config.storage
    in_time = _boost(storage, "default", "alice", timeout_s=30.0)
    assert in_time.rowids == {rowid[m["alice"].id], rowid[m["bob"].id]}
    assert not in_time.timed_out
    late = _boost(storage, "default", "alice", timeout_s=-1.0)  # a deadline already passed
    assert (late.rowids, late.timed_out, late.failed) == (frozenset(), True, False)
    nothing = _boost(storage, "default", "zebra", timeout_s=-1.0)  # no entity: no work to cut
    assert (nothing.rowids, nothing.timed_out) == (frozenset(), False)


@pytest.mark.parametrize(
    ("query", "tokens"),
    [
        ("Where does Alice work?", ["alice", "work"]),
        ("a b c", []),
        ("100% of_the 50_50 deals", ["100", "50", "deals"]),
        ("ALICE alice", ["alice"]),
        ("Who is she?", ["who", "is", "she"]),  # stop words only: they are what there is
        ("Zoë in 東京 or 京", ["zoë", "東京", "京"]),
        ("東京に行きたい", ["東京に行きたい"]),
    ],
)
def test_query_tokens(query: str, tokens: list[str]) -> None:
    assert query_tokens(query) == tokens


def test_an_entity_in_an_unspaced_script_starts_a_graph_boost(
    recall_stack: Callable[..., Stack],
) -> None:
    """FTS5's unicode61 keeps "東京に行きたい" ("I want to go to Tokyo") as one
    token: the entity "東京" is found inside it, not as a whole word."""
    stack = recall_stack({**KEYWORDS_ONLY, **GRAPH_ON})
    offsite = stack.remember("The team offsite is planned for the spring")
    other = stack.remember("Quarterly numbers are due on Friday")
    link(stack, offsite, ("東京", "hosts", "Team offsite"))
    link(stack, other, ("大阪", "hosts", "Quarterly review"))
    for query in ("東京に行きたい", "東京", "Tokyo: 東京"):
        response = stack.recall(query)
        assert list(response.warnings) == []
        results = by_id(response)
        assert results[offsite.id].graph_boost == pytest.approx(0.3), query
        assert other.id not in results, query
