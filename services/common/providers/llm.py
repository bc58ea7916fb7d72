"""LLM providers (pipeline only): Ollama `/api/generate` and OpenAI-compatible
chat completions, behind one small interface (seed 000 "Provider Abstraction").

Failures are split by what the caller should do about them:
- `LlmUnreachable` (a ProviderUnavailable): no connection could be made. The
  provider is down and no job is at fault: work is handed back unattempted.
- `ProviderUnavailable`: timed out, or answered 5xx/408/425/429. The provider is up but
  failing this call: a failed attempt that retries with backoff.
- `ProviderError`: any other bad answer (4xx, a body that is not the protocol's
  JSON). Also a failed attempt.

Every call holds a slot of a per-provider semaphore (`providers.llm.concurrency`),
so the pipeline never fans out unboundedly however many workers it runs.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from services.common.config import Config, PipelineV2Settings
from services.common.metrics import LLM_ERRORS, LLM_SECONDS, measured_call
from services.common.providers.errors import (
    ProviderError,
    ProviderUnavailable,
)
from services.common.providers.http import HttpProvider
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


def llm_settings(config: Config) -> LlmSettings:
    """`providers.llm.*`, except that seed 000's `memory.pipelineV2.extractionModel`
    and `extractionTimeout` win when they were changed from the seed's defaults
    (both keys configure the same thing; the seed's names must keep working)."""
    seed_model = config.memory.pipelineV2.extractionModel
    seed_timeout = config.memory.pipelineV2.extractionTimeout
    model_changed = seed_model != _SEED_DEFAULTS.extractionModel
    timeout_changed = seed_timeout != _SEED_DEFAULTS.extractionTimeout
    llm = config.providers.llm
    return LlmSettings(
        kind=llm.kind,
        base_url=llm.base_url.rstrip("/"),
        model=seed_model if model_changed else llm.model,
        timeout_ms=seed_timeout if timeout_changed else llm.timeout_ms,
        api_key=llm.api_key,
        concurrency=llm.concurrency,
    )


class _HttpLlm(HttpProvider):
    """HTTP handling shared by both protocols: errors, timeout, the semaphore."""

    def __init__(
        self, base_url: str, model: str, timeout_ms: int, *, concurrency: int, api_key: str = ""
    ) -> None:
        super().__init__(
            base_url, timeout_ms, {"Authorization": f"Bearer {api_key}"} if api_key else None
        )
        self.model = model
        self.timeout_ms = timeout_ms
        self._slots = asyncio.Semaphore(concurrency)

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        async with self._slots:
            try:
                response = await self._client.post(path, json=body)
            except httpx.TimeoutException as exc:
                raise ProviderUnavailable(
                    f"{self.kind} LLM timed out after {self.timeout_ms} ms"
                ) from exc
            except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
                raise LlmUnreachable(f"{self.kind} LLM unreachable: {exc!r}") from exc
            except httpx.HTTPError as exc:  # reset mid-answer and the like
                raise ProviderUnavailable(f"{self.kind} LLM connection failed: {exc!r}") from exc
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
        }
        if json_output:
            body["format"] = "json"
        answer = await self._post("/api/generate", body)
        text = answer.get("response") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise ProviderError(f"ollama answer has no response text: {str(answer)[:200]!r}")
        return without_nul(text)


class OpenAILlm(_HttpLlm):
    """OpenAI-compatible `POST /v1/chat/completions` (llama.cpp server, vLLM, LM Studio)."""

    kind = "openai"
    health_path = "/v1/models"

    @_measured
    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": False,
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


def llm_provider(config: Config) -> LlmProvider:
    settings = llm_settings(config)
    cls = OllamaLlm if settings.kind == "ollama" else OpenAILlm
    return cls(
        settings.base_url,
        settings.model,
        settings.timeout_ms,
        concurrency=settings.concurrency,
        api_key=settings.api_key,
    )
