"""Assemble and run the maintenance service: store and pipeline clients, the
worker, its schedules, gRPC server. It never opens the database."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import grpc

from engram.maintenance.v1 import maintenance_pb2, maintenance_pb2_grpc
from engram.pipeline.v1 import pipeline_pb2_grpc
from engram.store.internal.v1 import admin_pb2_grpc
from services.common.auth import server_guard
from services.common.channels import channel as service_channel
from services.common.config import Config
from services.common.listeners import listener
from services.common.server import RunningServer, cancel_tasks, start_server
from services.common.suite import announce_own_suite, own_suite_id
from services.maintenance.clients import PipelineStatusClient, StoreAdminClient
from services.maintenance.limits import RateLimiter
from services.maintenance.servicer import MaintenanceServicer
from services.maintenance.worker import (
    MaintenanceWorker,
    rate_policies,
    run_every,
    schedule_enabled,
)

log = logging.getLogger("engram.maintenance")

SERVICE_NAME = maintenance_pb2.DESCRIPTOR.services_by_name["MaintenanceService"].full_name


@dataclass
class MaintenanceApp:
    server: RunningServer
    channels: list[grpc.aio.Channel]
    worker: MaintenanceWorker
    background: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_seconds: float) -> None:
        await self.server.stop(grace_seconds)
        await cancel_tasks(self.background)
        for channel in self.channels:
            await channel.close(None)


def schedules(config: Config, worker: MaintenanceWorker) -> list[asyncio.Task[Any]]:
    """The retention sweep every `retention.interval_ms`, always (seeds 000, 002:
    it runs on its own, so tombstones and history never grow without bound), and
    the maintenance cycle every `maintenanceIntervalMs` when autonomous
    maintenance is enabled and not frozen. Each runs once at start: a service
    restarted more often than its interval still does the work."""
    tasks = [
        asyncio.create_task(
            run_every(config.retention.interval_ms / 1000, worker.retention, "retention")
        )
    ]
    if schedule_enabled(config):
        tasks.append(
            asyncio.create_task(
                run_every(
                    config.memory.pipelineV2.maintenanceIntervalMs / 1000, worker.cycle, "cycle"
                )
            )
        )
    return tasks


async def start_maintenance(
    config: Config, *, host: str | None = None, port: int | None = None
) -> MaintenanceApp:
    guard = server_guard(config, host or config.server.host)  # protected mode: first
    # first: a bad TLS setting stops maintenance before it waits for anything
    public = listener(config, config.server.ports.maintenance if port is None else port, host)
    # the store's internal listener: StoreAdminService
    store_channel = service_channel(config, config.clients.store_internal_address)
    pipeline_channel = service_channel(config, config.clients.pipeline_address)
    suite_id = await own_suite_id(
        store_channel, config.clients.suite_id, config.clients.store_internal_address
    )
    worker = MaintenanceWorker(
        StoreAdminClient(admin_pb2_grpc.StoreAdminServiceStub(store_channel)),
        PipelineStatusClient(pipeline_pb2_grpc.PipelineServiceStub(pipeline_channel)),
        limiter=RateLimiter(rate_policies(config)),
        configured_mode=config.memory.pipelineV2.maintenanceMode,
    )
    servicer = MaintenanceServicer(worker)
    server = await start_server(
        public,
        [SERVICE_NAME],
        lambda s: maintenance_pb2_grpc.add_MaintenanceServiceServicer_to_server(servicer, s),
        guard=guard,
    )
    background = schedules(config, worker)
    learning = await announce_own_suite(server.health, store_channel, suite_id)
    if learning is not None:
        background.append(learning)
    log.info(
        "maintenance serving",
        extra={"port": server.port, "autonomous": schedule_enabled(config)},
    )
    return MaintenanceApp(server, [store_channel, pipeline_channel], worker, background)
