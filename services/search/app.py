"""Assemble and run the search service (read-only over the store's database:
the SQLite file, or the PostgreSQL database through its read-only role)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.internal.v1 import access_pb2_grpc
from services.common.auth import server_guard
from services.common.channels import channel as service_channel
from services.common.config import Config
from services.common.listeners import listener
from services.common.providers.embedding import (
    EmbeddingProvider,
    LocalEmbedding,
    embedding_provider,
)
from services.common.server import RunningServer, StartupError, cancel_tasks, start_server
from services.common.suite import announce_own_suite, own_suite_id
from services.search.access import AccessRecorder
from services.search.context import ContextAssembler, ContextParams
from services.search.embedder import QueryEmbedder
from services.search.query_intent import IntentClassifier
from services.search.recall import Recaller, RecallParams
from services.search.rerank import HttpReranker, Reranker
from services.search.servicer import SearchServicer
from services.search.tokens import TokenizerUnavailable, tokenizer
from services.search.vector_cache import VectorCache
from services.storage.db import ReadPool, backend_for
from services.storage.schema import SCHEMA_VERSION

log = logging.getLogger("engram.search")

SERVICE_NAME = search_pb2.DESCRIPTOR.services_by_name["SearchService"].full_name


def recall_params(config: Config) -> RecallParams:
    """Recall's parameters from the configuration (RecallParams.from_config; bench/ calls this)."""
    return RecallParams.from_config(config)


def context_params(config: Config) -> ContextParams:
    """AssembleContext's parameters (ContextParams.from_settings; bench/ calls this)."""
    return ContextParams.from_settings(config.search.context)


async def warm_then_serve(
    provider: LocalEmbedding, server: RunningServer, classifier: IntentClassifier | None = None
) -> None:
    """Load and warm the in-process model (and embed the intent examples with
    it), then health SERVING: the first Recall a health-aware client sends
    finds a warm model, not a load that outlasts the query-embedding timeout,
    and is classified as every later one. A model that cannot load still ends
    in SERVING (logged with its cause): keyword recall works without it."""
    started = time.monotonic()
    try:
        await provider.warm_up()
    except Exception as exc:  # a missing or broken model must not keep search down
        log.error(
            "local embedding model failed to load; recall is keyword-only",
            extra={"error": f"{type(exc).__name__}: {exc}"},
        )
    else:
        log.info(
            "embedding model warm",
            extra={
                "model": provider.model,
                "load_ms": round((time.monotonic() - started) * 1000),
            },
        )
        if classifier is not None:
            await classifier.wait_ready()
    await server.serve()


@dataclass
class SearchApp:
    server: RunningServer
    reads: ReadPool
    access: AccessRecorder
    channel: grpc.aio.Channel
    provider: EmbeddingProvider
    reranker: Reranker | None
    vector_cache: VectorCache | None  # SQLite's; on Postgres the HNSW index is the first pass
    background: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_seconds: float) -> None:
        await self.server.stop(grace_seconds)
        await cancel_tasks(self.background)
        await self.access.stop()
        await self.channel.close(None)
        await self.reads.close()
        if self.vector_cache is not None:
            await self.vector_cache.close()
        await self.provider.close()
        if self.reranker is not None:
            await self.reranker.close()


async def start_search(
    config: Config, *, host: str | None = None, port: int | None = None
) -> SearchApp:
    guard = server_guard(config, host or config.server.host)  # protected mode: first
    try:  # a tokenizer that is not installed stops search before it waits for anything
        counter = tokenizer(config.search.context.tokenizer)
    except TokenizerUnavailable as exc:
        raise StartupError(str(exc)) from exc
    # first: a bad TLS setting stops search before it waits for anything
    public = listener(config, config.server.ports.search if port is None else port, host)
    # the store's internal listener: AccessService (search reads the file itself)
    channel = service_channel(config, config.clients.store_internal_address)
    suite_id = await own_suite_id(
        channel, config.clients.suite_id, config.clients.store_internal_address
    )
    backend = backend_for(config.storage, log)
    # the version the code is written for (every column its queries select), not an older one
    await backend.wait_for_schema(SCHEMA_VERSION)
    reads = await backend.open_read_pool("search")
    provider = embedding_provider(config)
    embedder = QueryEmbedder(provider, timeout_s=config.search.query_embedding_timeout_ms / 1000)
    access = AccessRecorder(
        access_pb2_grpc.AccessServiceStub(channel),
        flush_interval_s=config.search.access_flush_ms / 1000,
    )
    reranker: Reranker | None = None
    if config.memory.pipelineV2.rerankerEnabled:
        reranker = HttpReranker(
            config.providers.reranker.base_url,
            config.memory.pipelineV2.rerankerModel,
            config.memory.pipelineV2.rerankerTimeoutMs,
        )
    vector_cache = (
        None
        if backend.dialect.is_postgres
        else VectorCache(
            config.storage.path,
            busy_timeout_ms=config.storage.busy_timeout_ms,
            mmap_mb=config.storage.read_mmap_mb,
        )
    )
    recaller = Recaller(
        reads,
        embedder,
        recall_params(config),
        reranker=reranker,
        access=access,
        vector_cache=vector_cache,
    )
    assembler = ContextAssembler(recaller, reads, counter, context_params(config))
    # Health waits for the in-process model only. A remote provider (ollama,
    # openai) is not waited for: it may stay down for hours, and recall from
    # keywords works meanwhile (degraded, with the cause in its warnings).
    local = provider if isinstance(provider, LocalEmbedding) else None
    server = await start_server(
        public,
        [SERVICE_NAME],
        lambda s: search_pb2_grpc.add_SearchServiceServicer_to_server(
            SearchServicer(recaller, assembler), s
        ),
        serving=local is None,
        guard=guard,
    )
    access.start()
    background: list[asyncio.Task[Any]] = []
    learning = await announce_own_suite(server.health, channel, suite_id)
    if learning is not None:
        background.append(learning)
    if local is not None:
        background.append(asyncio.create_task(warm_then_serve(local, server, recaller.classifier)))
        log.info(
            "search listening; NOT_SERVING until the embedding model is loaded",
            extra={"port": server.port, "path": backend.describe("search"), "model": local.model},
        )
    else:
        recaller.classifier.start()  # the examples embed in the background
        log.info("search serving", extra={"port": server.port, "path": backend.describe("search")})
    return SearchApp(server, reads, access, channel, provider, reranker, vector_cache, background)
