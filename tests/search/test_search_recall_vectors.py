"""Recall over both channels with vectors chosen by the test: namespace isolation,
filters inside each channel (before any top-k cut), deleted memories, result
fields, limits and fusion.

Channels are kept shallow (search.channel_depth = search.vector_candidates = 10)
and every scenario plants more than ten better-matching memories that must not
come back, so a filter or namespace applied after a channel's cut would lose
the right answer and fail the test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from http_fakes import VectorBook, ollama_server
from recall_helpers import Stack, fake_embedding_overrides, ids, timestamp, vec

SHALLOW = {"search.channel_depth": 10, "search.vector_candidates": 10}
DECOYS = 12


@pytest.fixture
def shallow(vector_stack: Callable[..., tuple[Stack, VectorBook]]) -> Stack:
    stack, _ = vector_stack(SHALLOW)
    return stack


def embed_by_content(stack: Stack, vectors: dict[str, list[float]]) -> None:
    stack.embed_pending(lambda text: vectors[text])


# ---- namespaces -------------------------------------------------------------------------


def test_other_namespaces_never_appear_even_when_they_match_best(shallow: Stack) -> None:
    vectors: dict[str, list[float]] = {}
    for i in range(DECOYS):
        content = f"zebra zebra zebra stripes {i}"
        shallow.remember(content, namespace="tenant-b")
        vectors[content] = vec(0.99)
    # the very same content in B shares A's stored vector (keyed by content)
    twin = shallow.remember("a zebra crossed the road", namespace="tenant-b")
    target = shallow.remember("a zebra crossed the road", namespace="tenant-a")
    loose = shallow.remember("nothing in common at all", namespace="tenant-a")
    vectors["a zebra crossed the road"] = vec(0.6)
    vectors["nothing in common at all"] = vec(0.2)
    embed_by_content(shallow, vectors)

    response = shallow.recall("zebra", namespace="tenant-a", limit=10)
    assert {r.memory.namespace for r in response.results} == {"tenant-a"}
    assert ids(response) == [target.id, loose.id]
    best = response.results[0]
    assert (best.keyword.rank, best.vector.rank) == (1, 1)
    assert twin.id not in ids(response)
    assert not response.degraded

    other = shallow.recall("zebra", namespace="tenant-b", limit=20)
    assert {r.memory.namespace for r in other.results} == {"tenant-b"}
    assert target.id not in ids(other) and loose.id not in ids(other)
    assert len(other.results) >= 10

    assert shallow.recall("zebra", namespace="tenant-c").results == []


def test_the_default_namespace_is_used_when_none_is_given(shallow: Stack) -> None:
    mine = shallow.remember("zebra facts", namespace="default")
    shallow.remember("zebra elsewhere", namespace="elsewhere")
    embed_by_content(shallow, {"zebra facts": vec(0.5), "zebra elsewhere": vec(0.9)})
    response = shallow.search.Recall(search_pb2.RecallRequest(query="zebra"))
    assert ids(response) == [mine.id]


# ---- filters ---------------------------------------------------------------------------------

TARGET = {
    "type": "decision",
    "tags": ["keep"],
    "who": "alice",
    "pinned": True,
    "importance": 0.9,
    "source_type": "meeting",
}
DECOY = {
    "type": "fact",
    "tags": ["noise"],
    "who": "bob",
    "pinned": False,
    "importance": 0.3,
    "source_type": "chat",
}


@pytest.fixture
def planted(shallow: Stack) -> tuple[Stack, Any, list[Any], Any]:
    """early target (cos 0.6), then 12 decoys nearer to the query in both channels
    (cos 0.99, the keyword three times), then a late target (cos 0.5)."""
    vectors = {"a zebra early target": vec(0.6), "a zebra late target": vec(0.5)}
    early = shallow.remember("a zebra early target", **TARGET)
    decoys = []
    for i in range(DECOYS):
        content = f"zebra zebra zebra decoy {i}"
        decoys.append(shallow.remember(content, **DECOY))
        vectors[content] = vec(0.99)
    late = shallow.remember("a zebra late target", **TARGET)
    embed_by_content(shallow, vectors)
    return shallow, early, decoys, late


@pytest.mark.parametrize(
    "filter_fields",
    [
        {"types": ["decision"]},
        {"types": ["decision", "rule"]},
        {"tags": ["keep"]},
        {"tags": ["KEEP "]},
        {"who": "alice"},
        {"pinned": True},
        {"importance_min": 0.8},
        {"source_type": "meeting"},
        {"types": ["decision"], "who": "alice", "tags": ["keep"], "importance_min": 0.5},
    ],
    ids=lambda f: ",".join(f),
)
def test_filtered_out_nearest_memories_never_displace_a_matching_one(
    planted: tuple[Stack, Any, list[Any], Any], filter_fields: dict[str, Any]
) -> None:
    stack, early, _decoys, late = planted
    unfiltered = stack.recall("zebra", limit=1)
    assert ids(unfiltered) != [early.id], "without the filter a decoy is the best match"

    [best] = stack.recall("zebra", limit=1, **filter_fields).results
    assert best.memory.id == early.id
    assert best.vector.rank == 1 and best.keyword.rank >= 1

    everything = stack.recall("zebra", limit=100, **filter_fields)
    assert ids(everything) == [early.id, late.id]


def test_since_and_until_filters_apply_inside_both_channels(
    planted: tuple[Stack, Any, list[Any], Any],
) -> None:
    stack, early, decoys, late = planted
    since = stack.recall("zebra", limit=1, since=late.create_time)
    assert ids(since) == [late.id]
    until = stack.recall("zebra", limit=1, until=decoys[0].create_time)
    assert ids(until) == [early.id]
    window = stack.recall("zebra", limit=100, since=decoys[0].create_time, until=late.create_time)
    assert len(window.results) >= 10, "each channel keeps its ten best"
    assert set(ids(window)) <= {d.id for d in decoys}


def test_a_negative_filter_keeps_only_the_other_side(
    planted: tuple[Stack, Any, list[Any], Any],
) -> None:
    stack, early, _decoys, late = planted
    response = stack.recall("zebra", limit=100, pinned=False)
    assert len(response.results) >= 10, "each channel keeps its ten best"
    assert {early.id, late.id}.isdisjoint(ids(response))
    assert {r.memory.type for r in response.results} == {"fact"}


def test_a_filter_matching_nothing_returns_nothing(
    planted: tuple[Stack, Any, list[Any], Any],
) -> None:
    stack, *_ = planted
    assert stack.recall("zebra", who="nobody").results == []
    assert stack.recall("zebra", types=["learning"]).results == []


# ---- deleted memories ---------------------------------------------------------------------


def test_deleted_memories_never_come_back_and_recovered_ones_do(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, book = vector_stack(SHALLOW)
    book.vectors["striped horse"] = book.vectors["zebra"]  # a pure-vector query
    gone = stack.remember("zebra in the zoo")
    stays = stack.remember("zebra on the plains")
    embed_by_content(stack, {"zebra in the zoo": vec(0.9), "zebra on the plains": vec(0.5)})
    assert ids(stack.recall("zebra")) == [gone.id, stays.id]

    stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=gone.id, reason="wrong"))
    assert ids(stack.recall("zebra")) == [stays.id]
    zoo = stack.recall("zoo")  # only the deleted memory has the word
    assert gone.id not in ids(zoo)
    assert all(r.keyword.rank == 0 for r in zoo.results), "keyword channel"
    assert ids(stack.recall("striped horse")) == [stays.id], "vector channel"

    stack.store.RecoverMemory(store_pb2.RecoverMemoryRequest(id=gone.id, reason="needed"))
    response = stack.recall("zebra")
    assert ids(response) == [gone.id, stays.id]
    assert (response.results[0].keyword.rank, response.results[0].vector.rank) == (1, 1)
    assert ids(stack.recall("striped horse"))[0] == gone.id


def test_forgotten_memories_never_come_back(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, _ = vector_stack()
    soft = stack.remember("zebra soft forget")
    hard = stack.remember("zebra hard forget")
    embed_by_content(stack, {"zebra soft forget": vec(0.9), "zebra hard forget": vec(0.8)})
    stack.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            ids=[soft.id], mode=store_pb2.FORGET_MODE_EXECUTE, reason="cleanup"
        )
    )
    stack.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            ids=[hard.id], mode=store_pb2.FORGET_MODE_EXECUTE, reason="cleanup", purge=True
        )
    )
    assert stack.recall("zebra").results == []
    assert stack.stats().indexed_memory_count == 0


# ---- result fields, order, limit -------------------------------------------------------------


def test_results_carry_the_memory_both_channel_views_and_are_best_first(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, _ = vector_stack()
    plan = {
        "zebra zebra zebra herd": 0.3,
        "one zebra alone": 0.9,
        "zebra and a giraffe": 0.6,
        "only a giraffe here": 0.8,  # vector only
    }
    memories = {
        content: stack.remember(content, tags=["animals"], who="keeper") for content in plan
    }
    embed_by_content(stack, {c: vec(cos) for c, cos in plan.items()})

    response = stack.recall("zebra", limit=10)
    assert not response.degraded
    assert list(response.warnings) == []
    assert {r.memory.id for r in response.results} == {m.id for m in memories.values()}
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)

    by_content = {r.memory.content: r for r in response.results}
    for content, memory in memories.items():
        result = by_content[content]
        assert result.memory.id == memory.id
        assert result.memory.namespace == "default"
        assert list(result.memory.tags) == ["animals"]
        assert result.memory.who == "keeper"
        assert result.memory.content_hash == memory.content_hash
        assert result.memory.HasField("create_time")
        assert not result.memory.deleted
        assert math.isclose(result.vector.score, plan[content], abs_tol=1e-3)
        assert result.rerank_rank == 0

    vector_order = sorted(plan, key=lambda c: -plan[c])
    assert [by_content[c].vector.rank for c in vector_order] == [1, 2, 3, 4]
    giraffe = by_content["only a giraffe here"]
    assert (giraffe.keyword.rank, giraffe.keyword.score) == (0, 0.0)
    keyword_hits = sorted(
        (r for r in response.results if r.keyword.rank), key=lambda r: r.keyword.rank
    )
    assert [r.keyword.rank for r in keyword_hits] == [1, 2, 3]
    keyword_scores = [r.keyword.score for r in keyword_hits]
    assert all(s > 0 for s in keyword_scores)
    assert keyword_scores == sorted(keyword_scores, reverse=True)


def test_limit_zero_means_ten_and_the_limit_is_respected_up_to_one_hundred(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, _ = vector_stack()
    stack.store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    items=[store_pb2.ImportItem(content=f"zebra number {i}") for i in range(120)]
                )
            ]
        )
    )
    assert len(stack.recall("zebra", limit=0).results) == 10
    assert len(stack.recall("zebra", limit=3).results) == 3
    assert len(stack.recall("zebra", limit=100).results) == 100
    code, _, fields = error_of(lambda: stack.recall("zebra", limit=101))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["limit"])


def test_rrf_fusion_puts_the_memory_both_channels_agree_on_first(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, _ = vector_stack({"search.fusion": "rrf"})
    both = stack.remember("zebra sighting at dawn")
    words = stack.remember("zebra zebra words only")
    meaning = stack.remember("a striped horse grazing")
    embed_by_content(
        stack,
        {
            "zebra sighting at dawn": vec(0.95),
            "zebra zebra words only": vec(-0.5),
            "a striped horse grazing": vec(0.9),
        },
    )
    response = stack.recall("zebra")
    assert ids(response)[0] == both.id
    assert set(ids(response)) == {both.id, words.id, meaning.id}
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    first = response.results[0]
    assert first.keyword.rank >= 1 and first.vector.rank == 1


def test_alpha_fusion_lets_a_close_meaning_outrank_a_weak_keyword_match(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack, _ = vector_stack({"search.alpha": 0.9})
    weak = stack.remember("zebra mentioned in passing among many other unrelated words")
    close = stack.remember("a striped horse of the savanna")
    embed_by_content(
        stack,
        {
            "zebra mentioned in passing among many other unrelated words": vec(0.05),
            "a striped horse of the savanna": vec(0.95),
        },
    )
    assert ids(stack.recall("zebra")) == [close.id, weak.id]


def test_a_query_model_other_than_the_index_model_falls_back_to_keywords(
    recall_stack: Callable[..., Stack],
    start_search_server: Any,
    http_servers: Callable[[Any], Any],
) -> None:
    book = VectorBook({"zebra": vec(1.0)})
    server = http_servers(ollama_server(book))
    stack = recall_stack(fake_embedding_overrides(server.url), search=False)
    memory = stack.remember("zebra crossing")
    stack.embed_pending(lambda _t: vec(0.9))
    _, search = start_search_server(
        stack.config.with_overrides({"providers.embedding.model": "another-model"})
    )
    response = search.Recall(search_pb2.RecallRequest(query="zebra"))
    assert [r.memory.id for r in response.results] == [memory.id]
    assert response.degraded
    assert any("another-model" in w for w in response.warnings)
    assert response.results[0].vector.rank == 0


def test_until_before_every_memory_filters_everything_out(shallow: Stack) -> None:
    shallow.remember("zebra now")
    past = timestamp(datetime(2000, 1, 1, tzinfo=UTC))
    assert shallow.recall("zebra", until=past).results == []
    assert len(shallow.recall("zebra", since=past).results) == 1
