"""What every HTTP provider (embeddings, LLM, reranker) shares: one client, the
status-code rule (services.common.providers.errors.retryable_status: 5xx, 408,
425 and 429 mean unavailable, other 4xx a bad request), JSON bodies and the
health probe."""

from __future__ import annotations

from typing import Any

import httpx

from services.common.backoff import retry_after_s
from services.common.providers.errors import (
    RATE_LIMIT_STATUSES,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    describe_http_error,
    retryable_status,
)

AVAILABILITY_TIMEOUT_S = 3.0


class HttpProvider:
    kind = ""
    health_path = ""

    def __init__(self, base_url: str, timeout_ms: int, headers: dict[str, str] | None = None):
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout_ms / 1000, headers=headers or {}
        )

    @staticmethod
    def json_body(response: httpx.Response, *, malformed: type[ProviderError], what: str) -> Any:
        """The decoded body of a successful answer; `malformed` is raised (naming
        `what`) when it is not JSON. 429 and 529 raise RateLimited with the
        answer's Retry-After."""
        if response.status_code in RATE_LIMIT_STATUSES:
            raise RateLimited(
                describe_http_error(response.status_code, response.text),
                retry_after_s(response.headers.get("retry-after")),
            )
        if response.status_code >= 400 and retryable_status(response.status_code):
            raise ProviderUnavailable(describe_http_error(response.status_code, response.text))
        if response.status_code >= 400:
            raise ProviderError(describe_http_error(response.status_code, response.text))
        try:
            return response.json()
        except ValueError as exc:
            raise malformed(
                f"{what} returned a body that is not JSON: {response.text[:200]!r}"
            ) from exc

    async def probe(self) -> str:
        """Ask the server's health path (`/api/tags`, `/v1/models`): "" when it
        answers, else why not, naming the address."""
        where = f"{self.kind} at {self.base_url}{self.health_path}"
        try:
            response = await self._client.get(self.health_path, timeout=AVAILABILITY_TIMEOUT_S)
        except httpx.TimeoutException:
            return f"{where} did not answer within {AVAILABILITY_TIMEOUT_S:g} s"
        except httpx.HTTPError as exc:  # refused, unresolvable, reset
            return f"{where} unreachable: {exc!r}"
        if response.status_code >= 400:
            return f"{where} answered {describe_http_error(response.status_code, response.text)}"
        return ""

    async def available(self) -> bool:
        return not await self.probe()

    async def close(self) -> None:
        await self._client.aclose()
