"""Optional reranking (seed 000 "Optional Reranking"): the head of the list goes
to a reranker; past the hard timeout, or on any error, the fused order stands."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

import httpx

from services.common.providers.errors import ProviderError, describe_http_error

log = logging.getLogger("engram.search.rerank")


class Reranker(Protocol):
    async def scores(self, query: str, documents: Sequence[str]) -> list[float]: ...

    async def close(self) -> None: ...


class HttpReranker:
    """The `/v1/rerank` protocol shared by llama.cpp server, TEI, Jina and Cohere:
    {model, query, documents} -> {results: [{index, relevance_score}]}."""

    def __init__(self, base_url: str, model: str) -> None:
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"))
        self._model = model

    async def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        try:
            response = await self._client.post(
                "/v1/rerank",
                json={"model": self._model, "query": query, "documents": list(documents)},
            )
        except httpx.HTTPError as exc:
            raise ProviderError(f"reranker unreachable: {exc!r}") from exc
        if response.status_code >= 400:
            raise ProviderError(describe_http_error(response.status_code, response.text))
        try:
            results = response.json()["results"]
            by_index = {int(r["index"]): float(r["relevance_score"]) for r in results}
            return [by_index[i] for i in range(len(documents))]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProviderError(
                f"reranker returned an unusable body: {response.text[:200]}"
            ) from exc

    async def close(self) -> None:
        await self._client.aclose()


async def rerank_head(
    reranker: Reranker, query: str, documents: Sequence[str], top_n: int, timeout_s: float
) -> tuple[list[int] | None, str]:
    """New order of the first `top_n` positions (indexes into `documents`), or None
    with the reason when the fused order must stand."""
    head = list(documents[:top_n])
    if len(head) < 2:
        return None, ""
    try:
        scores = await asyncio.wait_for(reranker.scores(query, head), timeout_s)
    except TimeoutError:
        return None, f"reranker exceeded {timeout_s * 1000:.0f} ms; fused order kept"
    except ProviderError as exc:
        log.warning("reranker failed", extra={"error": str(exc)})
        return None, f"reranker failed ({exc}); fused order kept"
    return sorted(range(len(head)), key=lambda i: -scores[i]), ""
