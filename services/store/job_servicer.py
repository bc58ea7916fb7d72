"""JobQueueService: translate proto <-> domain, nothing else."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from engram.store.internal.v1 import job_queue_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import tracing
from services.common.convert import temporal_from_proto, text_from_timestamp, timestamp_from_text
from services.common.errors import InvalidArgument
from services.common.facts import DEFAULT_ENTITY_TYPE, NamedEntity
from services.common.validation import validate_namespace
from services.storage.store.job_enums import TYPE_NAMES, TYPE_VALUES, job_counts
from services.store.consolidation import ConsolidateCompletion, Consolidation, SessionFact
from services.store.extraction_writes import (
    ExtractCompletion,
    ExtractionWrites,
    Fact,
    Proposal,
)
from services.store.graph import Triple
from services.store.jobs import EmbedResult, JobQueue, LeaseHolder
from services.store.sessions import Sessions

_ACTION_NAMES = {
    pb.PROPOSAL_ACTION_ADD: "add",
    pb.PROPOSAL_ACTION_UPDATE: "update",
    pb.PROPOSAL_ACTION_DELETE: "delete",
    pb.PROPOSAL_ACTION_NONE: "none",
}
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


def _holder(message: pb.LeaseHolder) -> LeaseHolder:
    return LeaseHolder(message.worker_name, message.instance_id)


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
        namespaces = [
            validate_namespace(n, f"namespaces[{i}]") for i, n in enumerate(request.namespaces)
        ]
        jobs = await self._queue.lease(
            TYPE_NAMES.get(request.job_type),
            request.max_jobs,
            namespaces,
            _holder(request.holder) if request.HasField("holder") else None,
            wait_s=_wait_seconds(request),
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
        held = await self._queue.renew([(x.job_id, x.lease_token) for x in request.leases])
        return pb.RenewLeasesResponse(outcomes=_outcomes(held))

    async def CompleteEmbedJobs(
        self, request: pb.CompleteEmbedJobsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteEmbedJobsResponse:
        held = await self._queue.complete_embeds(
            request.model,
            [
                EmbedResult(
                    r.lease.job_id,
                    r.lease.lease_token,
                    r.content_hash,
                    list(r.vector),
                    list(r.parts),
                )
                for r in request.results
            ],
        )
        return pb.CompleteEmbedJobsResponse(outcomes=_outcomes(held))

    async def CompleteExtractJob(
        self, request: pb.CompleteExtractJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteExtractJobResponse:
        outcome = await self._extraction.complete(
            ExtractCompletion(
                job_id=request.lease.job_id,
                lease_token=request.lease.lease_token,
                extraction_model=request.extraction_model,
                proposals=tuple(
                    Proposal(
                        action=_ACTION_NAMES.get(p.action, ""),
                        fact=fact_from_proto(p.fact),
                        target_id=p.target_id,
                        confidence=p.confidence,
                        reason=p.reason,
                        candidate_ids=tuple(p.candidate_ids),
                        vector=tuple(p.vector),
                    )
                    for p in request.proposals
                ),
                entities=tuple(
                    Triple(e.source, e.relationship, e.target, e.confidence)
                    for e in request.entities
                ),
                warnings=tuple(request.warnings),
                embedding_model=request.embedding_model,
                named=named_entities(request.named_entities),
            )
        )
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
        outcome = await self._sessions.complete_summary_job(
            request.lease.job_id, request.lease.lease_token, request.summary, request.model
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
        outcome = await self._consolidation.complete(
            ConsolidateCompletion(
                job_id=request.lease.job_id,
                lease_token=request.lease.lease_token,
                model=request.model,
                facts=tuple(
                    SessionFact(
                        fact_from_proto(f.fact),
                        tuple(f.source_memory_ids),
                        tuple(
                            Triple(e.source, e.relationship, e.target, e.confidence)
                            for e in f.entities
                        ),
                    )
                    for f in request.facts
                ),
                causal=tuple((c.cause_memory_id, c.effect_memory_id) for c in request.causal_links),
                warnings=tuple(request.warnings),
                named=named_entities(request.named_entities),
            )
        )
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
        ended = await self._queue.release_stale(request.lease_timeout_ms)
        return pb.ReleaseStaleLeasesResponse(released_count=ended.released, dead_count=ended.dead)

    async def ReleasePriorInstanceLeases(
        self, request: pb.ReleasePriorInstanceLeasesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleasePriorInstanceLeasesResponse:
        ended = await self._queue.release_prior_instances(_holder(request.holder))
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


def _wait_seconds(request: pb.LeaseJobsRequest) -> float:
    """The long poll's wait; a Duration whose parts disagree in sign is invalid."""
    wait = request.wait
    if (wait.seconds < 0 < wait.nanos) or (wait.nanos < 0 < wait.seconds):
        raise InvalidArgument("wait", "seconds and nanos must have the same sign")
    if not -999_999_999 <= wait.nanos <= 999_999_999:
        raise InvalidArgument("wait", "nanos must be within ±999,999,999")
    return wait.seconds + wait.nanos / 1e9


def fact_from_proto(fact: pb.ProposedFact) -> Fact:
    """A proposal's fact; a bad `valid_until` is INVALID_ARGUMENT (the store's
    checks in services/store/extraction_writes.py judge the rest)."""
    return Fact(
        fact.content,
        fact.type,
        fact.confidence,
        importance=fact.importance if fact.HasField("importance") else None,
        temporal_class=temporal_from_proto(fact.temporal_class),
        valid_until=text_from_timestamp(
            fact.valid_until, fact.HasField("valid_until"), "proposals.fact.valid_until"
        ),
        categories=tuple(fact.categories),
    )


def named_entities(entities: Sequence[pb.NamedEntity]) -> tuple[NamedEntity, ...]:
    return tuple(
        NamedEntity(n.name, n.entity_type or DEFAULT_ENTITY_TYPE, tuple(n.aliases))
        for n in entities
    )
