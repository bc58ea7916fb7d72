"""JobQueueService: parse the request (services/store/job_requests.py), call the
queue, the extraction writes, the sessions or the consolidation, translate the
answer."""

from __future__ import annotations

import grpc

from engram.store.internal.v1 import job_queue_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import tracing
from services.common.convert import timestamp_from_text
from services.storage.store.job_enums import TYPE_VALUES, job_counts
from services.store import job_requests
from services.store.consolidation import Consolidation
from services.store.extraction_writes import ExtractionWrites
from services.store.jobs import JobQueue
from services.store.sessions import Sessions

_OUTCOME_VALUES = {
    "created": pb.PROPOSAL_OUTCOME_CREATED,
    "deduped": pb.PROPOSAL_OUTCOME_DEDUPED,
    "skipped": pb.PROPOSAL_OUTCOME_SKIPPED,
    "recorded": pb.PROPOSAL_OUTCOME_RECORDED,
    "blocked": pb.PROPOSAL_OUTCOME_BLOCKED,
    "updated": pb.PROPOSAL_OUTCOME_UPDATED,
    "deleted": pb.PROPOSAL_OUTCOME_DELETED,
    "shadowed": pb.PROPOSAL_OUTCOME_SHADOWED,
}


def _outcomes(held: list[bool]) -> list[pb.LeaseOutcome.ValueType]:
    return [pb.LEASE_OUTCOME_OK if ok else pb.LEASE_OUTCOME_LEASE_LOST for ok in held]


class JobQueueServicer(job_queue_pb2_grpc.JobQueueServiceServicer):
    def __init__(
        self,
        queue: JobQueue,
        extraction: ExtractionWrites,
        sessions: Sessions,
        consolidation: Consolidation,
    ) -> None:
        self._queue = queue
        self._extraction = extraction
        self._sessions = sessions
        self._consolidation = consolidation

    async def LeaseJobs(
        self, request: pb.LeaseJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.LeaseJobsResponse:
        asked = job_requests.lease(request)
        jobs = await self._queue.lease(
            asked.job_type, asked.max_jobs, asked.namespaces, asked.holder, wait_s=asked.wait_s
        )
        links = tracing.lease_metadata([j.memory_id for j in jobs if j.memory_id])
        if links:
            await context.send_initial_metadata(links)
        return pb.LeaseJobsResponse(
            jobs=[
                pb.Job(
                    id=j.id,
                    job_type=TYPE_VALUES[j.job_type],
                    namespace=j.namespace,
                    memory_id=j.memory_id,
                    lease_token=j.lease_token,
                    attempts=j.attempts,
                    max_attempts=j.max_attempts,
                    content=j.content,
                    content_hash=j.content_hash,
                    document_id=j.document_id,
                    session_id=j.session_id,
                )
                for j in jobs
            ]
        )

    async def RenewLeases(
        self, request: pb.RenewLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.RenewLeasesResponse:
        held = await self._queue.renew(job_requests.leases(request))
        return pb.RenewLeasesResponse(outcomes=_outcomes(held))

    async def CompleteEmbedJobs(
        self, request: pb.CompleteEmbedJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteEmbedJobsResponse:
        held = await self._queue.complete_embeds(job_requests.complete_embeds(request))
        return pb.CompleteEmbedJobsResponse(outcomes=_outcomes(held))

    async def CompleteExtractJob(
        self, request: pb.CompleteExtractJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteExtractJobResponse:
        outcome = await self._extraction.complete(job_requests.complete_extract(request))
        return pb.CompleteExtractJobResponse(
            outcome=_outcomes([outcome.lease_held])[0],
            results=[
                pb.ProposalResult(
                    outcome=_OUTCOME_VALUES[r.outcome],
                    memory_id=r.memory_id,
                    reason=r.reason,
                    review_needed=r.review_needed,
                )
                for r in outcome.results
            ],
            graph_error=outcome.graph_error,
        )

    async def CompleteSummarizeJob(
        self, request: pb.CompleteSummarizeJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteSummarizeJobResponse:
        done = job_requests.complete_summary(request)
        outcome = await self._sessions.complete_summary_job(
            done.job_id, done.lease_token, done.summary, done.model
        )
        return pb.CompleteSummarizeJobResponse(
            outcome=_outcomes([outcome.held])[0],
            memory_id=outcome.memory_id,
            superseded_by=outcome.superseded_by,
            privacy_blocked=outcome.privacy_blocked,
        )

    async def CompleteConsolidateJob(
        self, request: pb.CompleteConsolidateJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteConsolidateJobResponse:
        outcome = await self._consolidation.complete(job_requests.complete_consolidate(request))
        return pb.CompleteConsolidateJobResponse(
            outcome=_outcomes([outcome.held])[0],
            memory_ids=outcome.memory_ids,
            skipped_facts=outcome.skipped,
            causal_links=outcome.causal_links,
            privacy_blocked=outcome.privacy_blocked,
        )

    async def FailJobs(
        self, request: pb.FailJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.FailJobsResponse:
        held, dead = await self._queue.fail(job_requests.fail(request))
        return pb.FailJobsResponse(outcomes=_outcomes(held), dead_count=dead)

    async def ReleaseJobs(
        self, request: pb.ReleaseJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseJobsResponse:
        held = await self._queue.release(job_requests.leases(request))
        return pb.ReleaseJobsResponse(outcomes=_outcomes(held))

    async def ReleaseStaleLeases(
        self, request: pb.ReleaseStaleLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseStaleLeasesResponse:
        ended = await self._queue.release_stale(job_requests.stale_timeout_ms(request))
        return pb.ReleaseStaleLeasesResponse(released_count=ended.released, dead_count=ended.dead)

    async def ReleasePriorInstanceLeases(
        self, request: pb.ReleasePriorInstanceLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleasePriorInstanceLeasesResponse:
        ended = await self._queue.release_prior_instances(job_requests.prior_instance(request))
        return pb.ReleasePriorInstanceLeasesResponse(
            released_count=ended.released, dead_count=ended.dead
        )

    async def GetQueueStats(
        self, request: pb.GetQueueStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetQueueStatsResponse:
        stats = await self._queue.stats()
        return pb.GetQueueStatsResponse(
            counts=job_counts(stats.counts),
            oldest_pending_create_time=timestamp_from_text(stats.oldest_pending),
            index_model=stats.index_model,
            index_dimensions=stats.index_dimensions,
            indexed_memory_count=stats.indexed_memories,
            live_memory_count=stats.live_memories,
        )
