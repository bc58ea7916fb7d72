"""The optional reranker (`/v1/rerank`): it reorders the head of the fused list,
and past its hard timeout or on any error the fused order stands with a warning."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from http_fakes import Reply, rerank_server
from recall_helpers import Stack
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.search.rerank import HttpReranker

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


def test_the_reranker_sees_the_top_n_before_the_cut_to_limit(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    """Seed 000: the top `rerankerTopN` of the scored list are reranked, then the
    list is cut to `limit`, so the reranker can bring up a memory fused last."""
    server = http_servers(rerank_server(score_by_content))
    stack, _ = reranked_stack(recall_stack, server)
    server.clear()
    response = stack.recall("zebra", limit=1)
    [request] = server.requests_to("POST", "/v1/rerank")
    assert sorted(request.json["documents"]) == sorted(RERANK_SCORES)
    fused_last = request.json["documents"][-1]
    assert fused_last == "zebra one", "the fused order puts the reranker's pick last"
    assert [(r.memory.content, r.rerank_rank) for r in response.results] == [("zebra one", 1)]


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


@pytest.mark.parametrize(
    ("status", "warning"),
    [
        (500, "reranker unavailable (HTTP 500"),
        (503, "reranker unavailable (HTTP 503"),
        (429, "reranker unavailable (HTTP 429"),
        (400, "reranker rejected the request (HTTP 400"),
        (404, "reranker rejected the request (HTTP 404"),
    ],
)
def test_the_warning_says_whether_the_reranker_is_down_or_refused_the_request(
    recall_stack: Callable[..., Stack],
    http_servers: Callable[[Any], Any],
    status: int,
    warning: str,
) -> None:
    """The providers' one status rule: 5xx and 429 mean unavailable (try again
    later), other 4xx a request the reranker will not take (fix the setup)."""
    server = http_servers(rerank_server(score_by_content))
    server.override = Reply(status, {"error": "scripted"})
    stack, _ = reranked_stack(recall_stack, server)
    response = stack.recall("zebra")
    assert [r.rerank_rank for r in response.results] == [0, 0, 0]
    assert [w for w in response.warnings if w.startswith(warning)], list(response.warnings)


def test_the_http_call_itself_times_out_after_the_configured_time(
    http_servers: Callable[[Any], Any],
) -> None:
    """memory.pipelineV2.rerankerTimeoutMs bounds the HTTP call itself, not only
    the wait for it: a hung reranker is unavailable, and its connection is dropped."""
    server = http_servers(rerank_server(score_by_content, delay_s=3.0))

    async def ask(timeout_ms: int) -> list[float]:
        reranker = HttpReranker(server.url, "bge-reranker-test", timeout_ms)
        try:
            return await reranker.scores("zebra", ["zebra one", "zebra zebra two"])
        finally:
            await reranker.close()

    with pytest.raises(ProviderUnavailable, match="exceeded 100 ms"):
        asyncio.run(ask(100))
    server.override = Reply(422, {"error": "documents too long"})
    with pytest.raises(ProviderError, match="HTTP 422") as refused:
        asyncio.run(ask(2000))
    assert not isinstance(refused.value, ProviderUnavailable)


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
