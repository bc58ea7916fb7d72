"""MaintenanceService: translate proto <-> domain, nothing else."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

import grpc
from google.protobuf import timestamp_pb2

from engram.maintenance.v1 import maintenance_pb2 as pb
from engram.maintenance.v1 import maintenance_pb2_grpc
from services.common import provider_state
from services.common.errors import InvalidArgument
from services.maintenance import diagnostics as dx
from services.maintenance import worker as mw

_HEALTH = {
    "healthy": pb.HEALTH_CLASS_HEALTHY,
    "degraded": pb.HEALTH_CLASS_DEGRADED,
    "unhealthy": pb.HEALTH_CLASS_UNHEALTHY,
}
_ACTIONS = {
    dx.REQUEUE_DEAD_JOBS: pb.MAINTENANCE_ACTION_REQUEUE_DEAD_JOBS,
    dx.RELEASE_STALE_LEASES: pb.MAINTENANCE_ACTION_RELEASE_STALE_LEASES,
    dx.REPAIR_FTS: pb.MAINTENANCE_ACTION_REPAIR_FTS,
    dx.REPAIR_VECTORS: pb.MAINTENANCE_ACTION_REPAIR_VECTORS,
    dx.RETENTION_SWEEP: pb.MAINTENANCE_ACTION_RETENTION_SWEEP,
}
_STATUSES = {
    mw.EXECUTED: pb.ACTION_STATUS_EXECUTED,
    mw.COOLDOWN: pb.ACTION_STATUS_COOLDOWN,
    mw.BUDGET: pb.ACTION_STATUS_BUDGET_EXHAUSTED,
    mw.HALTED: pb.ACTION_STATUS_HALTED,
    mw.FAILED: pb.ACTION_STATUS_FAILED,
}
_MODES = {"observe": pb.MAINTENANCE_MODE_OBSERVE, "execute": pb.MAINTENANCE_MODE_EXECUTE}
_MODE_NAMES = {value: name for name, value in _MODES.items()}


def _timestamp(moment: datetime | None) -> timestamp_pb2.Timestamp | None:
    if moment is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _recommendations(report: dx.Report) -> list[pb.Recommendation]:
    return [
        pb.Recommendation(action=_ACTIONS[r.action], reason=r.reason)
        for r in report.recommendations
    ]


def report_to_proto(report: dx.Report) -> pb.GetDiagnosticsResponse:
    c = report.counts
    return pb.GetDiagnosticsResponse(
        score=report.score,
        health=_HEALTH[report.health],
        components=[
            pb.ScoreComponent(name=name, score=value, weight=dx.WEIGHTS[name])
            for name, value in report.components.items()
        ],
        queue=pb.QueueHealth(
            total_jobs=c.total_jobs,
            dead_jobs=c.dead_jobs,
            dead_rate=report.dead_rate,
            leased_jobs=c.leased_jobs,
            stale_leases=c.stale_leases,
        ),
        index=pb.IndexHealth(
            active_memories=c.active_memories,
            fts_rows=c.fts_rows,
            fts_missing=c.fts_missing,
            fts_orphaned=c.fts_orphaned,
            index_model=c.index_model,
            vector_rows=c.vector_rows,
            embedded_memories=c.embedded_memories,
            vector_missing=c.vector_missing,
            vector_orphaned=c.vector_orphaned,
        ),
        storage=pb.StorageHealth(
            total_memories=c.total_memories,
            tombstones=c.tombstones,
            tombstone_ratio=report.tombstone_ratio,
            expired_tombstones=c.expired_tombstones,
            db_size_bytes=c.db_size_bytes,
            storage_full_count=c.storage_full_count,
            last_storage_full_time=_timestamp(c.last_storage_full_time),
            data_dir_free_bytes=c.data_dir_free_bytes,
            orphans=pb.OrphanCounts(**asdict(c.orphans)),
            weak_memories=c.weak_memories,
        ),
        providers=pb.ProvidersHealth(
            pipeline_reachable=report.providers.reachable,
            error=report.providers.error,
            providers=[
                pb.ProviderHealth(
                    role=p.role,
                    kind=p.kind,
                    model=p.model,
                    state=provider_state.to_proto(p.state),
                    last_error=p.last_error,
                    chain_position=p.position,
                )
                for p in report.providers.providers
            ],
        ),
        recommendations=_recommendations(report),
    )


def _mode(value: pb.MaintenanceMode.ValueType) -> str | None:
    """The parse step of RunMaintenance: a mode it names, or None for the
    configured one (MAINTENANCE_MODE_UNSPECIFIED)."""
    if value == pb.MAINTENANCE_MODE_UNSPECIFIED:
        return None
    if value not in _MODE_NAMES:
        raise InvalidArgument(
            "mode", "must be MAINTENANCE_MODE_OBSERVE or MAINTENANCE_MODE_EXECUTE"
        )
    return _MODE_NAMES[value]


class MaintenanceServicer(maintenance_pb2_grpc.MaintenanceServiceServicer):
    def __init__(self, worker: mw.MaintenanceWorker) -> None:
        self._worker = worker

    async def GetDiagnostics(
        self, request: pb.GetDiagnosticsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDiagnosticsResponse:
        return report_to_proto(await self._worker.diagnose())

    async def RunMaintenance(
        self, request: pb.RunMaintenanceRequest, context: grpc.aio.ServicerContext
    ) -> pb.RunMaintenanceResponse:
        result = await self._worker.cycle(_mode(request.mode))
        return pb.RunMaintenanceResponse(
            mode=_MODES[result.mode],
            score_before=result.before.score,
            health_before=_HEALTH[result.before.health],
            recommendations=_recommendations(result.before),
            actions=[
                pb.ActionResult(
                    action=_ACTIONS[a.action],
                    status=_STATUSES[a.status],
                    changed=a.changed,
                    score_before=a.score_before,
                    score_after=a.score_after,
                    non_improving_runs=a.non_improving_runs,
                    detail=a.detail,
                )
                for a in result.actions
            ],
            score_after=result.after.score,
            health_after=_HEALTH[result.after.health],
            health_delta=result.health_delta,
        )

    async def RunRetention(
        self, request: pb.RunRetentionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RunRetentionResponse:
        steps = await self._worker.retention()
        return pb.RunRetentionResponse(
            steps=[
                pb.RetentionStep(
                    step=s.step,
                    removed=s.removed,
                    entities_removed=s.entities_removed,
                    relations_removed=s.relations_removed,
                )
                for s in steps
            ]
        )
