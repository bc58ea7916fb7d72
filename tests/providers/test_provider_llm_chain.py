"""The LLM fallback chain (`providers.llm` then `providers.llm_fallbacks`), with
scripted providers on loopback: a call goes to the next provider when one is
unreachable, rate limited or timing out, never when the request is at fault;
GetStatus lists every provider of the chain with its own state. And an LLM
that nothing configures is "not configured", not degraded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from engram.common.v1 import provider_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from http_fakes import Reply, VectorBook, ollama_server
from llm_fakes import LlmServer, anthropic_error, extraction_answer, fact
from recall_helpers import Stack, fake_embedding_overrides
from services.common import provider_state
from services.common.config import load_config
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.llm import LlmChain, LlmUnreachable, llm_provider
from services.maintenance import diagnostics as dx


def entry(server: LlmServer, **more: Any) -> dict[str, Any]:
    return {
        "kind": server.protocol,
        "base_url": server.url,
        "model": server.model,
        "timeout_ms": 2000,
        **more,
    }


def chain_of(primary: LlmServer, *fallbacks: LlmServer) -> LlmChain:
    first = entry(primary)
    config = load_config(
        environ={},
        overrides={
            **{f"providers.llm.{k}": v for k, v in first.items()},
            "providers.llm_fallbacks": [entry(f) for f in fallbacks],
        },
    )
    chain = llm_provider(config)
    assert isinstance(chain, LlmChain)
    return chain


def run(chain: LlmChain, calls: int = 1) -> list[str]:
    async def go() -> list[str]:
        try:
            return [await chain.generate("hello") for _ in range(calls)]
        finally:
            await chain.close()

    return asyncio.run(go())


def states(chain: LlmChain) -> list[str]:
    return [h.state for h in chain.health]


def posts(server: LlmServer) -> int:
    return len(server.requests_to("POST", server.generate_path))


@pytest.fixture
def llm(http_servers: Callable[[Any], Any]) -> Callable[..., LlmServer]:
    def start(protocol: str, script: Any = None, model: str = "fake-llm") -> LlmServer:
        answer = script or (lambda _p, who=protocol: f"from {who}")
        return http_servers(LlmServer(answer, protocol, model=model))

    return start


def test_a_provider_that_is_down_hands_the_call_to_the_next(llm: Any) -> None:
    down, up = llm("ollama"), llm("anthropic", model="claude-test")
    down.stop()
    chain = chain_of(down, up)
    assert run(chain) == ["from anthropic"]
    assert states(chain) == ["degraded", "available"]
    assert "unreachable" in chain.health[0].last_error
    assert chain.model == "claude-test", "the model that answered is the one recorded"
    assert [h.position for h in chain.health] == [0, 1]


def test_a_rate_limited_provider_is_skipped_until_its_retry_after(llm: Any) -> None:
    limited = llm(
        "anthropic",
        lambda _p: anthropic_error(429, "rate_limit_error", "slow down", retry_after="60"),
    )
    spare = llm("gemini")
    chain = chain_of(limited, spare)
    assert run(chain, calls=3) == ["from gemini"] * 3
    assert states(chain) == ["rate_limited", "available"]
    assert "rate_limit_error" in chain.health[0].last_error
    assert posts(limited) == 1, "asked once, then left alone while its Retry-After runs"
    assert posts(spare) == 3


def test_a_provider_timing_out_hands_the_call_to_the_next(llm: Any) -> None:
    slow = llm("openai", lambda _p: Reply(200, {}, delay_s=4.0))
    spare = llm("ollama")
    chain = chain_of(slow, spare)
    assert run(chain) == ["from ollama"]
    assert states(chain) == ["degraded", "available"]
    assert "timed out" in chain.health[0].last_error


def test_a_request_the_provider_refuses_is_not_sent_to_the_next(llm: Any) -> None:
    refusing = llm(
        "anthropic", lambda _p: anthropic_error(400, "invalid_request_error", "prompt too long")
    )
    spare = llm("ollama")
    chain = chain_of(refusing, spare)
    with pytest.raises(ProviderError) as caught:
        run(chain)
    assert not isinstance(caught.value, ProviderUnavailable)
    assert "prompt too long" in str(caught.value)
    assert posts(spare) == 0


def test_when_every_provider_is_down_the_job_is_not_at_fault(llm: Any) -> None:
    first, second = llm("ollama"), llm("gemini")
    first.stop()
    second.stop()
    with pytest.raises(LlmUnreachable, match="every LLM provider is unreachable"):
        run(chain_of(first, second))


def test_when_one_is_down_and_one_times_out_it_is_a_failed_attempt(llm: Any) -> None:
    first, slow = llm("ollama"), llm("openai", lambda _p: Reply(200, {}, delay_s=4.0))
    first.stop()
    with pytest.raises(ProviderUnavailable) as caught:
        run(chain_of(first, slow))
    assert not isinstance(caught.value, LlmUnreachable)
    assert "[0] ollama" in str(caught.value) and "[1] openai" in str(caught.value)


def test_a_single_provider_stays_a_single_provider() -> None:
    assert not isinstance(llm_provider(load_config(environ={})), LlmChain)


# ---- through the pipeline's GetStatus ------------------------------------------------


def statuses(stack: Stack) -> list[pb.ProviderStatus]:
    response = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
    return [p for p in response.providers if p.role == "llm"]


def test_get_status_shows_each_provider_of_the_chain_with_one_down(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any], llm: Any
) -> None:
    down = llm("ollama")
    down.stop()
    up = llm("openai", lambda _p: extraction_answer([fact("Alice likes tea")]))
    embeddings = http_servers(ollama_server(VectorBook()))
    overrides = {f"providers.llm.{k}": v for k, v in entry(down).items()}
    stack = recall_stack(
        fake_embedding_overrides(
            embeddings.url,
            **overrides,
            **{"providers.llm_fallbacks": [entry(up)], "providers.probe_interval_ms": 3600000},
        ),
        search=False,
        pipeline=True,
    )
    first, second = statuses(stack)
    assert (first.chain_position, first.kind) == (0, "ollama")
    assert first.state == provider_pb2.PROVIDER_STATE_DEGRADED
    assert "unreachable" in first.last_error
    assert (second.chain_position, second.kind) == (1, "openai")
    assert second.state == provider_pb2.PROVIDER_STATE_AVAILABLE

    answer = stack.pipeline.Extract(pb.ExtractRequest(content="Alice likes tea"), timeout=10)
    assert [f.content for f in answer.facts] == ["Alice likes tea"], "the fallback answered"
    assert answer.model == up.model


def test_a_default_install_reports_its_llm_as_not_configured(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    embeddings = http_servers(ollama_server(VectorBook()))
    stack = recall_stack(fake_embedding_overrides(embeddings.url), search=False, pipeline=True)
    [status] = statuses(stack)
    assert status.state == provider_pb2.PROVIDER_STATE_DISABLED, "not configured, not degraded"
    assert "not configured" in status.last_error
    assert "providers.llm" in status.last_error and "memory.pipelineV2.enabled" in status.last_error


def test_a_configured_llm_that_is_down_is_degraded(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any], llm: Any
) -> None:
    down = llm("ollama")
    down.stop()
    embeddings = http_servers(ollama_server(VectorBook()))
    stack = recall_stack(
        fake_embedding_overrides(
            embeddings.url,
            **{"memory.pipelineV2.enabled": True, "providers.llm.base_url": down.url},
        ),
        search=False,
        pipeline=True,
    )
    [status] = statuses(stack)
    assert status.state == provider_pb2.PROVIDER_STATE_DEGRADED
    assert "unreachable" in status.last_error


def test_a_rate_limited_provider_scores_like_a_degraded_one_and_not_configured_like_up() -> None:
    def score(*states: str) -> float:
        found = tuple(
            dx.Provider("llm", "anthropic", "m", s, position=i) for i, s in enumerate(states)
        )
        return dx.provider_score(dx.ProviderReport(reachable=True, providers=found))

    assert score("rate_limited", "available") == score("degraded", "available") == 0.75
    assert score("disabled") == 1.0, "an LLM that is not configured costs nothing"
    for state in ("available", "degraded", "rate_limited", "disabled"):
        assert provider_state.from_proto(provider_state.to_proto(state)) == state
