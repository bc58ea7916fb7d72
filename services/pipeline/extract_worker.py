"""The extraction worker (seed 000 "Worker Model"): lease `extract` jobs, run
extraction -> decisions -> embedding pre-fetch, and hand the proposals to the
store's CompleteExtractJob, which applies them in one transaction.

A frozen store (`mutationsFrozen`) is a shadow pipeline (seed 000): it still
hands out extract jobs and records their proposals without writing memories,
so the worker runs as usual; the store decides the mode.

What a failure means for the job is the LLM job workers' one rule
(services/pipeline/llm_job_worker.py); search not giving candidates counts
like an unreachable LLM (released, not the job's fault, LLM not blamed). A
refused write (a full disk; MUTATIONS_FROZEN is not expected from a store that
leased the job) follows the pipeline's one rule for refusals
(services/pipeline/job_outcomes.py): released without using an attempt. Leases are renewed every
`leaseTimeoutMs / 3` while a job runs, so a slow LLM call does not get its
job reaped and done twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common.config import Config
from services.common.convert import temporal_to_proto, timestamp_from_text
from services.common.facts import Fact, NamedEntity
from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError
from services.common.remote_errors import refusing
from services.pipeline.decision import CandidatesUnavailable, Decider, Proposal
from services.pipeline.extraction import EntityTriple, ExtractionResult, Extractor
from services.pipeline.leases import LeaseIdentity, LeaseLost
from services.pipeline.llm_job_worker import LlmJobWorker, LlmWorkerSettings, ReleaseJob

log = logging.getLogger("engram.pipeline.extract")

_ACTIONS = {
    "ADD": jq.PROPOSAL_ACTION_ADD,
    "UPDATE": jq.PROPOSAL_ACTION_UPDATE,
    "DELETE": jq.PROPOSAL_ACTION_DELETE,
    "NONE": jq.PROPOSAL_ACTION_NONE,
}
MAX_WARNINGS = 100  # CompleteExtractJob accepts at most this many


class ExtractPoolSettings(LlmWorkerSettings):
    """The extract worker's lease pool (`workers.extract.concurrency` loops at
    Pipeline V2's rhythm), read from config; not config's typed
    `workers.extract` section (services.common.config.ExtractWorkerSettings)."""

    @classmethod
    def from_config(cls, config: Config) -> ExtractPoolSettings:
        pipeline = config.memory.pipelineV2
        return cls(
            enabled=pipeline.enabled,
            concurrency=config.workers.extract.concurrency,
            poll_s=pipeline.workerPollMs / 1000,
            renew_every_s=pipeline.leaseTimeoutMs / 3000,
        )


@dataclass
class _Analysis:
    extraction: ExtractionResult
    proposals: list[Proposal]
    warnings: list[str]
    vectors: dict[str, list[float]]


class ExtractWorker(LlmJobWorker[_Analysis]):
    job_type = job_pb2.JOB_TYPE_EXTRACT
    release_errors = (ReleaseJob, CandidatesUnavailable)

    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        extractor: Extractor,
        decider: Decider,
        embedder: EmbeddingProvider,
        settings: ExtractPoolSettings,
        identity: LeaseIdentity,
    ) -> None:
        super().__init__("extract", jobs, extractor.llm, settings, identity)
        self._extractor = extractor
        self._decider = decider
        self._embedder = embedder

    # ---- one job -----------------------------------------------------------------------

    async def work(self, job: jq.Job) -> _Analysis:
        extraction = await self._extractor.extract(job.content)
        decisions = await self._decider.decide(job.namespace, job.memory_id, extraction.facts)
        warnings = extraction.warnings + decisions.warnings
        vectors = await self._prefetch_vectors(decisions.proposals, warnings)
        return _Analysis(extraction, decisions.proposals, warnings, vectors)

    async def _prefetch_vectors(
        self, proposals: list[Proposal], warnings: list[str]
    ) -> dict[str, list[float]]:
        """Embeddings of the ADD/UPDATE fact contents, outside any lock; a failure
        only means the store queues embed jobs for the new memories instead."""
        texts = sorted({p.fact.content for p in proposals if p.action in ("ADD", "UPDATE")})
        if not texts or self._embedder.kind == "none":
            return {}
        try:
            vectors = await self._embedder.embed(texts)
        except ProviderError as exc:
            warnings.append(f"embedding pre-fetch failed ({exc}); new memories queue embed jobs")
            return {}
        return dict(zip(texts, vectors, strict=True))

    async def complete(self, job: jq.Job, lease: jq.JobLease, analysis: _Analysis) -> None:
        request = completion_request(
            lease, analysis, self._extractor.llm.model, self._embedder.model
        )
        response = await refusing(self._jobs.CompleteExtractJob(request))
        if response.outcome != jq.LEASE_OUTCOME_OK:
            raise LeaseLost("lease lost before completion; result discarded")
        self.completed()
        if response.graph_error:
            log.warning("graph write failed", extra={"job": job.id, "error": response.graph_error})


def completion_request(
    lease: jq.JobLease, analysis: _Analysis, extraction_model: str, embedding_model: str
) -> jq.CompleteExtractJobRequest:
    """The cross-helper contract: proposals (with the candidates shown to the
    LLM and any pre-fetched vector), entity triples and warnings."""
    proposals = [
        jq.Proposal(
            action=_ACTIONS[p.action],
            fact=proposed_fact(p.fact),
            target_id=p.target_id,
            confidence=p.confidence,
            reason=p.reason,
            candidate_ids=list(p.candidate_ids),
            vector=analysis.vectors.get(p.fact.content, []),
        )
        for p in analysis.proposals
    ]
    return jq.CompleteExtractJobRequest(
        lease=lease,
        extraction_model=extraction_model,
        proposals=proposals,
        entities=[entity_triple(e) for e in analysis.extraction.entities],
        warnings=capped_warnings(analysis.warnings),
        embedding_model=embedding_model if analysis.vectors else "",
        named_entities=[named_entity(n) for n in analysis.extraction.named],
    )


def proposed_fact(fact: Fact) -> jq.ProposedFact:
    """A validated fact as the store's job-completion RPCs take it (extract and
    consolidate alike)."""
    return jq.ProposedFact(
        content=fact.content,
        type=fact.type,
        confidence=fact.confidence,
        importance=fact.importance,
        temporal_class=temporal_to_proto(fact.temporal_class),
        valid_until=timestamp_from_text(fact.valid_until),
        categories=fact.categories,
    )


def entity_triple(triple: EntityTriple) -> jq.EntityTriple:
    return jq.EntityTriple(
        source=triple.source,
        relationship=triple.relationship,
        target=triple.target,
        confidence=triple.confidence,
    )


def named_entity(named: NamedEntity) -> jq.NamedEntity:
    return jq.NamedEntity(name=named.name, entity_type=named.type, aliases=named.aliases)


def capped_warnings(warnings: list[str]) -> list[str]:
    """At most MAX_WARNINGS (the store's limit), the last one saying how many were cut."""
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    kept = warnings[: MAX_WARNINGS - 1]
    return [*kept, f"{len(warnings) - len(kept)} more warnings omitted"]
