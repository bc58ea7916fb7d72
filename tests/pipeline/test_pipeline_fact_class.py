"""Importance, temporal class and categories from extraction (seed 004 §4-6): validated
like the rest of the model's answer, written on the pipeline's memories, returned on
Memory and filterable in ListMemories and Recall. A real store, search and pipeline
against a scripted LLM server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram.common.v1 import memory_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from llm_fakes import LlmServer, scripted
from recall_helpers import Stack, wait_for
from services.pipeline.extraction import parse_extraction
from store_helpers import rows

WORKER = {
    "memory.pipelineV2.enabled": True,
    "memory.pipelineV2.workerPollMs": 100,
    "providers.embedding.kind": "none",
    "providers.llm.timeout_ms": 5000,
    "search.min_score": 0.0,
}


def answer(**fact: Any) -> str:
    return json.dumps({"facts": [{"content": "Alice works at Acme Corp", **fact}]})


def test_valid_fields_are_kept() -> None:
    result = parse_extraction(
        answer(
            type="fact",
            confidence=0.9,
            importance=0.35,
            temporal="short_term",
            valid_until="2099-12-01",
            categories=["Work", "work", " team  members "],
        )
    )
    [fact] = result.facts
    assert fact.importance == 0.35 and fact.temporal_class == "short_term"
    assert fact.valid_until == "2099-12-01T23:59:59.000000000Z"
    assert fact.categories == ("work", "team members")
    assert result.warnings == []


@pytest.mark.parametrize(
    ("fields", "expected", "warning"),
    [
        ({"importance": 3}, {"importance": 1.0}, "importance 3 clamped"),
        ({"importance": "high"}, {"importance": None}, "invalid importance"),
        ({"temporal": "forever"}, {"temporal_class": ""}, "unknown temporal class"),
        (
            {"temporal": "permanent", "valid_until": "2099-12-01"},
            {"temporal_class": "permanent", "valid_until": None},
            "valid_until given for a permanent fact",
        ),
        (
            {"temporal": "short_term", "valid_until": "next tuesday"},
            {"valid_until": None},
            "not an ISO date",
        ),
        ({"categories": "work"}, {"categories": ()}, "categories is not a list"),
        ({"categories": ["a", 7, ""]}, {"categories": ("a",)}, "not a non-empty string"),
        (
            {"categories": [f"c{i}" for i in range(12)]},
            {"categories": tuple(f"c{i}" for i in range(8))},
            "only the first 8 kept",
        ),
    ],
)
def test_bad_fields_are_repaired_with_a_warning_and_the_fact_kept(
    fields: dict[str, Any], expected: dict[str, Any], warning: str
) -> None:
    result = parse_extraction(answer(type="fact", confidence=0.9, **fields))
    [fact] = result.facts
    for name, value in expected.items():
        assert getattr(fact, name) == value
    assert any(warning in w for w in result.warnings), result.warnings


def test_a_fact_without_the_new_fields_is_unclassified() -> None:
    [fact] = parse_extraction(answer(type="fact", confidence=0.7)).facts
    assert (fact.importance, fact.temporal_class, fact.valid_until, fact.categories) == (
        None,
        "",
        None,
        (),
    )


def facts_for(memory: str) -> list[dict[str, Any]]:
    if "rotation" in memory:
        return [
            {
                "content": "Bob covers the on-call rotation",
                "type": "fact",
                "confidence": 0.9,
                "temporal": "short_term",
                "valid_until": "2020-01-05",
            },
            {
                "content": "Carol covers the on-call rotation until 2099",
                "type": "fact",
                "confidence": 0.9,
                "temporal": "short_term",
                "valid_until": "2099-01-01",
            },
        ]
    if "standup" in memory:
        return [
            {
                "content": "The team standup moves to 10am until December",
                "type": "decision",
                "confidence": 0.9,
                "importance": 0.4,
                "temporal": "short_term",
                "valid_until": "2099-12-01",
                "categories": ["team_workflow", "Meetings"],
            }
        ]
    return [
        {
            "content": "Postgres is the primary database",
            "type": "fact",
            "confidence": 0.8,
            "temporal": "permanent",
            "categories": ["database"],
        }
    ]


@pytest.fixture
def stack(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> Stack:
    llm = http_servers(LlmServer(scripted(facts_for)))
    stack = recall_stack({**WORKER, "providers.llm.base_url": llm.url})
    stack.config = stack.config.with_overrides(
        {"clients.search_address": f"127.0.0.1:{stack.search_thread.app.port}"}
    )
    stack.pipeline_thread, stack.pipeline = start_pipeline_server(stack.config)
    return stack


def listed(stack: Stack, **filter_fields: Any) -> list[Any]:
    request = store_pb2.ListMemoriesRequest(filter=memory_pb2.MemoryFilter(**filter_fields))
    return list(stack.store.ListMemories(request).memories)


def test_pipeline_memories_carry_importance_class_and_categories(stack: Stack) -> None:
    stack.remember("From now on the standup is at 10am, until December")
    stack.remember("We run everything on Postgres")
    wait_for(lambda: len(listed(stack, categories=["database"])) == 1, what="facts written")
    wait_for(lambda: len(listed(stack, categories=["meetings"])) == 1, what="facts written")
    [standup] = listed(stack, categories=["Meetings", "team_workflow"])
    assert standup.content == "The team standup moves to 10am until December"
    assert standup.importance == pytest.approx(0.4)  # the model's, not the confidence
    assert list(standup.categories) == ["team_workflow", "meetings"]
    assert standup.temporal_class == memory_pb2.TEMPORAL_CLASS_SHORT_TERM
    assert standup.valid_until.ToJsonString() == "2099-12-01T23:59:59Z"
    [postgres] = listed(stack, categories=["database"])
    assert postgres.importance == pytest.approx(0.8)  # no importance: the confidence
    assert postgres.temporal_class == memory_pb2.TEMPORAL_CLASS_PERMANENT
    assert not postgres.HasField("valid_until")
    # raw memories are not classified; a category filter leaves them out
    raw = [m for m in listed(stack) if m.who != "pipeline-v2"]
    assert len(raw) == 2 and all(not m.categories and not m.temporal_class for m in raw)
    assert listed(stack, categories=["database", "meetings"]) == []
    recalled = stack.search.Recall(
        search_pb2.RecallRequest(
            query="database", filter=memory_pb2.MemoryFilter(categories=["database"])
        ),
        timeout=30,
    )
    assert [r.memory.id for r in recalled.results] == [postgres.id]


def test_extract_rpc_returns_the_new_fields(stack: Stack) -> None:
    response = stack.pipeline.Extract(
        pb.ExtractRequest(content="the standup is at 10am until December"), timeout=30
    )
    [fact] = response.facts
    assert fact.importance == pytest.approx(0.4)
    assert fact.temporal_class == memory_pb2.TEMPORAL_CLASS_SHORT_TERM
    assert list(fact.categories) == ["team_workflow", "meetings"]
    assert fact.valid_until.ToJsonString() == "2099-12-01T23:59:59Z"


def test_a_short_term_fact_past_its_end_leaves_reads_of_now(stack: Stack) -> None:
    """Issue 17 has landed: the end is the memory's valid_until, so reads of what
    is valid now leave it out (rather than ranking it lower); GetMemory keeps it."""
    stack.remember("on-call rotation notes")
    current = wait_for(
        lambda: [m for m in listed(stack) if m.content.startswith("Carol")], what="facts written"
    )
    assert current[0].valid_until.ToJsonString() == "2099-01-01T23:59:59Z"
    [(ended_id,)] = rows(
        Path(stack.config.storage.path), "SELECT id FROM memories WHERE content LIKE 'Bob%'"
    )
    assert all(not m.content.startswith("Bob") for m in listed(stack))
    recalled = stack.search.Recall(search_pb2.RecallRequest(query="on-call rotation"), timeout=30)
    assert [r.memory.content for r in recalled.results if r.memory.who == "pipeline-v2"] == [
        current[0].content
    ]
    ended = stack.store.GetMemory(store_pb2.GetMemoryRequest(id=ended_id)).memory
    assert ended.temporal_class == memory_pb2.TEMPORAL_CLASS_SHORT_TERM
    assert ended.valid_until.ToJsonString() == "2020-01-05T23:59:59Z"
