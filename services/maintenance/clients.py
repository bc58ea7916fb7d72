"""The maintenance service's view of the other services: the store's admin RPCs
and the pipeline's status, translated into domain values and domain errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from datetime import UTC
from typing import TypeVar

import grpc

from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc
from engram.store.internal.v1 import admin_pb2 as pb
from engram.store.internal.v1 import admin_pb2_grpc
from services.common import provider_state
from services.common.errors import EngramError, ErrorKind
from services.common.remote_errors import refusing
from services.maintenance.diagnostics import OrphanCounts, Provider, ProviderReport, StoreCounts

T = TypeVar("T")


@dataclass(frozen=True)
class SweptStep:
    """What one retention step removed, in the order the store ran it."""

    step: str
    removed: int
    entities_removed: int = 0
    relations_removed: int = 0


class StoreUnavailable(EngramError):
    kind = ErrorKind.UNAVAILABLE
    reason = "STORE_UNAVAILABLE"


class StoreAdminClient:
    """StoreAdminService calls; a refusal of the store (frozen, a full disk, ...)
    surfaces as its typed StoreRefusal (services/common/remote_errors.py, the
    store's own code and reason), any other failure to get an answer as
    StoreUnavailable."""

    def __init__(self, stub: admin_pb2_grpc.StoreAdminServiceAsyncStub) -> None:
        self._stub = stub

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await refusing(call())
        except grpc.aio.AioRpcError as exc:
            raise StoreUnavailable(
                f"store admin call failed: {exc.code().name}: {exc.details()}"
            ) from exc

    async def counts(self) -> StoreCounts:
        d = await self._call(
            lambda: self._stub.GetStoreDiagnostics(pb.GetStoreDiagnosticsRequest())
        )
        return StoreCounts(
            total_jobs=d.total_jobs,
            dead_jobs=d.dead_jobs,
            leased_jobs=d.leased_jobs,
            stale_leases=d.stale_leases,
            active_memories=d.active_memories,
            tombstones=d.tombstones,
            expired_tombstones=d.expired_tombstones,
            fts_rows=d.fts_rows,
            fts_missing=d.fts_missing,
            fts_orphaned=d.fts_orphaned,
            index_model=d.index_model,
            vector_rows=d.vector_rows,
            embedded_memories=d.embedded_memories,
            vector_missing=d.vector_missing,
            vector_orphaned=d.vector_orphaned,
            db_size_bytes=d.db_size_bytes,
            storage_full_count=d.storage_full_count,
            last_storage_full_time=(
                d.last_storage_full_time.ToDatetime(tzinfo=UTC)
                if d.HasField("last_storage_full_time")
                else None
            ),
            data_dir_free_bytes=d.data_dir_free_bytes,
            orphans=OrphanCounts(
                **{f.name: getattr(d.orphans, f.name) for f in fields(OrphanCounts)}
            ),
            weak_memories=d.weak_memories,
        )

    async def requeue_dead_jobs(self) -> int:
        r = await self._call(lambda: self._stub.RequeueDeadJobs(pb.RequeueDeadJobsRequest()))
        return r.requeued

    async def release_stale_leases(self) -> int:
        r = await self._call(lambda: self._stub.RepairStaleLeases(pb.RepairStaleLeasesRequest()))
        return r.released

    async def repair_fts(self) -> int:
        r = await self._call(lambda: self._stub.RepairFtsIndex(pb.RepairFtsIndexRequest()))
        return r.missing_before + r.orphaned_before

    async def repair_vectors(self) -> int:
        r = await self._call(lambda: self._stub.RepairVectorIndex(pb.RepairVectorIndexRequest()))
        return r.removed + r.added

    async def sweep_retention(self) -> list[SweptStep]:
        r = await self._call(lambda: self._stub.SweepRetention(pb.SweepRetentionRequest()))
        return [
            SweptStep(s.step, s.removed, s.entities_removed, s.relations_removed) for s in r.steps
        ]


class PipelineStatusClient:
    """Provider health from the pipeline's GetStatus; never raises: an
    unreachable pipeline is a finding, not a failure."""

    def __init__(self, stub: pipeline_pb2_grpc.PipelineServiceAsyncStub) -> None:
        self._stub = stub

    async def providers(self) -> ProviderReport:
        try:
            status = await self._stub.GetStatus(pipeline_pb2.GetStatusRequest())
        except grpc.aio.AioRpcError as exc:
            return ProviderReport(reachable=False, error=f"{exc.code().name}: {exc.details()}")
        return ProviderReport(
            reachable=True,
            providers=tuple(
                Provider(
                    role=p.role,
                    kind=p.kind,
                    model=p.model,
                    state=provider_state.from_proto(p.state),
                    last_error=p.last_error,
                    position=p.chain_position,
                )
                for p in status.providers
            ),
        )
