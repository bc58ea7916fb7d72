"""The LoCoMo and LongMemEval runners import conversations as agents write
them, each turn in its session (issue 34: imported without sessions, no
temporal link was built and no benchmark took the "when" route's link hop,
which went INTERNAL on every session of three memories or more). Their
import functions run against a real store + search pair, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from recall_helpers import Stack

KEYWORDS_ONLY = {"providers.embedding.kind": "none", "search.min_score": 0.0}

CONVERSATION = {
    "sample_id": "conv-t",
    "conversation": {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel, how have you been?"},
            {
                "speaker": "Caroline",
                "dia_id": "D1:2",
                "text": "I went to the support group and it was powerful",
            },
            {"speaker": "Melanie", "dia_id": "D1:3", "text": "That sounds wonderful for you"},
        ],
        "session_2_date_time": "7:30 pm on 20 May, 2023",
        "session_2": [
            {"speaker": "Melanie", "dia_id": "D2:1", "text": "I painted a sunrise over the lake"},
            {"speaker": "Caroline", "dia_id": "D2:2", "text": "The colours are lovely"},
        ],
    },
}
WHEN = "When did Caroline go to the support group?"


@pytest.fixture
def stack(recall_stack: Callable[..., Stack]) -> Stack:
    return recall_stack(KEYWORDS_ONLY)


def boosts(stack: Stack, namespace: str, query: str) -> dict[str, float]:
    """source id -> intent boost of what Recall answers (it must answer)."""
    response = stack.search.Recall(
        search_pb2.RecallRequest(namespace=namespace, query=query, limit=10), timeout=30
    )
    assert response.intent == search_pb2.QUERY_INTENT_TEMPORAL
    return {r.memory.source_id: r.intent_boost for r in response.results}


def temporal_links(stack: Stack, namespace: str, memory_id: str) -> int:
    return len(
        stack.store.ListMemoryLinks(
            store_pb2.ListMemoryLinksRequest(
                namespace=namespace, memory_id=memory_id, link_types=["temporal"]
            )
        ).links
    )


def ids_by_source(stack: Stack, namespace: str) -> dict[str, str]:
    listed = stack.store.ListMemories(
        store_pb2.ListMemoriesRequest(namespace=namespace, page_size=100)
    ).memories
    return {m.source_id: m.id for m in listed}


def test_locomo_imports_each_session_and_a_when_question_takes_the_link_hop(
    locomo: ModuleType, stack: Stack
) -> None:
    """The sessions path (ImportMemories) and the turns path (AppendTurn) link
    each turn to its neighbours in the session, and the "when" question's hop
    reaches them (the hop that crashed); the flat path, the old one, links
    nothing."""
    for path in locomo.PATHS:
        assert locomo.ingest(stack.store, CONVERSATION, path) == 5
    namespaces = {p: locomo.namespace_of("conv-t", p) for p in locomo.PATHS}
    assert namespaces == {"sessions": "conv-t", "turns": "conv-t.turns", "flat": "conv-t.flat"}
    unlinked = boosts(stack, namespaces["flat"], WHEN)
    flat_match = ids_by_source(stack, namespaces["flat"])["D1:2"]
    assert temporal_links(stack, namespaces["flat"], flat_match) == 0
    for path in ("sessions", "turns"):
        matched = ids_by_source(stack, namespaces[path])["D1:2"]
        assert temporal_links(stack, namespaces[path], matched) == 2, path
        linked = boosts(stack, namespaces[path], WHEN)
        # Caroline's turns match the question's words; Melanie's replies do not,
        # and only their temporal links to Caroline's bring them (several per hop)
        for reply in ("D1:3", "D2:1"):
            assert reply not in unlinked
            assert linked[reply] == pytest.approx(0.15), (path, reply)
    listed = stack.store.ListMemories(
        store_pb2.ListMemoriesRequest(namespace=namespaces["turns"], page_size=100)
    ).memories
    assert {(m.source_id, m.who, m.session_id) for m in listed} == {
        ("D1:1", "Caroline", "session_1"),
        ("D1:2", "Caroline", "session_1"),
        ("D1:3", "Melanie", "session_1"),
        ("D2:1", "Melanie", "session_2"),
        ("D2:2", "Caroline", "session_2"),
    }


def haystack(question_id: str) -> dict[str, Any]:
    return {
        "question_id": question_id,
        "haystack_session_ids": ["answer_1", "other_2"],
        "haystack_dates": ["2023/05/30 (Tue) 23:42", "2023/06/02 (Fri) 10:00"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "I need a dentist near the office"},
                {"role": "assistant", "content": "Dr Lee on Main Street takes new patients"},
                {"role": "user", "content": "Great, that works for me"},
            ],
            [{"role": "user", "content": "What should I cook tonight?"}],
        ],
    }


def test_longmemeval_imports_each_haystack_session(runner: ModuleType, stack: Stack) -> None:
    items, sources = runner.import_items(haystack("q1"), "sessions")
    assert [i.session_id for i in items] == ["answer_1"] * 3 + ["other_2"]
    assert sources == ["answer_1:0", "answer_1:1", "answer_1:2", "other_2:0"]
    assert {i.session_id for i in runner.import_items(haystack("q1"), "flat")[0]} == {""}
    for path in runner.PATHS:
        namespace = runner.namespace_of("q1", path)
        stands_for = runner.ingest(stack.store, namespace, haystack("q1"), path)
        middle = next(m for m, s in stands_for.items() if s == ["answer_1:1"])
        assert temporal_links(stack, namespace, middle) == (2 if path == "sessions" else 0)
        answered = stack.search.Recall(
            search_pb2.RecallRequest(
                namespace=namespace, query="When was Dr Lee on Main Street named?", limit=10
            ),
            timeout=30,
        )
        assert answered.results[0].memory.source_id == "answer_1:1"
        reached = {r.memory.source_id for r in answered.results if r.intent_boost > 0}
        assert reached == ({"answer_1:0", "answer_1:2"} if path == "sessions" else set())
