"""Query vectors for recall: cached, micro-batched, time-bounded, never fatal.

Concurrent Recalls' queries are embedded together: while one provider call
runs, new queries wait in a queue, and the next call takes all of them (one
model call of 8 short queries costs about what 2 single calls do, and no query
waits behind a line of single calls). A caller gives up after its timeout and
its query is dropped from the queue, so abandoned work never runs.

A timeout is not an outage: under load the next query may well make it, so it
costs only the Recall that waited. A provider error opens a short circuit, and
so does a provider call that has already run past the timeout (a stalled
provider): a dead provider costs one timeout, not one per query. Recall then
answers from keywords (degraded), and the warning names the cause.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError

log = logging.getLogger("engram.search.embedder")

# Queries per provider call; a queue longer than this is served by several calls.
MAX_BATCH = 32


class QueryEmbedder:
    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        timeout_s: float = 2.0,
        cool_down_s: float = 5.0,
        cache_size: int = 512,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self.provider = provider
        self._timeout_s = timeout_s
        self._cool_down_s = cool_down_s
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._cache_size = cache_size
        self._max_batch = max_batch
        self._queue: list[tuple[str, asyncio.Future[list[float]]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._call_started: float | None = None  # the provider call in progress
        self._open_until = 0.0
        self._open_cause = ""
        # The cause of the most recent failure. A success does not clear it: a
        # failed Recall reads it after its own failure, and concurrent Recalls
        # must not blank each other's warning.
        self.last_error = ""

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

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
        now = time.monotonic()
        if now < self._open_until:
            self._fail(f"query embedding skipped after a provider failure: {self._open_cause}")
            return None
        if self._call_started is not None and now - self._call_started > self._timeout_s:
            self._fail(
                "query embedding skipped: the provider has not answered for "
                f"{now - self._call_started:.1f} s"
            )
            return None
        future: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        self._queue.append((query, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        try:
            # On timeout wait_for cancels the future, so the drainer skips it.
            return await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            self._fail(f"query embedding timed out after {self._timeout_s:g} s")
            return None
        except (ProviderError, ValueError) as exc:
            self._fail(f"query embedding failed: {describe(exc)}")
            return None

    def _fail(self, cause: str) -> None:
        self.last_error = cause
        log.warning("query embedding unavailable", extra={"error": cause})

    async def _drain(self) -> None:
        """Embed the queue, oldest first, `max_batch` waiting queries a call (a text
        asked for twice is embedded once; queries whose callers gave up are dropped)."""
        while self._queue:
            batch = [(q, f) for q, f in self._queue[: self._max_batch] if not f.done()]
            del self._queue[: self._max_batch]
            if not batch:
                continue
            texts = list(dict.fromkeys(query for query, _ in batch))
            self._call_started = time.monotonic()
            try:
                by_text = dict(zip(texts, await self.provider.embed(texts), strict=True))
            except Exception as exc:  # every waiter learns it; the drainer lives on
                if isinstance(exc, ProviderError | ValueError):
                    self._open_cause = describe(exc)
                    self._open_until = time.monotonic() + self._cool_down_s
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self._call_started = None
            for text, vector in by_text.items():
                self._remember(text, vector)
            for query, future in batch:
                if not future.done():
                    future.set_result(by_text[query])

    def _remember(self, query: str, vector: list[float]) -> None:
        self._cache[query] = vector
        self._cache.move_to_end(query)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


def describe(exc: BaseException) -> str:
    """An exception as text that is never empty (str() of many exceptions is "")."""
    return str(exc) or type(exc).__name__
