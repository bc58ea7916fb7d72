"""Assemble and run the store: database, writer, read pool, gRPC server."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.config import Config
from services.common.db import ReadPool, open_read_write
from services.common.server import RunningServer, start_server
from services.store.memories import MemoryStore
from services.store.migrations import apply_migrations
from services.store.servicer import MemoryStoreServicer
from services.store.writer import Writer

log = logging.getLogger("engram.store")

SERVICE_NAME = store_pb2.DESCRIPTOR.services_by_name["MemoryStoreService"].full_name


@dataclass
class StoreApp:
    server: RunningServer
    writer: Writer
    reads: ReadPool

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_seconds: float) -> None:
        """Stop taking calls, let in-flight ones finish, then flush and close the writer."""
        await self.server.stop(grace_seconds)
        await self.reads.close()
        self.writer.close()


async def start_store(
    config: Config, *, host: str | None = None, port: int | None = None
) -> StoreApp:
    path = config["storage.path"]
    connection = open_read_write(
        path,
        synchronous=config["storage.synchronous"],
        busy_timeout_ms=config["storage.busy_timeout_ms"],
    )
    applied = apply_migrations(connection)
    if applied:
        log.info("migrations applied", extra={"migrations": applied, "path": str(path)})
    writer = Writer(connection, max_group=config["storage.max_group_commit"])
    reads = ReadPool(path, busy_timeout_ms=config["storage.busy_timeout_ms"])
    await reads.open()
    store = MemoryStore(
        writer,
        reads,
        mutations_frozen=config["memory.pipelineV2.mutationsFrozen"],
        max_job_attempts=config["memory.pipelineV2.workerMaxRetries"],
        tombstone_days=config["retention.tombstone_days"],
    )
    try:
        server = await start_server(
            host or config["server.host"],
            config["server.ports.store"] if port is None else port,
            [SERVICE_NAME],
            lambda s: store_pb2_grpc.add_MemoryStoreServiceServicer_to_server(
                MemoryStoreServicer(store), s
            ),
        )
    except BaseException:
        await reads.close()
        writer.close()
        raise
    log.info("store serving", extra={"port": server.port, "path": str(path)})
    return StoreApp(server, writer, reads)
