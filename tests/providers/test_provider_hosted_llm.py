"""The hosted LLM protocols, Anthropic Messages and Google Gemini, against real
HTTP servers on loopback that speak them (tests/llm_fakes.py): the request
shapes and headers, the answer shapes, their error bodies, rate limits with
Retry-After (asked again only within the call's timeout), timeouts and a
refused connection; and the key, read from the environment or a file, which
no log line or error message ever shows."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from http_fakes import Reply
from llm_fakes import LlmServer, anthropic_error, gemini_error, header
from services.common.config import ConfigError, load_config
from services.common.providers.errors import ProviderError, ProviderUnavailable, RateLimited
from services.common.providers.llm import (
    ANTHROPIC_VERSION,
    AnthropicLlm,
    GeminiLlm,
    LlmUnreachable,
    llm_provider,
)

KEY = "sk-test-0123456789-very-secret"
HOSTED = ("anthropic", "gemini")


def provider(protocol: str, url: str, **options: Any) -> Any:
    cls = AnthropicLlm if protocol == "anthropic" else GeminiLlm
    return cls(
        url,
        options.pop("model", "fake-llm"),
        options.pop("timeout_ms", 5000),
        concurrency=2,
        api_key=options.pop("api_key", KEY),
        **options,
    )


def call(llm: Any, prompt: str = "hello", json_output: bool = True) -> str:
    async def go() -> str:
        try:
            return str(await llm.generate(prompt, json_output=json_output))
        finally:
            await llm.close()

    return asyncio.run(go())


def failure(llm: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        call(llm)
    return caught.value


@pytest.fixture
def llm_server(http_servers: Callable[[Any], Any]) -> Callable[..., LlmServer]:
    def start(protocol: str, script: Any = lambda p: f"echo: {p}", **options: Any) -> LlmServer:
        return http_servers(LlmServer(script, protocol, api_key=KEY, **options))

    return start


def test_anthropic_messages_request_and_answer(llm_server: Any) -> None:
    server = llm_server("anthropic")
    llm = provider("anthropic", server.url, model="claude-test", max_tokens=777)
    assert call(llm, "hello") == "echo: hello"
    [request] = server.requests_to("POST", "/v1/messages")
    assert header(request, "x-api-key") == KEY
    assert header(request, "anthropic-version") == ANTHROPIC_VERSION
    assert header(request, "authorization") is None, "Anthropic takes x-api-key, not a bearer"
    assert request.json["model"] == "claude-test"
    assert request.json["max_tokens"] == 777
    assert request.json["messages"] == [{"role": "user", "content": "hello"}]
    assert "JSON" in request.json["system"], "JSON is asked for by the system instruction"


def test_anthropic_text_blocks_are_joined_and_other_blocks_skipped(llm_server: Any) -> None:
    answer = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": '{"facts": '},
            {"type": "text", "text": "[]}"},
        ],
    }
    server = llm_server("anthropic", lambda _p: Reply(200, answer))
    assert call(provider("anthropic", server.url)) == '{"facts": []}'


def test_gemini_generate_content_request_and_answer(llm_server: Any) -> None:
    server = llm_server("gemini", model="gemini-test")
    llm = provider("gemini", server.url, model="gemini-test", max_tokens=321)
    assert call(llm, "hello") == "echo: hello"
    [request] = server.requests_to("POST", "/v1beta/models/gemini-test:generateContent")
    assert header(request, "x-goog-api-key") == KEY
    assert "key=" not in request.path, "the key never goes into the URL"
    assert request.json["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]
    assert request.json["generationConfig"] == {
        "maxOutputTokens": 321,
        "responseMimeType": "application/json",
    }


def test_gemini_free_text_does_not_ask_for_json(llm_server: Any) -> None:
    server = llm_server("gemini", model="gemini-test")
    call(provider("gemini", server.url, model="models/gemini-test"), json_output=False)
    [request] = server.requests_to("POST", "/v1beta/models/gemini-test:generateContent")
    assert "responseMimeType" not in request.json["generationConfig"]


def test_gemini_without_candidates_is_a_bad_answer(llm_server: Any) -> None:
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}}
    server = llm_server("gemini", lambda _p: Reply(200, blocked), model="fake-llm")
    error = failure(provider("gemini", server.url))
    assert not isinstance(error, ProviderUnavailable) and "no candidate text" in str(error)


@pytest.mark.parametrize(
    ("protocol", "reply"),
    [
        ("anthropic", anthropic_error(400, "invalid_request_error", "max_tokens: too large")),
        ("anthropic", anthropic_error(401, "authentication_error", "invalid x-api-key")),
        ("gemini", gemini_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received")),
        ("gemini", gemini_error(403, "PERMISSION_DENIED", "API key not valid")),
    ],
)
def test_an_error_that_is_the_requests_fault_is_not_retryable(
    llm_server: Any, protocol: str, reply: Reply
) -> None:
    server = llm_server(protocol, lambda _p: reply)
    error = failure(provider(protocol, server.url))
    assert not isinstance(error, ProviderUnavailable)
    assert f"HTTP {reply.status}" in str(error)
    assert reply.body["error"]["message"] in str(error), "the error body is shown"


def test_a_wrong_key_gets_the_protocols_authentication_error(llm_server: Any) -> None:
    anthropic = llm_server("anthropic")
    assert "authentication_error" in str(failure(provider("anthropic", anthropic.url, api_key="x")))
    gemini = llm_server("gemini")
    assert "INVALID_ARGUMENT" in str(failure(provider("gemini", gemini.url, api_key="x")))


@pytest.mark.parametrize(
    ("protocol", "reply"),
    [
        ("anthropic", anthropic_error(429, "rate_limit_error", "Number of requests exceeded")),
        ("anthropic", anthropic_error(529, "overloaded_error", "Overloaded")),
        ("gemini", gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded")),
    ],
)
def test_rate_limited_and_overloaded_answers_are_rate_limits(
    llm_server: Any, protocol: str, reply: Reply
) -> None:
    server = llm_server(protocol, lambda _p: reply)
    error = failure(provider(protocol, server.url))
    assert isinstance(error, RateLimited) and error.retry_after_s is None
    assert not isinstance(error, LlmUnreachable), "the provider is up: a failed attempt"
    assert len(server.requests) == 1, "no Retry-After: not asked again within the call"


@pytest.mark.parametrize("protocol", HOSTED)
def test_retry_after_within_the_timeout_is_waited_for_and_asked_again(
    llm_server: Any, protocol: str
) -> None:
    answers = iter(
        [
            anthropic_error(429, "rate_limit_error", "slow down", retry_after="1")
            if protocol == "anthropic"
            else gemini_error(429, "RESOURCE_EXHAUSTED", "slow down", retry_after="1"),
        ]
    )
    server = llm_server(protocol, lambda p: next(answers, f"echo: {p}"))
    assert call(provider(protocol, server.url, timeout_ms=10000)) == "echo: hello"
    posts = [r for r in server.requests if r.method == "POST"]
    assert len(posts) == 2, "asked again once the Retry-After had passed"


@pytest.mark.parametrize("protocol", HOSTED)
def test_retry_after_beyond_the_timeout_is_not_waited_for(llm_server: Any, protocol: str) -> None:
    reply = (
        anthropic_error(429, "rate_limit_error", "slow down", retry_after="30")
        if protocol == "anthropic"
        else gemini_error(429, "RESOURCE_EXHAUSTED", "slow down", retry_after="30")
    )
    server = llm_server(protocol, lambda _p: reply)
    error = failure(provider(protocol, server.url, timeout_ms=2000))
    assert isinstance(error, RateLimited) and error.retry_after_s == 30.0
    assert len(server.requests) == 1


@pytest.mark.parametrize("protocol", HOSTED)
def test_a_slow_answer_times_out_as_unavailable(llm_server: Any, protocol: str) -> None:
    server = llm_server(protocol, lambda p: Reply(200, {}, delay_s=3.0))
    error = failure(provider(protocol, server.url, timeout_ms=1000))
    assert isinstance(error, ProviderUnavailable) and not isinstance(error, LlmUnreachable)
    assert "timed out after 1000 ms" in str(error)


@pytest.mark.parametrize("protocol", HOSTED)
def test_a_refused_connection_is_unreachable(llm_server: Any, protocol: str) -> None:
    server = llm_server(protocol)
    server.stop()
    assert isinstance(failure(provider(protocol, server.url)), LlmUnreachable)


@pytest.mark.parametrize("protocol", HOSTED)
def test_the_health_probe_asks_the_models_endpoint_with_the_key(
    llm_server: Any, protocol: str
) -> None:
    server = llm_server(protocol)

    async def probe() -> str:
        llm = provider(protocol, server.url)
        try:
            return str(await llm.probe())
        finally:
            await llm.close()

    assert asyncio.run(probe()) == ""
    [request] = [r for r in server.requests if r.method == "GET"]
    assert request.path == ("/v1/models" if protocol == "anthropic" else "/v1beta/models")
    assert header(request, "x-api-key" if protocol == "anthropic" else "x-goog-api-key") == KEY


# ---- keys ------------------------------------------------------------------------------


def test_the_key_comes_from_an_environment_variable(llm_server: Any) -> None:
    server = llm_server("anthropic")
    config = load_config(
        environ={"MY_ANTHROPIC_KEY": KEY},
        overrides={
            "providers.llm.kind": "anthropic",
            "providers.llm.base_url": server.url,
            "providers.llm.api_key_env": "MY_ANTHROPIC_KEY",
        },
    )
    # llm_provider reads the process environment, like the services do
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MY_ANTHROPIC_KEY", KEY)
        llm = llm_provider(config)
    assert call(llm) == "echo: hello"


def test_the_key_comes_from_a_file(llm_server: Any, tmp_path: Path) -> None:
    server = llm_server("gemini")
    key_file = tmp_path / "gemini.key"
    key_file.write_text(f"{KEY}\n")
    config = load_config(
        environ={},
        overrides={
            "providers.llm.kind": "gemini",
            "providers.llm.base_url": server.url,
            "providers.llm.model": "fake-llm",
            "providers.llm.api_key_file": str(key_file),
        },
    )
    assert call(llm_provider(config)) == "echo: hello"


def test_a_missing_key_source_names_the_setting_not_a_value(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as env:
        env.delenv("ENGRAM_TEST_NO_SUCH_KEY", raising=False)
        config = load_config(
            environ={},
            overrides={
                "providers.llm.kind": "gemini",
                "providers.llm.api_key_env": "ENGRAM_TEST_NO_SUCH_KEY",
            },
        )
        with pytest.raises(
            ConfigError, match=r"providers\.llm\.api_key_env: .*ENGRAM_TEST_NO_SUCH_KEY"
        ):
            llm_provider(config)
    missing = tmp_path / "absent.key"
    config = load_config(
        environ={},
        overrides={"providers.llm.kind": "anthropic", "providers.llm.api_key_file": str(missing)},
    )
    with pytest.raises(ConfigError, match=r"providers\.llm\.api_key_file: cannot read"):
        llm_provider(config)


def test_only_one_key_source_may_be_set() -> None:
    with pytest.raises(ConfigError, match=r"providers\.llm.*at most one of api_key, api_key_env"):
        load_config(
            environ={},
            overrides={"providers.llm.api_key": KEY, "providers.llm.api_key_env": "X"},
        )


def test_hosted_kinds_default_to_their_api_address() -> None:
    anthropic = load_config(environ={}, overrides={"providers.llm.kind": "anthropic"})
    assert anthropic.providers.llm.base_url == "https://api.anthropic.com"
    gemini = load_config(environ={}, overrides={"providers.llm.kind": "gemini"})
    assert gemini.providers.llm.base_url == "https://generativelanguage.googleapis.com"
    ollama = load_config(environ={})
    assert ollama.providers.llm.base_url == "http://localhost:11434"


@pytest.mark.parametrize("protocol", HOSTED)
def test_the_key_never_appears_in_logs_or_errors(
    llm_server: Any, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every outcome a key could leak through: an answer, an authentication
    error, a rate limit, a refused connection, a chain marking states (which logs)."""
    caplog.set_level(logging.DEBUG)
    answers = iter(
        [
            "ok",
            anthropic_error(401, "authentication_error", "invalid x-api-key")
            if protocol == "anthropic"
            else gemini_error(403, "PERMISSION_DENIED", "API key not valid"),
            Reply(429, {"error": "slow"}, headers={"retry-after": "60"}),
        ]
    )
    server = llm_server(protocol, lambda _p: next(answers))
    messages = [call(provider(protocol, server.url))]
    messages += [str(failure(provider(protocol, server.url))) for _ in range(2)]
    down = llm_server(protocol)
    down.stop()
    config = load_config(
        environ={},
        overrides={
            "providers.llm.kind": protocol,
            "providers.llm.base_url": down.url,
            "providers.llm.model": "fake-llm",
            "providers.llm.api_key": KEY,
            "providers.llm_fallbacks": [
                {"kind": protocol, "base_url": down.url, "model": "fake-llm", "api_key": KEY}
            ],
        },
    )
    messages.append(str(failure(llm_provider(config))))
    assert caplog.records, "the calls logged something (the chain's state changes)"
    for text in [*messages, caplog.text]:
        assert KEY not in text


def test_a_printed_configuration_does_not_show_the_key() -> None:
    config = load_config(
        environ={},
        overrides={
            "providers.llm.api_key": KEY,
            "providers.llm_fallbacks": [{"kind": "gemini", "api_key": KEY}],
            "providers.embedding.kind": "openai",
            "providers.embedding.model": "m",
            "providers.embedding.api_key": KEY,
        },
    )
    assert config.providers.llm.api_key == KEY
    assert KEY not in repr(config) and KEY not in str(config)
