"""The extraction worker (seed 000 "Worker Model"): lease `extract` jobs, run
extraction -> decisions -> embedding pre-fetch, and hand the proposals to the
store's CompleteExtractJob, which applies them in one transaction.

A frozen store (`mutationsFrozen`) is a shadow pipeline (seed 000): it still
hands out extract jobs and records their proposals without writing memories,
so the worker runs as usual; the store decides the mode.

What a failure means for the job:
- the LLM refuses connections, search cannot give candidates, or the store
  refuses the write (MUTATIONS_FROZEN: not expected from a store that leased
  the job, kept as a safety net): nobody's job is at fault. The job is released
  without using an attempt, the LLM is reported degraded (not for a refused
  write), and the pool backs off (1 s doubling to 30 s, plus up to 0.5 s jitter).
- a timeout, a 5xx, garbage, or an answer that is not the expected JSON: a
  failed attempt (FailJobs: the store retries it later and makes it dead after
  `workerMaxRetries`), and the pool backs off.
- the lease is lost (reaped while the LLM was slow): the renewal notices and
  stops the work, or the store answers LEASE_LOST; nothing is written.

Leases are renewed every `leaseTimeoutMs / 3` while a job runs, so a slow LLM
call does not get its job reaped and done twice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import clock
from services.common.backoff import backoff_s
from services.common.config import Config
from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.llm import LlmUnreachable
from services.common.remote_errors import error_reason
from services.pipeline.decision import CandidatesUnavailable, Decider, Proposal
from services.pipeline.extraction import ExtractionResult, Extractor
from services.pipeline.leases import LeaseIdentity, LeaseLost, run_renewing
from services.pipeline.llm_json import LlmOutputInvalid
from services.pipeline.status import ProviderHealth, WorkerStatus

log = logging.getLogger("engram.pipeline.extract")

_ACTIONS = {
    "ADD": jq.PROPOSAL_ACTION_ADD,
    "UPDATE": jq.PROPOSAL_ACTION_UPDATE,
    "DELETE": jq.PROPOSAL_ACTION_DELETE,
    "NONE": jq.PROPOSAL_ACTION_NONE,
}
MAX_WARNINGS = 100  # CompleteExtractJob accepts at most this many


@dataclass(frozen=True)
class ExtractWorkerSettings:
    enabled: bool
    concurrency: int
    poll_s: float
    renew_every_s: float

    @classmethod
    def from_config(cls, config: Config) -> ExtractWorkerSettings:
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


class _Release(Exception):
    """Hand the job back unattempted (not the job's fault)."""


class ExtractWorker:
    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        extractor: Extractor,
        decider: Decider,
        embedder: EmbeddingProvider,
        settings: ExtractWorkerSettings,
        identity: LeaseIdentity,
    ) -> None:
        self._jobs = jobs
        self._identity = identity
        self._extractor = extractor
        self._decider = decider
        self._embedder = embedder
        self._settings = settings
        self._failures = 0
        self._resume_at = 0.0
        self._busy = 0
        llm = extractor.llm
        self.status = WorkerStatus("extract")
        self.health = ProviderHealth("llm", llm.kind, llm.model)

    # ---- the pool ----------------------------------------------------------------------

    async def run(self) -> None:
        """`concurrency` lease loops sharing one backoff; stopped when disabled."""
        if not self._settings.enabled:
            self.status.state = "stopped"
            return
        await asyncio.gather(*(self._loop() for _ in range(self._settings.concurrency)))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wait = self._resume_at - loop.time()
            if wait > 0:
                self.status.state = "backoff"
                await asyncio.sleep(wait)
                continue
            try:
                worked = await self.run_once()
            except grpc.aio.AioRpcError as exc:
                self._fail_round(f"store unreachable: {exc.code().name}: {exc.details()}")
                worked = False
            if not worked and self._resume_at <= loop.time():
                if not self._busy:
                    self.status.state = "idle"
                await asyncio.sleep(self._settings.poll_s)

    async def run_once(self) -> bool:
        """Lease and process one job; False when none was due."""
        leased = await self._identity.lease(job_pb2.JOB_TYPE_EXTRACT, 1)
        if not leased:
            return False
        self._busy += 1
        self.status.state = "busy"
        try:
            await self._process(leased[0])
        finally:
            self._busy -= 1
        return True

    # ---- one job -----------------------------------------------------------------------

    async def _process(self, job: jq.Job) -> None:
        lease = jq.JobLease(job_id=job.id, lease_token=job.lease_token)
        try:
            analysis = await run_renewing(
                self._jobs, lease, self._analyse(job), self._settings.renew_every_s
            )
        except LeaseLost:
            self._lease_lost(job, "lease lost while the LLM ran; result discarded")
            return
        except (LlmUnreachable, CandidatesUnavailable) as exc:
            await self._release(lease, str(exc), llm_down=isinstance(exc, LlmUnreachable))
            return
        except (ProviderError, LlmOutputInvalid) as exc:
            await self._fail(lease, str(exc), llm_degraded=isinstance(exc, ProviderUnavailable))
            return
        except grpc.aio.AioRpcError:
            raise  # the store is unreachable: the loop backs off, the lease expires
        except Exception as exc:  # a bug must cost an attempt, not the job or the pool
            log.exception("extract job crashed", extra={"job": job.id})
            await self._fail(lease, f"internal error: {exc!r}")
            return
        await self._complete(job, lease, analysis)

    async def _analyse(self, job: jq.Job) -> _Analysis:
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

    async def _complete(self, job: jq.Job, lease: jq.JobLease, analysis: _Analysis) -> None:
        request = completion_request(
            lease, analysis, self._extractor.llm.model, self._embedder.model
        )
        try:
            response = await self._jobs.CompleteExtractJob(request)
        except grpc.aio.AioRpcError as exc:
            if error_reason(exc) == "MUTATIONS_FROZEN":
                await self._release(lease, "mutations are frozen", llm_down=False)
                return
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                await self._fail(lease, f"store rejected the result: {exc.details()}")
                return
            raise
        if response.outcome != jq.LEASE_OUTCOME_OK:
            self._lease_lost(job, "lease lost before completion; result discarded")
            return
        self.status.completed += 1
        self.status.last_batch_at = clock.now_text()
        self._failures = 0
        self._mark_llm("available", "")
        if response.graph_error:
            log.warning("graph write failed", extra={"job": job.id, "error": response.graph_error})

    # ---- outcomes ----------------------------------------------------------------------

    async def _release(self, lease: jq.JobLease, error: str, *, llm_down: bool) -> None:
        await self._jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[lease]))
        self.status.released += 1
        if llm_down:
            self._mark_llm("degraded", error)
        self._fail_round(error)

    async def _fail(self, lease: jq.JobLease, error: str, *, llm_degraded: bool = False) -> None:
        response = await self._jobs.FailJobs(
            jq.FailJobsRequest(failures=[jq.JobFailure(lease=lease, error=error)])
        )
        self.status.failed += 1
        if llm_degraded:
            self._mark_llm("degraded", error)
        self._fail_round(error)
        log.warning(
            "extract job failed",
            extra={"job": lease.job_id, "error": error, "dead": response.dead_count},
        )

    def _lease_lost(self, job: jq.Job, message: str) -> None:
        self.status.last_error = message
        log.warning(message, extra={"job": job.id})

    def _mark_llm(self, state: str, error: str) -> None:
        self.health.state = state
        self.health.last_error = error
        self.health.checked_at = clock.now_text()

    def _fail_round(self, error: str) -> None:
        """Every failure lengthens the shared backoff; a completion resets it."""
        self._failures += 1
        self.status.last_error = error
        delay = backoff_s(self._failures)
        self._resume_at = max(self._resume_at, asyncio.get_running_loop().time() + delay)
        log.warning(
            "extract worker backing off",
            extra={"error": error, "failures": self._failures, "delay_s": round(delay, 3)},
        )


def completion_request(
    lease: jq.JobLease, analysis: _Analysis, extraction_model: str, embedding_model: str
) -> jq.CompleteExtractJobRequest:
    """The cross-helper contract: proposals (with the candidates shown to the
    LLM and any pre-fetched vector), entity triples and warnings."""
    proposals = [
        jq.Proposal(
            action=_ACTIONS[p.action],
            fact=jq.ProposedFact(
                content=p.fact.content, type=p.fact.type, confidence=p.fact.confidence
            ),
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
        entities=[
            jq.EntityTriple(
                source=e.source,
                relationship=e.relationship,
                target=e.target,
                confidence=e.confidence,
            )
            for e in analysis.extraction.entities
        ],
        warnings=capped_warnings(analysis.warnings),
        embedding_model=embedding_model if analysis.vectors else "",
    )


def capped_warnings(warnings: list[str]) -> list[str]:
    """At most MAX_WARNINGS (the store's limit), the last one saying how many were cut."""
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    kept = warnings[: MAX_WARNINGS - 1]
    return [*kept, f"{len(warnings) - len(kept)} more warnings omitted"]
