"""Optional reranking (seed 000 "Optional Reranking"): the head of the list goes
to a reranker; past the hard timeout, or on any error, the fused order stands."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

import httpx

from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.http import HttpProvider

log = logging.getLogger("engram.search.rerank")


class Reranker(Protocol):
    async def scores(self, query: str, documents: Sequence[str]) -> list[float]: ...

    async def close(self) -> None: ...


class HttpReranker(HttpProvider):
    """The `/v1/rerank` protocol shared by llama.cpp server, TEI, Jina and Cohere:
    {model, query, documents} -> {results: [{index, relevance_score}]}. Statuses
    follow the providers' one rule (services.common.providers.http): 5xx, 408, 425, 429
    are ProviderUnavailable, other 4xx ProviderError; so are a refused
    connection and a call past `timeout_ms` (memory.pipelineV2.rerankerTimeoutMs)."""

    kind = "reranker"

    def __init__(self, base_url: str, model: str, timeout_ms: int) -> None:
        super().__init__(base_url, timeout_ms)
        self.model = model
        self.timeout_ms = timeout_ms

    async def scores(self, query: str, documents: Sequence[str]) -> list[float]:
        try:
            response = await self._client.post(
                "/v1/rerank",
                json={"model": self.model, "query": query, "documents": list(documents)},
            )
        except httpx.TimeoutException as exc:
            raise ProviderUnavailable(f"reranker exceeded {self.timeout_ms} ms") from exc
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"reranker unreachable: {exc!r}") from exc
        body = self.json_body(response, malformed=ProviderError, what="reranker")
        try:
            by_index = {int(r["index"]): float(r["relevance_score"]) for r in body["results"]}
            return [by_index[i] for i in range(len(documents))]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProviderError(
                f"reranker returned an unusable body: {response.text[:200]}"
            ) from exc


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
    except ProviderUnavailable as exc:  # down or overloaded: worth asking again next time
        log.warning("reranker unavailable", extra={"error": str(exc)})
        return None, f"reranker unavailable ({exc}); fused order kept"
    except ProviderError as exc:  # it refused what we sent: a configuration to fix
        log.error("reranker rejected the request", extra={"error": str(exc)})
        return None, f"reranker rejected the request ({exc}); fused order kept"
    return sorted(range(len(head)), key=lambda i: -scores[i]), ""
