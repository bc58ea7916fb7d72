"""LLM providers (pipeline only): Ollama `/api/generate`, OpenAI-compatible
chat completions, Anthropic's Messages API and Google's Gemini API, behind one
small interface (seed 000 "Provider Abstraction"), optionally as an ordered
fallback chain (`providers.llm` then `providers.llm_fallbacks`).

Failures are split by what the caller should do about them:
- `LlmUnreachable` (a ProviderUnavailable): no connection could be made. The
  provider is down and no job is at fault: work is handed back unattempted.
- `ProviderUnavailable`: timed out, or answered 5xx/408/425/429. The provider is up but
  failing this call: a failed attempt that retries with backoff. `RateLimited`
  (429, Anthropic's 529) is one: an answer with Retry-After is asked again after
  that wait when it ends within the call's timeout (services/common/backoff.py).
- `ProviderError`: any other bad answer (4xx, a body that is not the protocol's
  JSON). Also a failed attempt.

Every call holds a slot of a per-provider semaphore (`providers.llm.concurrency`),
so the pipeline never fans out unboundedly however many workers it runs.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from services.common.backoff import retry_after_s, wait_within
from services.common.config import Config, LlmProviderSettings, PipelineV2Settings
from services.common.metrics import LLM_ERRORS, LLM_SECONDS, measured_call
from services.common.provider_state import ProviderHealth, mark
from services.common.providers.errors import (
    RATE_LIMIT_STATUSES,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)
from services.common.providers.http import HttpProvider
from services.common.providers.keys import api_key
from services.common.validation import CONTROL_CHARACTERS

_SEED_DEFAULTS = PipelineV2Settings()


class LlmUnreachable(ProviderUnavailable):
    """No connection to the provider (refused, unresolvable): it is down."""


# every provider's generate(): latency and errors by kind (services/common/metrics.py)
_measured = measured_call(LLM_SECONDS, LLM_ERRORS)

# U+0000 raw, or as a JSON escape not itself escaped (an even run of backslashes before it).
_NUL = re.compile(r"\x00|(?<!\\)((?:\\\\)*)\\u0000")
# The other control characters the store refuses (services/common/validation.py,
# check_no_control: C0 but tab, LF, CR; DEL; C1), raw or as JSON escapes.
_OTHER_CONTROL = CONTROL_CHARACTERS.replace("\x00", "")
_CONTROL = re.compile(
    f"[{re.escape(_OTHER_CONTROL)}]"
    r"|(?<!\\)((?:\\\\)*)\\u(?:" + "|".join(f"{ord(ch):04x}" for ch in _OTHER_CONTROL) + ")",
    re.IGNORECASE,
)


def without_nul(answer: str) -> str:
    """The answer with every U+0000 dropped and every other control character the
    store refuses replaced by a space, raw or JSON-escaped: the store refuses them
    in any text field (PostgreSQL cannot hold U+0000; ESC would reach a terminal),
    and a model that emits one must not make its job fail on every retry."""
    if "\x00" in answer or "u0000" in answer:
        answer = _NUL.sub(lambda m: m.group(1) or "", answer)
    return _CONTROL.sub(lambda m: (m.group(1) or "") + " ", answer)


class LlmProvider(Protocol):
    kind: str
    model: str

    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        """The model's answer text for `prompt` (JSON requested unless told otherwise)."""
        ...

    async def available(self) -> bool: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class LlmSettings:
    kind: str
    base_url: str
    model: str
    timeout_ms: int
    api_key: str
    concurrency: int
    max_tokens: int = 4096


def _settings(llm: LlmProviderSettings, where: str, model: str, timeout_ms: int) -> LlmSettings:
    return LlmSettings(
        kind=llm.kind,
        base_url=llm.base_url.rstrip("/"),
        model=model,
        timeout_ms=timeout_ms,
        api_key=api_key(llm, where),
        concurrency=llm.concurrency,
        max_tokens=llm.max_tokens,
    )


def llm_settings(config: Config) -> LlmSettings:
    """`providers.llm.*`, except that seed 000's `memory.pipelineV2.extractionModel`
    and `extractionTimeout` win when they were changed from the seed's defaults
    (both keys configure the same thing; the seed's names must keep working)."""
    seed_model = config.memory.pipelineV2.extractionModel
    seed_timeout = config.memory.pipelineV2.extractionTimeout
    model_changed = seed_model != _SEED_DEFAULTS.extractionModel
    timeout_changed = seed_timeout != _SEED_DEFAULTS.extractionTimeout
    llm = config.providers.llm
    return _settings(
        llm,
        "providers.llm",
        seed_model if model_changed else llm.model,
        seed_timeout if timeout_changed else llm.timeout_ms,
    )


def chain_settings(config: Config) -> list[LlmSettings]:
    """The primary provider, then each of `providers.llm_fallbacks` in order."""
    return [llm_settings(config)] + [
        _settings(entry, f"providers.llm_fallbacks[{i}]", entry.model, entry.timeout_ms)
        for i, entry in enumerate(config.providers.llm_fallbacks)
    ]


class _HttpLlm(HttpProvider):
    """HTTP handling shared by every protocol: errors, the timeout budget, Retry-After,
    the semaphore. The key goes only into the headers `auth_headers` builds."""

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_ms: int,
        *,
        concurrency: int,
        api_key: str = "",
        max_tokens: int = 4096,
    ) -> None:
        super().__init__(base_url, timeout_ms, self.auth_headers(api_key))
        self.model = model
        self.timeout_ms = timeout_ms
        self.max_tokens = max_tokens
        self._slots = asyncio.Semaphore(concurrency)

    @staticmethod
    def auth_headers(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST within `timeout_ms` in all: a rate-limited answer whose Retry-After
        ends before the budget does is asked again after that wait. The budget starts
        once a slot is free: waiting behind this process's own calls (a local server
        generating one answer at a time) is not the provider being slow."""
        async with self._slots:
            deadline = time.monotonic() + self.timeout_ms / 1000
            while True:
                remaining = deadline - time.monotonic()
                try:
                    if remaining <= 0:
                        raise httpx.TimeoutException("no time left in the call's budget")
                    response = await self._client.post(path, json=body, timeout=remaining)
                except httpx.TimeoutException as exc:
                    raise ProviderUnavailable(
                        f"{self.kind} LLM timed out after {self.timeout_ms} ms"
                    ) from exc
                except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
                    raise LlmUnreachable(f"{self.kind} LLM unreachable: {exc!r}") from exc
                except httpx.HTTPError as exc:  # reset mid-answer and the like
                    raise ProviderUnavailable(
                        f"{self.kind} LLM connection failed: {exc!r}"
                    ) from exc
                if response.status_code in RATE_LIMIT_STATUSES or response.status_code == 503:
                    wait = wait_within(retry_after_s(response.headers.get("retry-after")), deadline)
                    if wait is not None:
                        await asyncio.sleep(wait)
                        continue
                return self.json_body(response, malformed=ProviderError, what=f"{self.kind} LLM")


class OllamaLlm(_HttpLlm):
    """Ollama `POST /api/generate`: no streaming, JSON format, thinking off."""

    kind = "ollama"
    health_path = "/api/tags"

    @_measured
    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "stream": False,
            "think": False,
            # a small model may otherwise run on to the end of its context
            "options": {"num_predict": self.max_tokens},
        }
        if json_output:
            body["format"] = "json"
        answer = await self._post("/api/generate", body)
        text = answer.get("response") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise ProviderError(f"ollama answer has no response text: {str(answer)[:200]!r}")
        return without_nul(text)


class OpenAILlm(_HttpLlm):
    """OpenAI-compatible `POST /v1/chat/completions` (llama.cpp server, vLLM, LM Studio,
    hosted OpenAI); the key is a bearer token."""

    kind = "openai"
    health_path = "/v1/models"

    @_measured
    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": False,
            "max_tokens": self.max_tokens,
        }
        if json_output:
            body["response_format"] = {"type": "json_object"}
        answer = await self._post("/v1/chat/completions", body)
        try:
            text = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            text = None
        if not isinstance(text, str):
            raise ProviderError(f"openai answer has no message content: {str(answer)[:200]!r}")
        return without_nul(text)


# The Messages API version this client speaks (sent as `anthropic-version`).
ANTHROPIC_VERSION = "2023-06-01"
JSON_ONLY = "Answer with one JSON object and nothing else."


class AnthropicLlm(_HttpLlm):
    """Anthropic `POST /v1/messages` (`x-api-key`, `anthropic-version`); the answer
    is the text blocks of `content`. JSON is asked for by a system instruction
    (the API has no JSON switch); the extractor's parser takes the first object."""

    kind = "anthropic"
    health_path = "/v1/models"

    @staticmethod
    def auth_headers(key: str) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        return {**headers, "x-api-key": key} if key else headers

    @_measured
    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        }
        if json_output:
            body["system"] = JSON_ONLY
        answer = await self._post("/v1/messages", body)
        blocks = answer.get("content") if isinstance(answer, dict) else None
        texts = (
            [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
            if isinstance(blocks, list)
            else []
        )
        if not texts:
            raise ProviderError(f"anthropic answer has no text content: {str(answer)[:200]!r}")
        return without_nul("".join(texts))


class GeminiLlm(_HttpLlm):
    """Google Gemini `POST /v1beta/models/{model}:generateContent`, the key in the
    `x-goog-api-key` header (never in the URL, which error messages show); the
    answer is the text parts of the first candidate."""

    kind = "gemini"
    health_path = "/v1beta/models"

    @staticmethod
    def auth_headers(key: str) -> dict[str, str]:
        return {"x-goog-api-key": key} if key else {}

    @_measured
    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        config: dict[str, Any] = {"maxOutputTokens": self.max_tokens}
        if json_output:
            config["responseMimeType"] = "application/json"
        body = {
            "contents": [{"role": "user", "parts": [{"text": prompt}]}],
            "generationConfig": config,
        }
        model = self.model.removeprefix("models/")
        answer = await self._post(f"/v1beta/models/{model}:generateContent", body)
        try:
            parts = answer["candidates"][0]["content"]["parts"]
            texts = [
                p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
            ]
        except (KeyError, IndexError, TypeError):
            texts = []
        if not texts:
            raise ProviderError(f"gemini answer has no candidate text: {str(answer)[:200]!r}")
        return without_nul("".join(texts))


_KINDS: dict[str, type[OllamaLlm | OpenAILlm | AnthropicLlm | GeminiLlm]] = {
    "ollama": OllamaLlm,
    "openai": OpenAILlm,
    "anthropic": AnthropicLlm,
    "gemini": GeminiLlm,
}


def _build(settings: LlmSettings) -> LlmProvider:
    return _KINDS[settings.kind](
        settings.base_url,
        settings.model,
        settings.timeout_ms,
        concurrency=settings.concurrency,
        api_key=settings.api_key,
        max_tokens=settings.max_tokens,
    )


class LlmChain:
    """An ordered list of providers answering as one: a call goes to the next
    provider when one is unreachable, rate limited or timing out
    (ProviderUnavailable); an answer that is the request's fault (ProviderError)
    is raised at once, as another provider would refuse it too. A provider that
    sent Retry-After is tried last until that time has passed. `health` holds
    each provider's state (GetStatus lists them in order); `model` is the model
    that answered last (what extraction records)."""

    def __init__(self, members: list[LlmProvider]) -> None:
        self.members = members
        self.kind = members[0].kind
        self.health = [
            ProviderHealth("llm", m.kind, m.model, position=i) for i, m in enumerate(members)
        ]
        self._resting_until = [0.0] * len(members)
        self.model = members[0].model

    def _order(self) -> list[int]:
        now = time.monotonic()
        ready = [i for i in range(len(self.members)) if self._resting_until[i] <= now]
        return ready + [i for i in range(len(self.members)) if i not in ready]

    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        failures: list[tuple[int, ProviderUnavailable]] = []
        for i in self._order():
            member, health = self.members[i], self.health[i]
            try:
                text = await member.generate(prompt, json_output=json_output)
            except RateLimited as exc:
                wait = exc.retry_after_s or 0.0
                self._resting_until[i] = time.monotonic() + wait
                mark(health, "rate_limited", str(exc))
                failures.append((i, exc))
                continue
            except ProviderUnavailable as exc:
                mark(health, "degraded", str(exc))
                failures.append((i, exc))
                continue
            mark(health, "available", "")
            self.model = member.model
            return text
        summary = "; ".join(f"[{i}] {self.members[i].kind}: {e}" for i, e in failures)
        if all(isinstance(e, LlmUnreachable) for _, e in failures):
            raise LlmUnreachable(f"every LLM provider is unreachable: {summary}")
        raise ProviderUnavailable(f"no LLM provider answered: {summary}")

    async def available(self) -> bool:
        return any(await asyncio.gather(*(m.available() for m in self.members)))

    async def close(self) -> None:
        await asyncio.gather(*(m.close() for m in self.members))


def llm_provider(config: Config) -> LlmProvider:
    """`providers.llm` alone, or with `providers.llm_fallbacks` an LlmChain."""
    members = [_build(settings) for settings in chain_settings(config)]
    return members[0] if len(members) == 1 else LlmChain(members)
