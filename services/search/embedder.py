"""Query vectors for recall: cached, time-bounded, and never fatal.

A provider failure opens a short circuit so that a dead provider costs one
timeout, not one per query; recall then answers from keywords (degraded).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError

log = logging.getLogger("engram.search.embedder")


class QueryEmbedder:
    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        timeout_s: float = 2.0,
        cool_down_s: float = 5.0,
        cache_size: int = 512,
    ) -> None:
        self.provider = provider
        self._timeout_s = timeout_s
        self._cool_down_s = cool_down_s
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._cache_size = cache_size
        self._open_until = 0.0
        self.last_error = ""

    @property
    def enabled(self) -> bool:
        return self.provider.kind != "none"

    async def embed(self, query: str) -> list[float] | None:
        """The query's vector, or None (with `last_error` set) when unavailable."""
        if not self.enabled:
            self.last_error = "embeddings are disabled (providers.embedding.kind: none)"
            return None
        cached = self._cache.get(query)
        if cached is not None:
            self._cache.move_to_end(query)
            return cached
        if time.monotonic() < self._open_until:
            return None
        try:
            [vector] = await asyncio.wait_for(self.provider.embed([query]), self._timeout_s)
        except (ProviderError, TimeoutError, ValueError) as exc:
            self.last_error = f"query embedding failed: {exc or type(exc).__name__}"
            self._open_until = time.monotonic() + self._cool_down_s
            log.warning("query embedding unavailable", extra={"error": self.last_error})
            return None
        self.last_error = ""
        self._cache[query] = vector
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return vector
