"""Entity types and aliases end to end (issue 17, seed 003 "entities"): a
scripted Ollama model names entities with a type and aliases, the real
pipeline validates them and the real store resolves them by canonical name or
alias; GetEntity and ListEntities read the result. Extract (the dry run)
shows the same validation: an unknown type becomes `thing` with a warning."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.store.v1 import store_pb2
from llm_fakes import LlmServer, decision_answer, is_extraction, memory_of
from recall_helpers import Stack, wait_for
from store_helpers import rows

WORKER = {
    "memory.pipelineV2.enabled": True,
    "memory.pipelineV2.graphEnabled": True,
    "memory.pipelineV2.workerPollMs": 100,
    "providers.embedding.kind": "none",
    "providers.llm.timeout_ms": 1000,
    "search.min_score": 0.0,
}

ANSWERS: dict[str, dict[str, Any]] = {
    "Ana Silva moved to Lisbon last spring. Ana works at Acme Corp.": {
        "facts": [
            {"content": "Ana Silva lives in Lisbon", "type": "fact", "confidence": 0.9},
            {"content": "Ana works at Acme Corp", "type": "fact", "confidence": 0.9},
        ],
        "entities": [
            {"source": "Ana Silva", "relationship": "lives_in", "target": "Lisbon"},
            {"source": "Ana", "relationship": "works at", "target": "Acme Corp"},
        ],
        "named_entities": [
            {"name": "Ana Silva", "type": "Person", "aliases": ["Ana", "ana", ""]},
            {"name": "Lisbon", "type": "city", "aliases": []},
            {"name": "Acme Corp", "type": "organisation", "aliases": ["Acme"]},
            {"name": "last spring", "type": "season"},
        ],
    },
    "Annie from Acme says the Lisbon office is great": {
        "facts": [{"content": "The Acme office in Lisbon is great", "confidence": 0.9}],
        "entities": [],
        "named_entities": [
            {"name": "Ana", "type": "person", "aliases": ["Annie"]},
            {"name": "Acme", "type": "organization"},
            {"name": "Lisbon", "type": "place"},
        ],
    },
}


def model(prompt: str) -> str:
    if is_extraction(prompt):
        return json.dumps(ANSWERS.get(memory_of(prompt), {"facts": [], "entities": []}))
    return decision_answer("ADD", reason="new information")


@pytest.fixture
def llm(http_servers: Callable[[Any], Any]) -> LlmServer:
    return http_servers(LlmServer(model))  # type: ignore[no-any-return]


@pytest.fixture
def stack(
    recall_stack: Callable[..., Stack], start_pipeline_server: Callable[..., Any], llm: LlmServer
) -> Stack:
    stack = recall_stack({**WORKER, "providers.llm.base_url": llm.url})
    stack.config = stack.config.with_overrides(
        {"clients.search_address": f"127.0.0.1:{stack.search_thread.app.port}"}
    )
    stack.pipeline_thread, stack.pipeline = start_pipeline_server(stack.config)
    return stack


def extracted(stack: Stack, memory_id: str) -> None:
    """The memory's extract job completed and its graph write (a transaction of
    its own after the job's, services/store/extraction_writes.py) landed."""
    wait_for(
        lambda: rows(
            stack.config.storage.path,
            "SELECT 1 FROM memory_jobs WHERE memory_id = ? AND job_type = 'extract' "
            "AND status = 'completed'",
            memory_id,
        ),
        what="extract job completed",
    )
    wait_for(
        lambda: rows(
            stack.config.storage.path,
            "SELECT 1 FROM memory_entity_mentions WHERE memory_id = ?",
            memory_id,
        ),
        what="graph written",
    )


def test_extracted_entities_are_typed_aliased_and_resolved_by_alias(stack: Stack) -> None:
    first = stack.remember("Ana Silva moved to Lisbon last spring. Ana works at Acme Corp.")
    extracted(stack, first.id)
    [result] = rows(
        stack.config.storage.path,
        "SELECT result FROM memory_jobs WHERE memory_id = ? AND job_type = 'extract'",
        first.id,
    )
    warnings = json.loads(result[0])["warnings"]
    assert "named_entities[3]: unknown type 'season'; using 'thing'" in warnings
    assert "named_entities[0]: an alias that is not a non-empty string; dropped" in warnings

    ana = stack.store.GetEntity(store_pb2.GetEntityRequest(name="ANA")).entity
    assert (ana.name, ana.entity_type, list(ana.aliases)) == ("Ana Silva", "person", ["Ana"])
    facts = stack.store.GetEntity(store_pb2.GetEntityRequest(id=ana.id)).facts
    assert sorted(m.content for m in facts) == [
        "Ana Silva lives in Lisbon",
        "Ana Silva moved to Lisbon last spring. Ana works at Acme Corp.",
        "Ana works at Acme Corp",
    ]
    types = {
        e.name: e.entity_type
        for e in stack.store.ListEntities(store_pb2.ListEntitiesRequest()).entities
    }
    assert types == {
        "Ana Silva": "person",
        "Lisbon": "place",
        "Acme Corp": "organization",
        "last spring": "thing",
    }

    second = stack.remember("Annie from Acme says the Lisbon office is great")
    extracted(stack, second.id)
    again = stack.store.GetEntity(store_pb2.GetEntityRequest(name="annie"))
    assert again.entity.id == ana.id and list(again.entity.aliases) == ["Ana", "Annie"]
    acme = stack.store.GetEntity(store_pb2.GetEntityRequest(name="Acme")).entity
    assert (acme.name, acme.mention_count) == ("Acme Corp", 4)  # 2 memories, 2 facts
    neighbours = {(n.entity.name, n.relation_type, n.outgoing) for n in again.neighbors}
    assert neighbours == {("Lisbon", "lives_in", True), ("Acme Corp", "works_at", True)}
    places = stack.store.ListEntities(store_pb2.ListEntitiesRequest(entity_type="place"))
    assert [(e.name, e.mention_count) for e in places.entities] == [("Lisbon", 4)]


def test_extract_dry_run_returns_typed_entities_and_writes_nothing(stack: Stack) -> None:
    reply = stack.pipeline.Extract(
        pb.ExtractRequest(content="Ana Silva moved to Lisbon last spring. Ana works at Acme Corp."),
        timeout=10,
    )
    assert [(n.name, n.entity_type, list(n.aliases)) for n in reply.named_entities] == [
        ("Ana Silva", "person", ["Ana"]),
        ("Lisbon", "place", []),
        ("Acme Corp", "organization", ["Acme"]),
        ("last spring", "thing", []),
    ]
    assert list(stack.store.ListEntities(store_pb2.ListEntitiesRequest()).entities) == []
