"""The session consolidation worker through real servers (issue 17, seed 003):
store + search + pipeline on port 0 over one SQLite file, and a scripted LLM
(Ollama and OpenAI-compatible) on a loopback port. A new session ends the
previous one; its consolidate_session job is leased, the LLM turns the
session's memories into facts, entities and causal links, and the store
writes them: the facts are listed and recalled, ExplainMemory shows what they
were derived from, ListMemoryLinks the causal links, GetSession the state. A
bad answer or a 5xx is a failed attempt, retried, and dead after
`workerMaxRetries` with nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_pipeline_summarize_worker import make_stack_with

import backend_db
from engram.client import Engram, NotFound
from engram.pipeline.v1 import pipeline_pb2 as ppb
from engram.store.v1 import store_pb2 as S
from http_fakes import Reply
from llm_fakes import LlmServer, is_consolidation, session_memories_of
from recall_helpers import Stack, wait_for
from services.common.clock import days_ago_text
from store_helpers import rows

CONSOLIDATION = {
    "sessions.consolidate": "on",
    "memory.pipelineV2.graphEnabled": True,
}


@pytest.fixture
def make_stack(
    recall_stack: Callable[..., Stack], start_pipeline_server: Callable[..., Any]
) -> Callable[..., Stack]:
    make = make_stack_with(recall_stack, start_pipeline_server)
    return lambda llm, **overrides: make(llm, **{**CONSOLIDATION, **overrides})


def turn(stack: Stack, session: str, content: str, namespace: str = "") -> str:
    response = stack.store.AppendTurn(
        S.AppendTurnRequest(
            namespace=namespace, session_id=session, role=S.TURN_ROLE_USER, content=content
        )
    )
    return str(response.memory.id)


def session(stack: Stack, session_id: str, namespace: str = "") -> S.GetSessionResponse:
    return stack.store.GetSession(S.GetSessionRequest(namespace=namespace, session_id=session_id))


def settled(stack: Stack, session_id: str, namespace: str = "") -> S.GetSessionResponse:
    done = (S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED, S.SESSION_CONSOLIDATION_STATE_FAILED)
    return wait_for(
        lambda: (s := session(stack, session_id, namespace)).state in done and s,
        what=f"session {session_id} consolidated or failed",
    )


def consolidate_jobs(stack: Stack) -> list[dict[str, Any]]:
    names = ("id", "namespace", "status", "attempts", "error", "result")
    found = rows(
        Path(stack.config.storage.path),
        f"SELECT {', '.join(names)} FROM memory_jobs WHERE job_type = 'consolidate_session' "
        "ORDER BY created_at",
    )
    return [dict(zip(names, row, strict=True)) for row in found]


def consolidated_facts(stack: Stack, namespace: str = "") -> list[Any]:
    listed = stack.store.ListMemories(S.ListMemoriesRequest(namespace=namespace)).memories
    return [m for m in listed if m.source_type == "consolidation"]


def facts_by_id(facts: dict[str, Any]) -> dict[str, Any]:
    return {f.id: f for f in facts.values()}


def worker_status(stack: Stack) -> Any:
    status = stack.pipeline.GetStatus(ppb.GetStatusRequest(), timeout=10)
    [worker] = [w for w in status.workers if w.name == "consolidate"]
    return worker


def consolidator(prompt: str) -> str | Reply:
    """Facts citing the refs the prompt holds: the move (from the first memory),
    the job (first and second), a causal link from the second to the first."""
    if not is_consolidation(prompt):
        return Reply(500, {"error": "only consolidations are expected"})
    memories = session_memories_of(prompt)
    refs = [m["ref"] for m in memories]
    facts = [
        {
            "content": f"The user says: {memories[0]['text']}",
            "type": "semantic",
            "confidence": 0.9,
            "sources": refs[:1],
            "entities": [
                {
                    "source": "user",
                    "relationship": "lives_in",
                    "target": "Lisbon",
                    "confidence": 0.9,
                }
            ],
        }
    ]
    causal = []
    if len(refs) > 1:
        facts.append(
            {
                "content": "The user moved to Lisbon for a new job at Acme",
                "type": "fact",
                "confidence": 0.85,
                "sources": refs[:2],
            }
        )
        causal.append({"cause": refs[1], "effect": refs[0]})
    named = [
        {"name": "Lisbon", "type": "city", "aliases": ["Lisboa"]},
        {"name": "Acme", "type": "company", "aliases": []},
    ]
    return json.dumps({"facts": facts, "named_entities": named, "causal": causal})


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_a_new_session_consolidates_the_previous_one(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any], protocol: str
) -> None:
    llm = http_servers(LlmServer(consolidator, protocol=protocol))
    stack = make_stack(llm, **{"providers.llm.kind": protocol})
    moved = turn(stack, "chat-1", "I moved to Lisbon last month")
    job = turn(stack, "chat-1", "I took the job at Acme there")
    assert session(stack, "chat-1").state == S.SESSION_CONSOLIDATION_STATE_OPEN
    turn(stack, "chat-2", "Hi, new conversation")
    done = settled(stack, "chat-1")
    assert done.state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    assert done.end_reason == "new_session"
    [prompt] = llm.prompts()
    assert [m["text"] for m in session_memories_of(prompt)] == [
        "I moved to Lisbon last month",
        "I took the job at Acme there",
    ]
    facts = {f.content: f for f in consolidated_facts(stack)}
    assert set(facts) == {
        "The user says: I moved to Lisbon last month",
        "The user moved to Lisbon for a new job at Acme",
    }
    both = facts["The user moved to Lisbon for a new job at Acme"]
    assert (both.who, both.type) == ("pipeline-consolidator", "fact")
    explained = stack.store.ExplainMemory(S.ExplainMemoryRequest(id=both.id))
    assert {m.id for m in explained.derived_from} == {moved, job}
    [link] = stack.store.ListMemoryLinks(
        S.ListMemoryLinksRequest(memory_id=job, link_types=["causal"])
    ).links
    assert (link.from_memory_id, link.to_memory_id) == (job, moved)
    recalled = stack.recall("Acme Lisbon job")
    assert both.id in [r.memory.id for r in recalled.results]
    # the entities, typed and aliased, and the facts that name them (GetEntity)
    lisbon = stack.store.GetEntity(S.GetEntityRequest(name="Lisboa"))
    assert (lisbon.entity.name, lisbon.entity.entity_type) == ("Lisbon", "place")
    assert list(lisbon.entity.aliases) == ["Lisboa"]
    assert {f.id for f in lisbon.facts} == set(facts_by_id(facts))
    acme = stack.store.GetEntity(S.GetEntityRequest(name="acme"))
    assert acme.entity.entity_type == "organization"
    assert [f.id for f in acme.facts] == [both.id]
    assert "user" in [n.entity.name for n in lisbon.neighbors]
    [row] = consolidate_jobs(stack)
    assert (row["status"], row["attempts"]) == ("completed", 1)
    assert wait_for(lambda: worker_status(stack).completed_count == 1, what="worker status")
    # the new session is still open: nothing consolidated it
    assert session(stack, "chat-2").state == S.SESSION_CONSOLIDATION_STATE_OPEN


def test_invalid_items_are_dropped_with_warnings(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    def sloppy(prompt: str) -> str:
        [first] = [m["ref"] for m in session_memories_of(prompt)]
        return json.dumps(
            {
                "facts": [
                    {"content": "The user plays the cello", "confidence": 0.9, "sources": [first]},
                    {
                        "content": "Cites nothing of the session",
                        "confidence": 0.9,
                        "sources": ["m9"],
                    },
                    {"content": "", "sources": [first]},
                    "not an object",
                ],
                "causal": [{"cause": first, "effect": "m42"}, {"cause": first, "effect": first}],
            }
        )

    stack = make_stack(http_servers(LlmServer(sloppy)))
    turn(stack, "chat-1", "I play the cello every evening")
    turn(stack, "chat-2", "next")
    assert settled(stack, "chat-1").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    assert [f.content for f in consolidated_facts(stack)] == ["The user plays the cello"]
    [row] = consolidate_jobs(stack)
    warnings = json.loads(row["result"])["warnings"]
    assert any(w.startswith("facts[1].sources: 'm9'") for w in warnings)
    assert any(w.startswith("facts[1]: cites no memory") for w in warnings)
    assert any(w.startswith("facts[2]:") for w in warnings)
    assert any(w.startswith("facts[3]: not an object") for w in warnings)
    assert any(w.startswith("causal[0]:") for w in warnings)
    assert any(w.startswith("causal[1]: a memory cannot cause itself") for w in warnings)


def test_an_llm_failure_is_retried(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    answers = iter([Reply(500, {"error": "boom"}), "not json at all"])

    def flaky(prompt: str) -> str | Reply:
        return next(answers, None) or consolidator(prompt)

    stack = make_stack(http_servers(LlmServer(flaky)), **{"memory.pipelineV2.workerMaxRetries": 3})
    turn(stack, "chat-1", "I moved to Lisbon last month")
    turn(stack, "chat-2", "next")
    assert settled(stack, "chat-1").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    [row] = consolidate_jobs(stack)
    assert (row["status"], row["attempts"]) == ("completed", 3)
    assert len(consolidated_facts(stack)) == 1


def test_an_llm_that_always_fails_leaves_a_failed_session_and_nothing_written(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(lambda prompt: Reply(500, {"error": "boom"})))
    stack = make_stack(llm, **{"memory.pipelineV2.workerMaxRetries": 2})
    turn(stack, "chat-1", "I moved to Lisbon last month")
    turn(stack, "chat-2", "next")
    failed = settled(stack, "chat-1")
    assert failed.state == S.SESSION_CONSOLIDATION_STATE_FAILED and failed.error
    [row] = consolidate_jobs(stack)
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert consolidated_facts(stack) == []
    # a new memory of the session reopens it; the next session switch retries
    turn(stack, "chat-1", "still in Lisbon")
    assert session(stack, "chat-1").state == S.SESSION_CONSOLIDATION_STATE_OPEN


def test_the_same_session_id_in_two_namespaces_is_consolidated_apart(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(consolidator))
    stack = make_stack(llm)
    turn(stack, "chat", "I moved to Lisbon last month", namespace="team-a")
    turn(stack, "chat", "I moved to Porto last year", namespace="team-b")
    turn(stack, "next", "team a moves on", namespace="team-a")
    assert settled(stack, "chat", "team-a").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    assert session(stack, "chat", "team-b").state == S.SESSION_CONSOLIDATION_STATE_OPEN
    [prompt] = llm.prompts()
    assert [m["text"] for m in session_memories_of(prompt)] == ["I moved to Lisbon last month"]
    assert [f.content for f in consolidated_facts(stack, "team-a")] == [
        "The user says: I moved to Lisbon last month"
    ]
    assert consolidated_facts(stack, "team-b") == []
    # the Python client's view of the same
    with Engram(f"127.0.0.1:{stack.store_thread.app.port}") as engram:
        state = engram.get_session("chat", namespace="team-a")
        assert state.state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
        assert state.end_reason == "new_session"
        with pytest.raises(NotFound):
            engram.get_session("next", namespace="team-b")


def test_an_idle_session_is_consolidated(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(consolidator))
    stack = make_stack(llm, **{"sessions.consolidate_check_interval_ms": 100})
    turn(stack, "chat-1", "I moved to Lisbon last month")
    assert session(stack, "chat-1").state == S.SESSION_CONSOLIDATION_STATE_OPEN
    # its last memory is now two hours old (the default idle time is 30 minutes)
    age(stack, "chat-1", hours=2)
    done = settled(stack, "chat-1")
    assert (done.state, done.end_reason) == (S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED, "idle")
    assert [f.content for f in consolidated_facts(stack)] == [
        "The user says: I moved to Lisbon last month"
    ]


def test_a_consolidated_session_is_not_consolidated_again(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(consolidator))
    stack = make_stack(llm, **{"sessions.consolidate_check_interval_ms": 100})
    turn(stack, "chat-1", "I moved to Lisbon last month")
    turn(stack, "chat-2", "Hi, new conversation")
    settled(stack, "chat-1")
    # more triggers: another session switch, and chat-1 idling past the idle time
    turn(stack, "chat-3", "and another one")
    settled(stack, "chat-2")
    age(stack, "chat-1", hours=2)
    age(stack, "chat-3", hours=2)
    settled(stack, "chat-3")
    texts = [[m["text"] for m in session_memories_of(p)] for p in llm.prompts()]
    assert sorted(texts) == [
        ["Hi, new conversation"],
        ["I moved to Lisbon last month"],
        ["and another one"],
    ]
    assert [r["status"] for r in consolidate_jobs(stack)] == ["completed"] * 3
    assert len(consolidated_facts(stack)) == 3


def age(stack: Stack, session_id: str, *, hours: float) -> None:
    """Move the session's last-seen time into the past (a test cannot idle for
    half an hour), as the store's own clock would have."""
    backend_db.execute(
        stack.config.storage.path,
        "UPDATE session_consolidations SET last_seen_at = ? WHERE session_id = ?",
        days_ago_text(hours / 24),
        session_id,
    )
