"""StoreAdminService: translate proto <-> domain, nothing else."""

from __future__ import annotations

from dataclasses import asdict

import grpc

from engram.store.internal.v1 import admin_pb2 as pb
from engram.store.internal.v1 import admin_pb2_grpc
from services.common.convert import timestamp_from_text
from services.common.validation import validate_namespace
from services.storage.store.job_enums import job_counts
from services.store.admin import StoreAdmin


class StoreAdminServicer(admin_pb2_grpc.StoreAdminServiceServicer):
    def __init__(self, admin: StoreAdmin) -> None:
        self._admin = admin

    async def GetStoreDiagnostics(
        self, request: pb.GetStoreDiagnosticsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStoreDiagnosticsResponse:
        d = await self._admin.diagnostics()
        return pb.GetStoreDiagnosticsResponse(
            jobs=job_counts(d.jobs),
            total_jobs=d.total_jobs,
            dead_jobs=d.dead_jobs,
            leased_jobs=d.leased_jobs,
            stale_leases=d.stale_leases,
            lease_timeout_ms=d.lease_timeout_ms,
            active_memories=d.active_memories,
            tombstones=d.tombstones,
            expired_tombstones=d.expired_tombstones,
            total_memories=d.total_memories,
            fts_rows=d.fts_rows,
            fts_missing=d.fts_missing,
            fts_orphaned=d.fts_orphaned,
            index_model=d.index_model,
            vector_rows=d.vector_rows,
            embedded_memories=d.embedded_memories,
            vector_missing=d.vector_missing,
            vector_orphaned=d.vector_orphaned,
            db_size_bytes=d.db_size_bytes,
            audit_rows=d.audit_rows,
            storage_full_count=d.storage_full_count,
            last_storage_full_time=timestamp_from_text(d.last_storage_full_at),
            data_dir_free_bytes=d.data_dir_free_bytes,
            orphans=pb.OrphanCounts(**asdict(d.orphans)),
            weak_memories=d.weak_memories,
        )

    async def RequeueDeadJobs(
        self, request: pb.RequeueDeadJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.RequeueDeadJobsResponse:
        requeued, skipped = await self._admin.requeue_dead_jobs()
        return pb.RequeueDeadJobsResponse(requeued=requeued, skipped=skipped)

    async def RepairStaleLeases(
        self, request: pb.RepairStaleLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepairStaleLeasesResponse:
        return pb.RepairStaleLeasesResponse(released=await self._admin.release_stale_leases())

    async def RepairFtsIndex(
        self, request: pb.RepairFtsIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepairFtsIndexResponse:
        missing, orphaned, rows = await self._admin.repair_fts()
        return pb.RepairFtsIndexResponse(
            missing_before=missing, orphaned_before=orphaned, fts_rows=rows
        )

    async def RepairVectorIndex(
        self, request: pb.RepairVectorIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepairVectorIndexResponse:
        removed, added = await self._admin.repair_vectors()
        return pb.RepairVectorIndexResponse(removed=removed, added=added)

    async def SweepRetention(
        self, request: pb.SweepRetentionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SweepRetentionResponse:
        steps = await self._admin.sweep_retention()
        return pb.SweepRetentionResponse(
            steps=[
                pb.RetentionStepResult(
                    step=s.step,
                    removed=s.removed,
                    entities_removed=s.entities_removed,
                    relations_removed=s.relations_removed,
                )
                for s in steps
            ]
        )

    async def BackfillExtraction(
        self, request: pb.BackfillExtractionRequest, context: grpc.aio.ServicerContext
    ) -> pb.BackfillExtractionResponse:
        # the parse step: "" (every namespace) or one valid name
        namespace = request.namespace and validate_namespace(request.namespace)
        queued, remaining = await self._admin.backfill_extraction(namespace)
        return pb.BackfillExtractionResponse(queued=queued, remaining=remaining)
