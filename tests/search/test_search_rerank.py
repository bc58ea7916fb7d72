"""The optional reranker (`/v1/rerank`): it reorders the head of the fused list,
and past its hard timeout or on any error the fused order stands with a warning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from http_fakes import Reply, rerank_server
from recall_helpers import Stack

RERANK_SCORES = {"zebra one": 0.9, "zebra zebra two": 0.5, "zebra zebra zebra three": 0.1}


def reranked_stack(
    recall_stack: Callable[..., Stack], server: Any, **overrides: Any
) -> tuple[Stack, dict[str, str]]:
    stack = recall_stack(
        {
            "providers.embedding.kind": "none",
            "memory.pipelineV2.rerankerEnabled": True,
            "memory.pipelineV2.rerankerModel": "bge-reranker-test",
            "providers.reranker.base_url": server.url,
            **overrides,
        }
    )
    memories = {content: stack.remember(content).id for content in RERANK_SCORES}
    return stack, memories


def score_by_content(_query: str, document: str) -> float:
    return RERANK_SCORES.get(document, 0.0)


def test_results_follow_the_reranker_scores(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(rerank_server(score_by_content))
    stack, memories = reranked_stack(recall_stack, server)
    response = stack.recall("zebra")
    assert [r.memory.content for r in response.results] == list(RERANK_SCORES)
    assert [r.rerank_rank for r in response.results] == [1, 2, 3]
    assert list(response.warnings) == []

    [request] = server.requests_to("POST", "/v1/rerank")
    assert request.json["model"] == "bge-reranker-test"
    assert request.json["query"] == "zebra"
    assert sorted(request.json["documents"]) == sorted(RERANK_SCORES)
    assert {r.memory.id for r in response.results} == set(memories.values())


def test_only_the_top_n_are_sent_and_the_rest_keep_their_place(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(rerank_server(lambda _q, d: -len(d)))
    stack, _ = reranked_stack(recall_stack, server, **{"memory.pipelineV2.rerankerTopN": 2})
    stack.remember("zebra four words here and there")
    fused = [r.memory.content for r in stack.recall("zebra", limit=2).results]
    server.clear()
    response = stack.recall("zebra", limit=4)
    [request] = server.requests_to("POST", "/v1/rerank")
    assert len(request.json["documents"]) == 2
    contents = [r.memory.content for r in response.results]
    assert sorted(contents[:2], key=len) == contents[:2], "the head is in reranked order"
    assert set(contents[:2]) == set(request.json["documents"])
    assert len(fused) == 2


def test_a_reranker_slower_than_its_timeout_leaves_the_fused_order(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(rerank_server(score_by_content, delay_s=3.0))
    stack, _ = reranked_stack(recall_stack, server, **{"memory.pipelineV2.rerankerTimeoutMs": 100})
    response = stack.recall("zebra")
    assert len(response.results) == 3
    assert [r.rerank_rank for r in response.results] == [0, 0, 0]
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True), "fused order"
    assert any("100 ms" in w and "fused order" in w for w in response.warnings), list(
        response.warnings
    )
    assert server.requests_to("POST", "/v1/rerank"), "the reranker was asked"


def test_a_failing_reranker_leaves_the_fused_order_with_a_warning(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(rerank_server(score_by_content))
    server.override = Reply(500, {"error": "model crashed"})
    stack, _ = reranked_stack(recall_stack, server)
    response = stack.recall("zebra")
    assert len(response.results) == 3
    assert [r.rerank_rank for r in response.results] == [0, 0, 0]
    assert any("fused order" in w for w in response.warnings)

    server.override = Reply(200, {"unexpected": True})
    assert any("fused order" in w for w in stack.recall("zebra").warnings)
    server.stop()
    assert any("fused order" in w for w in stack.recall("zebra").warnings)


def test_the_reranker_is_not_called_when_disabled(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(rerank_server(score_by_content))
    stack, _ = reranked_stack(recall_stack, server, **{"memory.pipelineV2.rerankerEnabled": False})
    response = stack.recall("zebra")
    assert len(response.results) == 3
    assert [r.rerank_rank for r in response.results] == [0, 0, 0]
    assert server.requests == []
    fused = [r.memory.content for r in response.results]
    assert fused != list(RERANK_SCORES), "the reranked tests above really reorder"


def test_seed_002_search_reranking_switches_the_reranker_on(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(rerank_server(score_by_content))
    stack = recall_stack(
        {
            "providers.embedding.kind": "none",
            "search.reranking": True,
            "memory.pipelineV2.rerankerModel": "bge-reranker-test",
            "providers.reranker.base_url": server.url,
        }
    )
    for content in RERANK_SCORES:
        stack.remember(content)
    response = stack.recall("zebra")
    assert [r.memory.content for r in response.results] == list(RERANK_SCORES)
    assert len(server.requests_to("POST", "/v1/rerank")) == 1
