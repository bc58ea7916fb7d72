"""JobQueueService: translate proto <-> domain, nothing else."""

from __future__ import annotations

import grpc

from engram.store.v1 import job_queue_pb2 as pb
from engram.store.v1 import job_queue_pb2_grpc
from services.common.convert import timestamp_from_text
from services.common.validation import validate_namespace
from services.store.jobs import EmbedResult, JobQueue

_TYPE_NAMES = {
    pb.JOB_TYPE_EMBED: "embed",
    pb.JOB_TYPE_EXTRACT: "extract",
    pb.JOB_TYPE_DOCUMENT_INGEST: "document_ingest",
}
_TYPE_VALUES = {name: value for value, name in _TYPE_NAMES.items()}
_STATUS_VALUES = {
    "pending": pb.JOB_STATUS_PENDING,
    "leased": pb.JOB_STATUS_LEASED,
    "completed": pb.JOB_STATUS_COMPLETED,
    "dead": pb.JOB_STATUS_DEAD,
}


def _outcomes(held: list[bool]) -> list[pb.LeaseOutcome.ValueType]:
    return [pb.LEASE_OUTCOME_OK if ok else pb.LEASE_OUTCOME_LEASE_LOST for ok in held]


class JobQueueServicer(job_queue_pb2_grpc.JobQueueServiceServicer):
    def __init__(self, queue: JobQueue) -> None:
        self._queue = queue

    async def LeaseJobs(
        self, request: pb.LeaseJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.LeaseJobsResponse:
        namespaces = [
            validate_namespace(n, f"namespaces[{i}]") for i, n in enumerate(request.namespaces)
        ]
        jobs = await self._queue.lease(
            _TYPE_NAMES.get(request.job_type, ""), request.max_jobs, namespaces
        )
        return pb.LeaseJobsResponse(
            jobs=[
                pb.Job(
                    id=j.id,
                    job_type=_TYPE_VALUES[j.job_type],
                    namespace=j.namespace,
                    memory_id=j.memory_id,
                    lease_token=j.lease_token,
                    attempts=j.attempts,
                    max_attempts=j.max_attempts,
                    content=j.content,
                    content_hash=j.content_hash,
                    document_id=j.document_id,
                )
                for j in jobs
            ]
        )

    async def RenewLeases(
        self, request: pb.RenewLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.RenewLeasesResponse:
        held = await self._queue.renew([(x.job_id, x.lease_token) for x in request.leases])
        return pb.RenewLeasesResponse(outcomes=_outcomes(held))

    async def CompleteEmbedJobs(
        self, request: pb.CompleteEmbedJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteEmbedJobsResponse:
        held = await self._queue.complete_embeds(
            request.model,
            [
                EmbedResult(r.lease.job_id, r.lease.lease_token, r.content_hash, list(r.vector))
                for r in request.results
            ],
        )
        return pb.CompleteEmbedJobsResponse(outcomes=_outcomes(held))

    async def FailJobs(
        self, request: pb.FailJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.FailJobsResponse:
        held, dead = await self._queue.fail(
            [(f.lease.job_id, f.lease.lease_token, f.error) for f in request.failures]
        )
        return pb.FailJobsResponse(outcomes=_outcomes(held), dead_count=dead)

    async def ReleaseJobs(
        self, request: pb.ReleaseJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseJobsResponse:
        held = await self._queue.release([(x.job_id, x.lease_token) for x in request.leases])
        return pb.ReleaseJobsResponse(outcomes=_outcomes(held))

    async def ReleaseStaleLeases(
        self, request: pb.ReleaseStaleLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseStaleLeasesResponse:
        released = await self._queue.release_stale(request.lease_timeout_ms)
        return pb.ReleaseStaleLeasesResponse(released_count=released)

    async def GetQueueStats(
        self, request: pb.GetQueueStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQueueStatsResponse:
        stats = await self._queue.stats()
        return pb.GetQueueStatsResponse(
            counts=[
                pb.QueueCount(
                    job_type=_TYPE_VALUES.get(job_type, pb.JOB_TYPE_UNSPECIFIED),
                    status=_STATUS_VALUES.get(status, pb.JOB_STATUS_UNSPECIFIED),
                    count=count,
                )
                for (job_type, status), count in sorted(stats.counts.items())
            ],
            oldest_pending_create_time=timestamp_from_text(stats.oldest_pending),
            index_model=stats.index_model,
            index_dimensions=stats.index_dimensions,
            indexed_memory_count=stats.indexed_memories,
            live_memory_count=stats.live_memories,
        )
