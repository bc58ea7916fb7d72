"""Knowledge-graph persistence through CompleteExtractJob (seed 000 "Knowledge
Graph"): entities by canonical name, relations with running-average confidence,
idempotent mentions, a separate non-fatal transaction, and namespaces never
crossed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import backend_db
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from extract_write_helpers import (
    ADD,
    BASE,
    OUTCOME,
    complete,
    counts,
    db,
    extract_job,
    job_result,
    proposal,
    requeue_extract,
)
from recall_helpers import Stack
from store_helpers import rows

GRAPH = {"memory.pipelineV2.graphEnabled": True}


def triple(source: str, relationship: str, target: str, confidence: float) -> jq.EntityTriple:
    return jq.EntityTriple(
        source=source, relationship=relationship, target=target, confidence=confidence
    )


def entities(stack: Stack) -> dict[tuple[str, str], tuple[str, int]]:
    """(namespace, canonical_name) -> (name, mentions)."""
    return {
        (r[0], r[1]): (r[2], r[3])
        for r in rows(db(stack), "SELECT namespace, canonical_name, name, mentions FROM entities")
    }


def relations(stack: Stack) -> dict[tuple[str, str, str, str], tuple[int, float, float]]:
    """(namespace, source canonical, type, target canonical) -> (mentions, confidence, strength)."""
    return {
        (r[0], r[1], r[2], r[3]): (r[4], r[5], r[6])
        for r in rows(
            db(stack),
            "SELECT r.namespace, s.canonical_name, r.relation_type, t.canonical_name, "
            "r.mentions, r.confidence, r.strength FROM relations r "
            "JOIN entities s ON s.id = r.source_entity_id "
            "JOIN entities t ON t.id = r.target_entity_id",
        )
    }


def mentions(stack: Stack, memory_id: str) -> dict[str, tuple[str, float]]:
    return {
        r[0]: (r[1], r[2])
        for r in rows(
            db(stack),
            "SELECT e.canonical_name, m.mention_text, m.confidence FROM memory_entity_mentions m "
            "JOIN entities e ON e.id = m.entity_id WHERE m.memory_id = ?",
            memory_id,
        )
    }


@pytest.fixture
def stack(recall_stack: Callable[..., Stack]) -> Stack:
    return recall_stack({**BASE, **GRAPH}, search=False)


def test_entities_relations_and_mentions_are_written_for_the_source_memory(stack: Stack) -> None:
    source = stack.remember("Alice Smith works at Acme Corp in Berlin")
    job = extract_job(stack, source)
    response = complete(
        stack,
        job,
        [proposal(ADD, "Alice Smith works at Acme Corp")],
        entities=[
            triple("Alice  Smith", "works at", "Acme Corp", 0.9),
            triple("Acme Corp", "located_in", "Berlin", 0.6),
        ],
    )
    assert response.graph_error == ""
    # the source names all three; the fact names Alice Smith and Acme Corp (issue 17)
    assert entities(stack) == {
        ("default", "alice smith"): ("Alice Smith", 2),
        ("default", "acme corp"): ("Acme Corp", 2),
        ("default", "berlin"): ("Berlin", 1),
    }
    assert relations(stack) == {
        ("default", "alice smith", "works_at", "acme corp"): (1, pytest.approx(0.9), 1.0),
        ("default", "acme corp", "located_in", "berlin"): (1, pytest.approx(0.6), 1.0),
    }
    assert mentions(stack, source.id) == {
        "alice smith": ("Alice  Smith", pytest.approx(0.9)),
        "acme corp": ("Acme Corp", pytest.approx(0.9)),
        "berlin": ("Berlin", pytest.approx(0.6)),
    }
    # a fact is linked to the entities its text names (as a whole word), sure of it
    assert mentions(stack, response.results[0].memory_id) == {
        "alice smith": ("Alice  Smith", 1.0),
        "acme corp": ("Acme Corp", 1.0),
    }


def test_a_second_memory_counts_mentions_and_averages_confidence(stack: Stack) -> None:
    first = stack.remember("Alice works at Acme")
    second = stack.remember("alice still works at ACME")
    complete(
        stack, extract_job(stack, first), [], entities=[triple("Alice", "works_at", "Acme", 0.9)]
    )
    complete(
        stack, extract_job(stack, second), [], entities=[triple("alice", "Works At", "ACME", 0.5)]
    )
    assert entities(stack) == {
        ("default", "alice"): ("Alice", 2),
        ("default", "acme"): ("Acme", 2),
    }
    assert relations(stack) == {
        ("default", "alice", "works_at", "acme"): (2, pytest.approx((0.9 * 1 + 0.5) / 2), 1.0)
    }


def test_reprocessing_the_same_memory_is_idempotent(stack: Stack) -> None:
    source = stack.remember("Bob manages the Lisbon office")
    graph = [triple("Bob", "manages", "Lisbon office", 0.8)]
    complete(stack, extract_job(stack, source), [], entities=graph)
    before = (entities(stack), relations(stack), mentions(stack, source.id))
    requeue_extract(stack, source)
    again = complete(stack, extract_job(stack, source), [], entities=graph)
    assert again.outcome == jq.LEASE_OUTCOME_OK and again.graph_error == ""
    assert (entities(stack), relations(stack), mentions(stack, source.id)) == before


def test_the_graph_never_crosses_namespaces(stack: Stack) -> None:
    a = stack.remember("Carol works at Initech", namespace="team-a")
    b = stack.remember("Carol works at Initech", namespace="team-b")
    for memory in (a, b):
        complete(
            stack,
            extract_job(stack, memory),
            [],
            entities=[triple("Carol", "works_at", "Initech", 0.7)],
        )
    assert entities(stack) == {
        ("team-a", "carol"): ("Carol", 1),
        ("team-a", "initech"): ("Initech", 1),
        ("team-b", "carol"): ("Carol", 1),
        ("team-b", "initech"): ("Initech", 1),
    }
    assert set(relations(stack)) == {
        ("team-a", "carol", "works_at", "initech"),
        ("team-b", "carol", "works_at", "initech"),
    }
    cross = rows(
        db(stack),
        "SELECT count(*) FROM memory_entity_mentions m JOIN entities e ON e.id = m.entity_id "
        "WHERE m.namespace != e.namespace",
    )[0][0]
    assert cross == 0


def test_a_failing_graph_write_is_reported_and_the_facts_stay(stack: Stack) -> None:
    source = stack.remember("Dave founded Globex in Springfield")
    job = extract_job(stack, source)
    # A real database failure, injected into the file the store writes.
    backend_db.refuse_inserts(db(stack), "entities", "entities are refused")
    response = complete(
        stack,
        job,
        [proposal(ADD, "Dave founded Globex")],
        entities=[triple("Dave", "founded", "Globex", 0.9)],
    )
    assert response.outcome == jq.LEASE_OUTCOME_OK
    assert "entities are refused" in response.graph_error
    assert response.results[0].outcome == OUTCOME.Value("PROPOSAL_OUTCOME_CREATED")
    assert stack.store.GetMemory(store_pb2.GetMemoryRequest(id=response.results[0].memory_id))
    assert job_result(stack, job)[0] == "completed"
    graph = counts(stack)
    assert (graph["entities"], graph["relations"], graph["memory_entity_mentions"]) == (0, 0, 0)


@pytest.mark.parametrize(
    "overrides",
    [{}, {**GRAPH, "memory.pipelineV2.shadowMode": True}],
    ids=["graph off", "shadow mode"],
)
def test_no_graph_rows_when_off_or_in_shadow_mode(
    recall_stack: Callable[..., Stack], overrides: dict[str, Any]
) -> None:
    stack = recall_stack({**BASE, **overrides}, search=False)
    source = stack.remember("Erin mentors Frank")
    response = complete(
        stack, extract_job(stack, source), [], entities=[triple("Erin", "mentors", "Frank", 0.9)]
    )
    assert response.outcome == jq.LEASE_OUTCOME_OK and response.graph_error == ""
    graph = counts(stack)
    assert (graph["entities"], graph["relations"], graph["memory_entity_mentions"]) == (0, 0, 0)
