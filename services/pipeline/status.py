"""What the pipeline reports about its workers and providers (GetStatus), and
the monitor that keeps each provider's state true to a real probe."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import astuple, dataclass
from typing import Any

from services.common.provider_state import ProviderHealth, mark
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.http import HttpProvider
from services.common.providers.llm import LlmProvider

__all__ = ["MonitoredLlm", "ProviderHealth", "ProviderMonitor", "WorkerStatus", "provider_probe"]


@dataclass
class WorkerStatus:
    name: str
    state: str = "idle"  # idle | busy | backoff | stopped
    completed: int = 0
    failed: int = 0
    released: int = 0
    last_error: str = ""
    last_batch_at: str | None = None


Probe = Callable[[], Awaitable[str]]


def provider_probe(provider: Any) -> Probe:
    """How to ask `provider` whether it works ("" when it does, else why not): an
    HTTP provider's health path (`/api/tags`, `/v1/models`); for the in-process
    model, embedding one word (which loads the model on first use)."""
    if isinstance(provider, HttpProvider):
        return provider.probe

    async def embed_one_word() -> str:
        try:
            await provider.embed(["probe"])
        except ProviderError as exc:
            return str(exc)
        return ""

    return embed_one_word


class ProviderMonitor:
    """Keeps one ProviderHealth true: probed at start and every `interval_s`, and
    set at once by the outcome of a real call (`failed`, `succeeded`). The
    workers also write their calls' outcomes into the same record; a probe
    never overwrites an outcome that arrived while it ran.

    `configured` False (services.common.config.llm_configured): an LLM no
    feature calls is "not configured" (disabled), never probed, and a failed
    call (an Extract dry run against the default address) leaves it so, with
    the error kept; a call that works shows it available."""

    def __init__(
        self, health: ProviderHealth, probe: Probe, interval_s: float, *, configured: bool = True
    ) -> None:
        self.health = health
        self._probe = probe
        self._interval_s = interval_s
        self._configured = configured

    async def check(self) -> None:
        """Probe now; a provider of kind `none`, or not configured, is disabled."""
        if self.health.kind == "none" or not self._configured:
            if self.health.state != "available":
                self._set("disabled", "" if self.health.kind == "none" else NOT_CONFIGURED)
            return
        before = astuple(self.health)
        try:
            error = await self._probe()
        except Exception as exc:  # a probe must never kill the monitor
            error = f"probe failed: {exc!r}"
        if astuple(self.health) == before:
            self._set("degraded" if error else "available", error)

    async def run(self) -> None:
        while True:
            await self.check()
            if self.health.state == "disabled":
                return
            await asyncio.sleep(self._interval_s)

    def failed(self, error: str) -> None:
        self._set("degraded" if self._configured else "disabled", error)

    def succeeded(self) -> None:
        self._set("available", "")

    def _set(self, state: str, error: str) -> None:
        mark(self.health, state, error)


# last_error of an LLM that is not configured: what would configure it
NOT_CONFIGURED = (
    "not configured: no enabled feature calls an LLM; set providers.llm (kind, base_url, "
    "model) and memory.pipelineV2.enabled to use one"
)


class MonitoredLlm:
    """An LLM whose calls report their outcome to a monitor at once: an Extract
    RPC that fails because the LLM is down shows in GetStatus right away."""

    def __init__(self, llm: LlmProvider, monitor: ProviderMonitor) -> None:
        self.kind = llm.kind
        self.model = llm.model
        self._llm = llm
        self._monitor = monitor

    async def generate(self, prompt: str, *, json_output: bool = True) -> str:
        try:
            text = await self._llm.generate(prompt, json_output=json_output)
        except ProviderUnavailable as exc:
            self._monitor.failed(str(exc))
            raise
        self._monitor.succeeded()
        return text

    async def available(self) -> bool:
        return await self._llm.available()

    async def close(self) -> None:
        await self._llm.close()
