"""Assemble and run the store: database, writer, read pool, reaper, gRPC server.

The database is a SQLite file or a PostgreSQL database (`storage.kind`); the
writer, the read pool and everything above them take either (the repository's
SQL runs on both through services/storage/pg.py's SqliteApi)."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field

import grpc

from engram.store.internal.v1 import (
    access_pb2,
    access_pb2_grpc,
    admin_pb2,
    admin_pb2_grpc,
    dedup_pb2,
    dedup_pb2_grpc,
    documents_pb2,
    documents_pb2_grpc,
    job_queue_pb2,
    job_queue_pb2_grpc,
)
from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.auth import server_guard
from services.common.config import (
    Config,
    consolidation_enabled,
    consolidation_off_reason,
    embedding_identity,
    graph_off_reason,
    llm_configured,
)
from services.common.errors import MutationsFrozen
from services.common.fetch_policy import FetchPolicy
from services.common.listeners import listener
from services.common.llm_gate import LlmGate
from services.common.metrics import queue_depth_source
from services.common.pii import PiiGate
from services.common.server import (
    RunningServer,
    ServerGroup,
    cancel_tasks,
    start_server,
)
from services.common.startup import StartupError
from services.common.suite import announce_suite
from services.storage.db import Backend, ReadPool, StorageUnavailable, backend_for
from services.storage.store.suite_sql import read_suite_id
from services.store.access_servicer import AccessServicer
from services.store.admin import store_admin
from services.store.admin_servicer import StoreAdminServicer
from services.store.consolidation import Consolidation
from services.store.dedup import DedupStore
from services.store.dedup_servicer import DedupServicer
from services.store.document_requests import DocumentLimits
from services.store.document_servicer import DocumentStoreServicer
from services.store.documents import DocumentStore
from services.store.extraction_writes import ExtractionWrites, write_policy
from services.store.job_servicer import JobQueueServicer
from services.store.jobs import JobQueue
from services.store.memories import MemoryStore
from services.store.namespaces import Namespaces
from services.store.privacy import PrivacyPolicy
from services.store.servicer import MemoryStoreServicer
from services.store.sessions import Sessions
from services.store.suite_servicer import SuiteServicer
from services.store.weak import DecayPolicy, WeakMemories
from services.store.writer import Writer

log = logging.getLogger("engram.store")

# The public listener: what users call.
SUITE_SERVICE_NAME = store_pb2.DESCRIPTOR.services_by_name["SuiteService"].full_name
SERVICE_NAMES = (
    store_pb2.DESCRIPTOR.services_by_name["MemoryStoreService"].full_name,
    SUITE_SERVICE_NAME,
)
# The internal listener: what the other services call (workers, admin, access).
INTERNAL_SERVICE_NAMES = (
    job_queue_pb2.DESCRIPTOR.services_by_name["JobQueueService"].full_name,
    documents_pb2.DESCRIPTOR.services_by_name["DocumentStoreService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["StoreAdminService"].full_name,
    access_pb2.DESCRIPTOR.services_by_name["AccessService"].full_name,
    dedup_pb2.DESCRIPTOR.services_by_name["DedupService"].full_name,
    SUITE_SERVICE_NAME,  # the others learn their suite's id here (services/common/suite.py)
)
REAPER_INTERVAL_S = 60.0


def configured_index_model(config: Config) -> str | None:
    """The embedding model whose vectors the index holds; None when embeddings are off."""
    embedding = config.providers.embedding
    if embedding.kind == "none":
        return None
    return embedding_identity(embedding.model, embedding.dimensions)


@dataclass
class StoreApp:
    server: ServerGroup  # public first, then internal
    writer: Writer
    reads: ReadPool
    queue: JobQueue
    background: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def internal_port(self) -> int:
        return self.server.servers[1].port

    async def stop(self, grace_seconds: float) -> None:
        """Stop taking calls, let in-flight ones finish, then flush and close the writer."""
        queue_depth_source.set_source(None)
        await cancel_tasks(self.background)
        self.queue.stop_waiting()  # long-polling leases answer now, not at their deadline
        await self.server.stop(grace_seconds)
        await self.reads.close()
        self.writer.close()


async def _reap_stale_leases(queue: JobQueue, interval_s: float) -> None:
    """Seed 000: every 60 s, leases older than leaseTimeoutMs end (back to
    pending, or dead when that was the job's last attempt)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            ended = await queue.release_stale()
            if ended.released:
                log.info(
                    "stale leases released",
                    extra={"released": ended.released, "dead": ended.dead},
                )
        except Exception:
            log.exception("stale-lease reaper failed")


async def _end_idle_sessions(consolidation: Consolidation, config: Config) -> None:
    """Issue 17: every `sessions.consolidate_check_interval_ms`, sessions idle for
    `sessions.consolidate_after_idle_ms` end and get their consolidate_session job."""
    settings = config.sessions
    while True:
        await asyncio.sleep(settings.consolidate_check_interval_ms / 1000)
        try:
            ended = await consolidation.end_idle(settings.consolidate_after_idle_ms)
            if ended:
                log.info("idle sessions ended for consolidation", extra={"sessions": ended})
        except MutationsFrozen:
            pass  # a frozen store ends them once it thaws
        except Exception:
            log.exception("idle-session check failed")


def _queue_counts_now(backend: Backend) -> dict[tuple[str, str], int]:
    """Jobs by (type, status), read on a connection of its own: for the metrics
    scrape, which runs on the HTTP server's thread, not on the event loop."""
    from services.storage.store import repository as repo

    conn = backend.connect_read_only(application_name="engram-store-metrics")
    try:
        return repo.queue_counts(conn)
    finally:
        conn.close()


async def start_store(
    config: Config,
    *,
    host: str | None = None,
    port: int | None = None,
    internal_port: int | None = None,
) -> StoreApp:
    """`host` binds both listeners (tests); `port`/`internal_port` override the
    configured `server.ports.store`/`store_internal` (0: any free port)."""
    # first: a bad TLS setting (services/common/tls.py) stops the store before it opens anything
    public = listener(config, config.server.ports.store if port is None else port, host)
    internal = listener(
        config,
        config.server.ports.store_internal if internal_port is None else internal_port,
        host,
        internal=True,
    )
    # protected mode first, before the database is opened
    public_guard = server_guard(config, public.host)
    internal_guard = server_guard(config, internal.host, internal=True)
    backend = backend_for(config.storage, log)
    database = backend.describe()
    connection, applied = backend.open_writer()
    if applied:
        log.info("migrations applied", extra={"migrations": applied, "path": database})
    suite_id = read_suite_id(connection)
    writer = Writer(
        connection,
        max_group=config.storage.max_group_commit,
        mutations_frozen=config.memory.pipelineV2.mutationsFrozen,
        reconnect=backend.writer_reconnect(),
        wal_restart_mb=backend.wal_restart_mb,
    )
    try:
        reads = await backend.open_read_pool("store")
    except StorageUnavailable as exc:  # the database went away since the writer connected
        writer.close()
        raise StartupError(f"cannot open read connections to {database}: {exc}") from exc
    except BaseException:
        writer.close()
        raise
    max_attempts = config.memory.pipelineV2.workerMaxRetries
    store = MemoryStore(
        writer,
        reads,
        max_job_attempts=max_attempts,
        tombstone_days=config.retention.tombstone_days,
        extract_on_create=config.memory.pipelineV2.enabled,
        privacy=PrivacyPolicy(config.sessions.privacy),
        pii=PiiGate(config.pii),
        consolidate_sessions=consolidation_enabled(config),
    )
    sessions = Sessions(
        writer,
        store,
        turn_ttl_ms=config.sessions.turn_ttl_ms,
        summary_ttl_ms=config.sessions.summary_ttl_ms,
        max_job_attempts=max_attempts,
        llm_configured=llm_configured(config),
        records_only=write_policy(config).records_only,
    )
    consolidation = Consolidation(
        writer, reads, store, write_policy(config), off_reason=consolidation_off_reason(config)
    )
    queue = JobQueue(
        writer,
        reads,
        lease_timeout_ms=config.memory.pipelineV2.leaseTimeoutMs,
        max_job_attempts=max_attempts,
        near_duplicates=config.dedup.enabled,
    )
    documents = DocumentStore(
        writer,
        reads,
        max_job_attempts=max_attempts,
        pii=PiiGate(config.pii),
    )
    document_limits = DocumentLimits(
        max_content_bytes=config.memory.pipelineV2.documentMaxContentBytes,
        max_chunk_chars=config.memory.pipelineV2.documentChunkSize,
        fetch_policy=FetchPolicy.from_config(config),
    )
    try:
        queued = await queue.adopt_index_model(configured_index_model(config))
    except MutationsFrozen:
        log.warning("mutations are frozen: the vector index keeps its embedding model")
        queued = 0
    if queued:
        log.info("embedding model changed; re-embedding queued", extra={"jobs": queued})

    started: list[RunningServer] = []
    suite = SuiteServicer(suite_id, config, lambda: started[0].port)

    def register_public(server: grpc.aio.Server) -> None:
        store_pb2_grpc.add_SuiteServiceServicer_to_server(suite, server)
        store_pb2_grpc.add_MemoryStoreServiceServicer_to_server(
            MemoryStoreServicer(
                store,
                sessions,
                consolidation,
                WeakMemories(reads, DecayPolicy.from_config(config)),
                Namespaces(
                    writer,
                    reads,
                    tombstone_days=config.retention.tombstone_days,
                    max_job_attempts=max_attempts,
                ),
                graph_off_reason=graph_off_reason(config),
            ),
            server,
        )

    def register_internal(server: grpc.aio.Server) -> None:
        store_pb2_grpc.add_SuiteServiceServicer_to_server(suite, server)
        documents_pb2_grpc.add_DocumentStoreServiceServicer_to_server(
            DocumentStoreServicer(documents, document_limits), server
        )
        job_queue_pb2_grpc.add_JobQueueServiceServicer_to_server(
            JobQueueServicer(
                queue, ExtractionWrites(writer, write_policy(config)), sessions, consolidation
            ),
            server,
        )
        admin_pb2_grpc.add_StoreAdminServiceServicer_to_server(
            StoreAdminServicer(store_admin(writer, reads, config)), server
        )
        access_pb2_grpc.add_AccessServiceServicer_to_server(AccessServicer(store), server)
        dedup_pb2_grpc.add_DedupServiceServicer_to_server(
            DedupServicer(
                DedupStore(
                    writer,
                    max_job_attempts=max_attempts,
                    gate=LlmGate.from_settings(config.memory.pipelineV2),
                )
            ),
            server,
        )

    try:
        started.append(
            await start_server(public, SERVICE_NAMES, register_public, guard=public_guard)
        )
        started.append(
            await start_server(
                internal, INTERNAL_SERVICE_NAMES, register_internal, guard=internal_guard
            )
        )
    except BaseException:
        for running in started:
            await running.stop(0)
        await reads.close()
        writer.close()
        raise
    server = ServerGroup(tuple(started))
    for running in started:  # the other services check their suite on either listener
        await announce_suite(running.health, suite_id)
    background = [asyncio.create_task(_reap_stale_leases(queue, REAPER_INTERVAL_S))]
    if consolidation_enabled(config):
        background.append(asyncio.create_task(_end_idle_sessions(consolidation, config)))
    queue_depth_source.set_source(functools.partial(_queue_counts_now, backend))
    log.info(
        "store serving",
        extra={"port": server.port, "internal_port": server.servers[1].port, "path": database},
    )
    return StoreApp(server, writer, reads, queue, background)
