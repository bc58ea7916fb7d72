"""Assemble and run the pipeline: store client, providers, workers, gRPC server."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import grpc

from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc
from engram.search.v1 import search_pb2_grpc
from engram.store.internal.v1 import dedup_pb2_grpc, documents_pb2_grpc, job_queue_pb2_grpc
from services.common.auth import server_guard
from services.common.channels import channel as service_channel
from services.common.config import Config, llm_configured
from services.common.listeners import listener
from services.common.pii import PiiGate
from services.common.providers.embedding import EmbeddingProvider, embedding_provider
from services.common.providers.llm import LlmChain, LlmProvider, llm_provider
from services.common.server import RunningServer, cancel_tasks, start_server
from services.common.suite import announce_own_suite, own_suite_id
from services.pipeline.consolidate_worker import ConsolidateWorker, consolidate_settings
from services.pipeline.decision import Decider
from services.pipeline.document_servicer import Documents
from services.pipeline.document_worker import DocumentWorker
from services.pipeline.embed_worker import EmbedWorker
from services.pipeline.extract_worker import ExtractPoolSettings, ExtractWorker
from services.pipeline.extraction import Extractor
from services.pipeline.leases import instance_name, worker_identities
from services.pipeline.near_dup import DedupPolicy, NearDuplicates, dedup_settings
from services.pipeline.servicer import PipelineServicer
from services.pipeline.status import MonitoredLlm, ProviderMonitor, provider_probe
from services.pipeline.summarize_worker import SummarizeWorker, summarize_settings

log = logging.getLogger("engram.pipeline")

SERVICE_NAME = pipeline_pb2.DESCRIPTOR.services_by_name["PipelineService"].full_name


@dataclass
class PipelineApp:
    server: RunningServer
    channel: grpc.aio.Channel
    provider: EmbeddingProvider
    embed_worker: EmbedWorker
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    llm: LlmProvider | None = None
    search_channel: grpc.aio.Channel | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_seconds: float) -> None:
        await self.server.stop(grace_seconds)
        await cancel_tasks(self.background)
        await self.channel.close(None)
        await self.provider.close()
        if self.search_channel is not None:
            await self.search_channel.close(None)
        if self.llm is not None:
            await self.llm.close()


async def start_pipeline(
    config: Config, *, host: str | None = None, port: int | None = None
) -> PipelineApp:
    guard = server_guard(config, host or config.server.host)  # protected mode: first
    listen_port = config.server.ports.pipeline if port is None else port
    # first: a bad TLS setting stops the pipeline before it waits for anything
    public = listener(config, listen_port, host)
    # the store's internal listener: job queue and document store
    channel = service_channel(config, config.clients.store_internal_address)
    suite_id = await own_suite_id(
        channel, config.clients.suite_id, config.clients.store_internal_address
    )
    jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
    identities = worker_identities(
        jobs,
        instance_name(config, listen_port),
        ("embed", "extract", "document", "summarize", "dedup", "consolidate"),
    )
    provider = embedding_provider(config, background=config.workers.embed.priority == "background")
    llm = llm_provider(config)
    search_channel = service_channel(config, config.clients.search_address)
    near_duplicates = NearDuplicates(
        jobs,
        search_pb2_grpc.SearchServiceStub(search_channel),
        dedup_pb2_grpc.DedupServiceStub(channel),
        llm,
        provider,
        DedupPolicy.from_config(config),
        dedup_settings(config),
        identities["dedup"],
    )
    worker = EmbedWorker(
        jobs,
        provider,
        identities["embed"],
        batch_size=config.providers.embedding.batch_size,
        poll_s=config.workers.embed.poll_ms / 1000,
        long_poll_s=config.workers.embed.long_poll_ms / 1000,
        sentence_vectors=config.workers.embed.sentence_vectors,
    )
    extractor = Extractor(llm)
    decider = Decider(llm, search_pb2_grpc.SearchServiceStub(search_channel))
    extract_worker = ExtractWorker(
        jobs,
        extractor,
        decider,
        provider,
        ExtractPoolSettings.from_config(config),
        identities["extract"],
    )
    summarize_worker = SummarizeWorker(
        jobs, llm, summarize_settings(config), identities["summarize"]
    )
    consolidate_worker = ConsolidateWorker(
        jobs, llm, consolidate_settings(config), identities["consolidate"]
    )
    document_store = documents_pb2_grpc.DocumentStoreServiceStub(channel)
    document_worker = DocumentWorker.from_config(
        config, jobs, document_store, provider, identities["document"]
    )
    # Provider states come from real probes, not from "no failure yet"; the
    # in-process model is not waited for (nothing here needs it to answer).
    probe_every_s = config.providers.probe_interval_ms / 1000
    # An LLM no feature calls is "not configured", not degraded; a fallback
    # chain reports each of its providers, probed one by one.
    configured = llm_configured(config)
    embed_monitor = ProviderMonitor(worker.health, provider_probe(provider), probe_every_s)
    if isinstance(llm, LlmChain):
        llm_healths = llm.health
        chain_monitors = [
            ProviderMonitor(h, provider_probe(m), probe_every_s, configured=configured)
            for h, m in zip(llm.health, llm.members, strict=True)
        ]
    else:
        llm_healths = [extract_worker.health]
        chain_monitors = [
            ProviderMonitor(
                extract_worker.health, provider_probe(llm), probe_every_s, configured=configured
            )
        ]
    llm_monitor = chain_monitors[0]
    first = chain_monitors + ([] if provider.kind == "local" else [embed_monitor])
    await asyncio.gather(*(monitor.check() for monitor in first))
    servicer = PipelineServicer(
        jobs,
        [worker.health, *llm_healths],
        [
            worker.status,
            extract_worker.status,
            document_worker.status,
            summarize_worker.status,
            consolidate_worker.status,
        ]
        + ([near_duplicates.status] if config.dedup.enabled else []),
        # a chain records each call's outcome on its own providers
        extraction=Extractor(llm if isinstance(llm, LlmChain) else MonitoredLlm(llm, llm_monitor)),
        documents=Documents(document_store, document_worker.events, document_worker.wake),
        pii=PiiGate(config.pii),
        llm_configured=llm_configured(config),
    )
    server = await start_server(
        public,
        [SERVICE_NAME],
        lambda s: pipeline_pb2_grpc.add_PipelineServiceServicer_to_server(servicer, s),
        guard=guard,
    )
    background = [asyncio.create_task(worker.run()), asyncio.create_task(extract_worker.run())]
    background.append(asyncio.create_task(document_worker.run()))
    background.append(asyncio.create_task(near_duplicates.run()))  # stops at once when off
    background.append(asyncio.create_task(summarize_worker.run()))
    background.append(asyncio.create_task(consolidate_worker.run()))
    background += [asyncio.create_task(m.run()) for m in (embed_monitor, *chain_monitors)]
    learning = await announce_own_suite(server.health, channel, suite_id)
    if learning is not None:
        background.append(learning)
    log.info("pipeline serving", extra={"port": server.port, "embedding": provider.kind})
    return PipelineApp(
        server, channel, provider, worker, background, llm=llm, search_channel=search_channel
    )
