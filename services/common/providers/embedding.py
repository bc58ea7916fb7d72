"""Embedding providers: local MiniLM (default), Ollama, OpenAI-compatible, none.

Shared by search (query vectors) and the pipeline (memory vectors). Every
network call happens outside any database transaction by construction: these
classes know nothing about the database.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from services.common.config import LOCAL_EMBEDDING_MODEL, Config
from services.common.providers.errors import (
    ProviderUnavailable,
)
from services.common.providers.http import HttpProvider
from services.common.providers.local_embedding import (
    LOCAL_EXTRA_HINT,
    LocalEmbedding,
    local_embedding,
    measured_embedding,
)

LOCAL_MODEL = LOCAL_EMBEDDING_MODEL
__all__ = ["LOCAL_EXTRA_HINT", "LOCAL_MODEL", "LocalEmbedding", "embedding_provider"]


_measured = measured_embedding


class EmbeddingProvider(Protocol):
    kind: str
    model: str

    async def embed(self, texts: list[str]) -> list[list[float]]: ...

    async def available(self) -> bool: ...

    async def close(self) -> None: ...


class NoEmbedding:
    """Keywords only."""

    kind = "none"
    model = ""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise ProviderUnavailable("embeddings are disabled (providers.embedding.kind: none)")

    async def available(self) -> bool:
        return False

    async def close(self) -> None:
        return None


class _HttpEmbedding(HttpProvider):
    """Common HTTP handling: connection problems, timeouts and 5xx mean unavailable;
    so does a body that is not JSON."""

    def __init__(self, base_url: str, model: str, timeout_ms: int) -> None:
        super().__init__(base_url, timeout_ms)
        self.model = model

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:  # refused, reset, timed out
            raise ProviderUnavailable(f"{self.kind} embeddings unreachable: {exc!r}") from exc
        return self.json_body(response, malformed=ProviderUnavailable, what=self.kind)


def _vectors(raw: Any, count: int, kind: str) -> list[list[float]]:
    if not isinstance(raw, list) or len(raw) != count:
        raise ProviderUnavailable(
            f"{kind} returned {len(raw) if isinstance(raw, list) else 'no'} vectors for {count} texts"
        )
    vectors: list[list[float]] = []
    for vector in raw:
        if (
            not isinstance(vector, list)
            or not vector
            or not all(isinstance(v, int | float) for v in vector)
        ):
            raise ProviderUnavailable(f"{kind} returned a malformed vector")
        vectors.append([float(v) for v in vector])
    return vectors


class OllamaEmbedding(_HttpEmbedding):
    """Ollama's batched `/api/embed`."""

    kind = "ollama"
    health_path = "/api/tags"

    @_measured
    async def embed(self, texts: list[str]) -> list[list[float]]:
        body = await self._post("/api/embed", {"model": self.model, "input": texts})
        return _vectors(
            body.get("embeddings") if isinstance(body, dict) else None, len(texts), self.kind
        )


class OpenAIEmbedding(_HttpEmbedding):
    """OpenAI-compatible `/v1/embeddings` (llama.cpp server, vLLM, LM Studio, ...)."""

    kind = "openai"
    health_path = "/v1/models"

    @_measured
    async def embed(self, texts: list[str]) -> list[list[float]]:
        body = await self._post("/v1/embeddings", {"model": self.model, "input": texts})
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ProviderUnavailable("openai embeddings response has no data list")
        indexes = sorted(item.get("index") for item in data if type(item.get("index")) is int)
        if indexes != list(range(len(texts))) or len(data) != len(texts):
            raise ProviderUnavailable("openai embeddings response has missing or invalid indexes")
        by_index = {item["index"]: item.get("embedding") for item in data}
        return _vectors([by_index[i] for i in range(len(texts))], len(texts), self.kind)


def embedding_provider(config: Config, *, background: bool = False) -> EmbeddingProvider:
    """`background`: the local model yields the CPU to everything else (the
    pipeline's bulk embedding, so that queries are never starved)."""
    kind = config.providers.embedding.kind
    model = config.providers.embedding.model
    if kind == "none":
        return NoEmbedding()
    if kind == "local":
        settings = config.providers.embedding
        return local_embedding(settings.runtime, settings.threads, background=background)
    timeout_ms = config.providers.embedding.timeout_ms
    base_url = config.providers.embedding.base_url
    if kind == "ollama":
        return OllamaEmbedding(base_url, model, timeout_ms)
    return OpenAIEmbedding(base_url, model, timeout_ms)
