"""Embedding providers: local MiniLM (default), Ollama, OpenAI-compatible
(`/v1/embeddings`, hosted OpenAI included), Google Gemini, none.

`providers.embedding.dimensions` (seed 003's `embedding_dimensions`) asks
openai and gemini for shorter vectors of the same model; the provider's `model`
is then `<model>@<dimensions>` (services.common.config.embedding_identity), the
name the vector index records, so another size re-embeds instead of mixing.

Shared by search (query vectors) and the pipeline (memory vectors). Every
network call happens outside any database transaction by construction: these
classes know nothing about the database.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from services.common.config import LOCAL_EMBEDDING_MODEL, Config, embedding_identity
from services.common.providers.errors import (
    ProviderError,
    ProviderUnavailable,
)
from services.common.providers.http import HttpProvider
from services.common.providers.keys import api_key
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
    so does a body that is not JSON. `api_model` is the name sent, `model` the
    index's name for it (with the dimensions when they are reduced)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_ms: int,
        *,
        dimensions: int = 0,
        api_key: str = "",
    ) -> None:
        super().__init__(base_url, timeout_ms, self.auth_headers(api_key))
        self.api_model = model
        self.dimensions = dimensions
        self.model = embedding_identity(model, dimensions)

    @staticmethod
    def auth_headers(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:  # refused, reset, timed out
            raise ProviderUnavailable(f"{self.kind} embeddings unreachable: {exc!r}") from exc
        return self.json_body(response, malformed=ProviderUnavailable, what=self.kind)

    def _sized(self, vectors: list[list[float]]) -> list[list[float]]:
        """The vectors, refused when reduced dimensions were asked for and not given
        (a server that ignores the parameter would fill the index with another size)."""
        if self.dimensions and any(len(v) != self.dimensions for v in vectors):
            raise ProviderError(
                f"{self.kind} returned {len(vectors[0])} dimensions, not the "
                f"{self.dimensions} of providers.embedding.dimensions: does {self.api_model} "
                "support reduced dimensions?"
            )
        return vectors


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
        body = await self._post("/api/embed", {"model": self.api_model, "input": texts})
        return _vectors(
            body.get("embeddings") if isinstance(body, dict) else None, len(texts), self.kind
        )


class OpenAIEmbedding(_HttpEmbedding):
    """OpenAI-compatible `/v1/embeddings` (llama.cpp server, vLLM, LM Studio, hosted
    OpenAI with the key as a bearer token); `dimensions` sent when reduced."""

    kind = "openai"
    health_path = "/v1/models"

    @_measured
    async def embed(self, texts: list[str]) -> list[list[float]]:
        request: dict[str, Any] = {"model": self.api_model, "input": texts}
        if self.dimensions:
            request["dimensions"] = self.dimensions
        body = await self._post("/v1/embeddings", request)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ProviderUnavailable("openai embeddings response has no data list")
        indexes = sorted(item.get("index") for item in data if type(item.get("index")) is int)
        if indexes != list(range(len(texts))) or len(data) != len(texts):
            raise ProviderUnavailable("openai embeddings response has missing or invalid indexes")
        by_index = {item["index"]: item.get("embedding") for item in data}
        return self._sized(
            _vectors([by_index[i] for i in range(len(texts))], len(texts), self.kind)
        )


class GeminiEmbedding(_HttpEmbedding):
    """Google Gemini `POST /v1beta/models/{model}:batchEmbedContents` (one request
    per text, in order; `outputDimensionality` when reduced), the key in the
    `x-goog-api-key` header."""

    kind = "gemini"
    health_path = "/v1beta/models"

    @staticmethod
    def auth_headers(key: str) -> dict[str, str]:
        return {"x-goog-api-key": key} if key else {}

    @_measured
    async def embed(self, texts: list[str]) -> list[list[float]]:
        model = self.api_model.removeprefix("models/")
        requests: list[dict[str, Any]] = []
        for text in texts:
            item: dict[str, Any] = {
                "model": f"models/{model}",
                "content": {"parts": [{"text": text}]},
            }
            if self.dimensions:
                item["outputDimensionality"] = self.dimensions
            requests.append(item)
        body = await self._post(
            f"/v1beta/models/{model}:batchEmbedContents", {"requests": requests}
        )
        items = body.get("embeddings") if isinstance(body, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ProviderUnavailable("gemini embeddings response has no embeddings list")
        return self._sized(_vectors([i.get("values") for i in items], len(texts), self.kind))


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
    settings = config.providers.embedding
    kinds: dict[str, type[OllamaEmbedding | OpenAIEmbedding | GeminiEmbedding]] = {
        "ollama": OllamaEmbedding,
        "openai": OpenAIEmbedding,
        "gemini": GeminiEmbedding,
    }
    cls = kinds[kind]
    return cls(
        settings.base_url,
        model,
        settings.timeout_ms,
        dimensions=settings.dimensions,
        api_key=api_key(settings, "providers.embedding"),
    )
