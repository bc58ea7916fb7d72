"""LLM providers against real HTTP servers speaking the Ollama and OpenAI chat
protocols (scripted answers on a loopback port).

Failure classes decide what happens to a job: LlmUnreachable (refused) means
the provider is down and the job is handed back; ProviderUnavailable (timeout,
5xx) and ProviderError (4xx, garbage) are failed attempts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from http_fakes import Reply
from llm_fakes import LlmServer
from services.common.config import load_config
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.llm import (
    LlmUnreachable,
    OllamaLlm,
    OpenAILlm,
    llm_provider,
    llm_settings,
)

PROTOCOLS = ("ollama", "openai")


def provider(protocol: str, url: str, **options: Any) -> Any:
    cls = OllamaLlm if protocol == "ollama" else OpenAILlm
    return cls(
        url,
        options.pop("model", "fake-llm"),
        options.pop("timeout_ms", 5000),
        concurrency=options.pop("concurrency", 2),
        **options,
    )


def call(llm: Any, *prompts: str) -> list[str]:
    async def go() -> list[str]:
        try:
            return list(await asyncio.gather(*(llm.generate(p) for p in prompts)))
        finally:
            await llm.close()

    return asyncio.run(go())


def failure(llm: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        call(llm, "hello")
    return caught.value


def available(llm: Any) -> bool:
    async def go() -> bool:
        try:
            return bool(await llm.available())
        finally:
            await llm.close()

    return asyncio.run(go())


@pytest.fixture
def llm_server(http_servers: Callable[[Any], Any]) -> Callable[..., LlmServer]:
    def start(script: Any = lambda p: f"echo: {p}", protocol: str = "ollama") -> LlmServer:
        return http_servers(LlmServer(script, protocol))

    return start


def test_ollama_generate_asks_for_json_without_streaming_or_thinking(llm_server: Any) -> None:
    server = llm_server()
    assert call(provider("ollama", server.url, model="qwen3:4b"), "hello") == ["echo: hello"]
    [request] = server.requests_to("POST", "/api/generate")
    assert request.json == {
        "model": "qwen3:4b",
        "prompt": "hello",
        "stream": False,
        "think": False,
        "options": {"num_predict": 4096},
        "format": "json",
    }


def test_openai_chat_completion_asks_for_a_json_object_with_the_bearer_key(
    llm_server: Any,
) -> None:
    server = llm_server(protocol="openai")
    llm = provider("openai", server.url, model="local-model", api_key="sekrit")
    assert call(llm, "hello") == ["echo: hello"]
    [request] = server.requests_to("POST", "/v1/chat/completions")
    assert request.json["model"] == "local-model"
    assert request.json["messages"] == [{"role": "user", "content": "hello"}]
    assert request.json["response_format"] == {"type": "json_object"}
    assert request.json["stream"] is False
    assert request.json["max_tokens"] == 4096
    assert request.headers["Authorization"] == "Bearer sekrit"


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_the_local_kinds_cap_the_answer_at_max_tokens(protocol: str, llm_server: Any) -> None:
    """Without a cap a small model can generate to the end of its context window."""
    server = llm_server(protocol=protocol)
    assert call(provider(protocol, server.url, max_tokens=321), "hello") == ["echo: hello"]
    if protocol == "ollama":
        [request] = server.requests_to("POST", "/api/generate")
        assert request.json["options"] == {"num_predict": 321}
    else:
        [request] = server.requests_to("POST", "/v1/chat/completions")
        assert request.json["max_tokens"] == 321


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_answer_never_carries_a_nul_raw_or_json_escaped(protocol: str, llm_server: Any) -> None:
    """The store refuses U+0000 in every text field, so a model emitting one would
    fail its job on every retry; an escaped backslash before `u0000` is kept."""
    answers = {
        "raw": "a\x00b",
        "escaped": '{"fact": "a\\u0000b"}',
        "kept": '{"path": "C:\\\\u0000"}',
        "both": '{"fact": "x\\\\\\u0000y\x00"}',
    }
    server = llm_server(lambda prompt: answers[prompt], protocol=protocol)
    got = call(provider(protocol, server.url), *answers)
    assert got == ["ab", '{"fact": "ab"}', '{"path": "C:\\\\u0000"}', '{"fact": "x\\\\y"}']
    assert [json.loads(text) for text in got[1:]] == [
        {"fact": "ab"},
        {"path": "C:\\u0000"},
        {"fact": "x\\y"},
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_other_control_characters_become_spaces_raw_or_json_escaped(
    protocol: str, llm_server: Any
) -> None:
    """The store refuses ESC, DEL and C1 in text fields as it refuses NUL (issue 34);
    tab and line breaks stay, and an escaped backslash before `u001b` is kept."""
    answers = {
        "raw": "a\x1b[2Jb\x9bc\td\ne",
        "escaped": '{"fact": "a\\u001b[2Jb\\u007fc\\u0009d\\u000ae"}',
        "kept": '{"path": "C:\\\\u001b"}',
    }
    server = llm_server(lambda prompt: answers[prompt], protocol=protocol)
    got = call(provider(protocol, server.url), *answers)
    assert got == [
        "a [2Jb c\td\ne",
        '{"fact": "a [2Jb c\\u0009d\\u000ae"}',
        '{"path": "C:\\\\u001b"}',
    ]
    assert json.loads(got[1]) == {"fact": "a [2Jb c\td\ne"}


def test_no_api_key_sends_no_authorization_header(llm_server: Any) -> None:
    server = llm_server(protocol="openai")
    call(provider("openai", server.url), "hello")
    [request] = server.requests_to("POST", "/v1/chat/completions")
    assert "Authorization" not in request.headers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_5xx_is_unavailable_with_status_and_first_200_characters(
    protocol: str, llm_server: Any
) -> None:
    server = llm_server(lambda p: Reply(503, "x" * 500), protocol)
    error = failure(provider(protocol, server.url))
    assert isinstance(error, ProviderUnavailable)
    assert not isinstance(error, LlmUnreachable), "the provider is up: a failed attempt"
    assert str(error) == "HTTP 503: " + "x" * 200


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("status", [408, 425, 429])
def test_not_now_statuses_are_unavailable_like_5xx(
    protocol: str, status: int, llm_server: Any
) -> None:
    """One rule for every HTTP call (the document fetch retried these already)."""
    server = llm_server(lambda p: Reply(status, "busy"), protocol)
    error = failure(provider(protocol, server.url))
    assert isinstance(error, ProviderUnavailable)
    assert str(error) == f"HTTP {status}: busy"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_4xx_is_a_provider_error_not_an_outage(protocol: str, llm_server: Any) -> None:
    server = llm_server(lambda p: Reply(404, {"error": "model 'nope' not found"}), protocol)
    error = failure(provider(protocol, server.url))
    assert not isinstance(error, ProviderUnavailable)
    assert "HTTP 404" in str(error) and "not found" in str(error)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "reply",
    [Reply(200, b""), Reply(200, b"<html>oops</html>"), Reply(200, {"unexpected": True})],
    ids=["empty body", "garbage body", "json without the answer"],
)
def test_bodies_that_are_not_the_protocol_are_provider_errors(
    protocol: str, reply: Reply, llm_server: Any
) -> None:
    server = llm_server(lambda p: reply, protocol)
    error = failure(provider(protocol, server.url))
    assert not isinstance(error, ProviderUnavailable)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_answer_slower_than_the_timeout_is_unavailable(protocol: str, llm_server: Any) -> None:
    server = llm_server(lambda p: Reply(200, {}, delay_s=1.5), protocol)
    error = failure(provider(protocol, server.url, timeout_ms=200))
    assert isinstance(error, ProviderUnavailable) and not isinstance(error, LlmUnreachable)
    assert "timed out after 200 ms" in str(error)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connection_refused_is_unreachable(protocol: str, llm_server: Any) -> None:
    server = llm_server(protocol=protocol)
    server.stop()
    assert isinstance(failure(provider(protocol, server.url)), LlmUnreachable)
    assert available(provider(protocol, server.url)) is False
    server.start()
    assert available(provider(protocol, server.url)) is True


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrent_calls_are_bounded_by_the_semaphore(protocol: str, llm_server: Any) -> None:
    server = llm_server(protocol=protocol)
    server.in_flight.hold_s = 0.2
    prompts = [f"p{i}" for i in range(8)]
    answers = call(provider(protocol, server.url, concurrency=2), *prompts)
    assert answers == [f"echo: {p}" for p in prompts]
    assert server.in_flight.peak == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_waiting_for_a_slot_does_not_use_up_the_timeout(protocol: str, llm_server: Any) -> None:
    """A local server answers one call at a time: three calls queued behind a slot of
    one take 3 x 0.4 s, each within its 1 s budget once it is sent (found with a real
    llama.cpp server, where queued extraction, summary and review calls timed out)."""
    server = llm_server(protocol=protocol)
    server.in_flight.hold_s = 0.4
    prompts = ["a", "b", "c"]
    llm = provider(protocol, server.url, concurrency=1, timeout_ms=1000)
    assert call(llm, *prompts) == [f"echo: {p}" for p in prompts]
    assert server.in_flight.peak == 1


def test_the_factory_follows_configuration_and_the_seed_keys() -> None:
    config = load_config(
        environ={}, overrides={"providers.llm.kind": "openai", "providers.llm.model": "m1"}
    )
    assert isinstance(llm_provider(config), OpenAILlm)
    assert llm_settings(config).model == "m1"
    assert llm_settings(config).timeout_ms == 45000
    seed = config.with_overrides(
        {"memory.pipelineV2.extractionModel": "llama3", "memory.pipelineV2.extractionTimeout": 9000}
    )
    assert (llm_settings(seed).model, llm_settings(seed).timeout_ms) == ("llama3", 9000)
    assert isinstance(llm_provider(load_config(environ={})), OllamaLlm)
