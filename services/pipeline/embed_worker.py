"""The embedding worker: lease embed jobs in batches, embed outside any lock,
hand the vectors to the store.

A provider that is down is nobody's job's fault: the batch is released without
using an attempt and the worker backs off (seed 000 backoff: 1 s doubling to
30 s plus up to 0.5 s jitter), so nothing is lost and the status says degraded.
A provider that rejects an input fails that job, which retries with backoff and
goes dead after its attempts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import clock, tracing
from services.common.backoff import backoff_s
from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.pipeline.leases import LeaseIdentity
from services.pipeline.status import ProviderHealth, WorkerStatus

log = logging.getLogger("engram.pipeline.embed")


class EmbedWorker:
    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        provider: EmbeddingProvider,
        identity: LeaseIdentity,
        *,
        batch_size: int,
        poll_s: float,
        on_embedded: Callable[[Sequence[jq.Job]], None] | None = None,
    ) -> None:
        """`on_embedded`: told the jobs whose vectors the store took (the
        near-duplicate check, services/pipeline/near_dup.py); it must not block."""
        self._on_embedded = on_embedded
        self._jobs = jobs
        self._identity = identity
        self._provider = provider
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._failures = 0
        self.status = WorkerStatus("embed")
        self.health = ProviderHealth("embedding", provider.kind, provider.model)

    async def run(self) -> None:
        if self._provider.kind == "none":
            self.status.state = "stopped"
            self.health.state = "disabled"
            return
        while True:
            try:
                worked = await self.run_once()
            except grpc.aio.AioRpcError as exc:
                self._fail_round(f"store unreachable: {exc.code().name}")
                worked = False
            if self._failures:
                self.status.state = "backoff"
                await asyncio.sleep(backoff_s(self._failures))
            elif not worked:
                self.status.state = "idle"
                await asyncio.sleep(self._poll_s)

    async def run_once(self) -> bool:
        """Lease and process one batch; False when there was nothing to do."""
        await self._identity.release_prior_instances()
        call = self._jobs.LeaseJobs(
            jq.LeaseJobsRequest(
                job_type=job_pb2.JOB_TYPE_EMBED,
                max_jobs=self._batch_size,
                holder=self._identity.holder,
            )
        )
        leased = await call
        jobs = list(leased.jobs)
        if not jobs:
            return False
        self.status.state = "busy"
        # linked to the Remembers' traces, when tracing is on (services/common/tracing.py)
        metadata = await call.initial_metadata() if tracing.enabled() else None
        with tracing.job_span("pipeline.embed", metadata, jobs=len(jobs)):
            return await self._embed_batch(jobs)

    async def _embed_batch(self, jobs: list[jq.Job]) -> bool:
        try:
            vectors = await self._provider.embed([job.content for job in jobs])
        except ProviderUnavailable as exc:
            await self._jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[_lease(j) for j in jobs]))
            self.status.released += len(jobs)
            self._fail_round(str(exc))
            self.health.state = "degraded"
            self.health.last_error = str(exc)
            self.health.checked_at = clock.now_text()
            return True
        except ProviderError as exc:
            if len(jobs) > 1:  # find the input the provider rejects; embed the rest
                for job in jobs:
                    await self._embed_alone(job)
                return True
            await self._fail_jobs(jobs, str(exc))
            return True
        await self._complete(jobs, vectors)
        return True

    async def _embed_alone(self, job: jq.Job) -> None:
        try:
            [vector] = await self._provider.embed([job.content])
        except ProviderUnavailable as exc:
            await self._jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[_lease(job)]))
            self.status.released += 1
            self._fail_round(str(exc))
            return
        except ProviderError as exc:
            await self._fail_jobs([job], str(exc))
            return
        await self._complete([job], [vector])

    async def _complete(self, jobs: list[jq.Job], vectors: list[list[float]]) -> None:
        response = await self._jobs.CompleteEmbedJobs(
            jq.CompleteEmbedJobsRequest(
                model=self._provider.model,
                results=[
                    jq.EmbedResult(lease=_lease(job), content_hash=job.content_hash, vector=vector)
                    for job, vector in zip(jobs, vectors, strict=True)
                ],
            )
        )
        done = sum(outcome == jq.LEASE_OUTCOME_OK for outcome in response.outcomes)
        if self._on_embedded is not None:
            ok = zip(jobs, response.outcomes, strict=True)
            self._on_embedded([job for job, outcome in ok if outcome == jq.LEASE_OUTCOME_OK])
        self.status.completed += done
        self.status.last_batch_at = clock.now_text()
        self._failures = 0
        self.health.state = "available"
        self.health.last_error = ""
        self.health.checked_at = self.status.last_batch_at
        if done < len(jobs):
            log.warning("leases lost before completion", extra={"lost": len(jobs) - done})

    async def _fail_jobs(self, jobs: list[jq.Job], error: str) -> None:
        await self._jobs.FailJobs(
            jq.FailJobsRequest(failures=[jq.JobFailure(lease=_lease(j), error=error) for j in jobs])
        )
        self.status.failed += len(jobs)
        self.status.last_error = error
        log.warning("embed jobs failed", extra={"jobs": len(jobs), "error": error})

    def _fail_round(self, error: str) -> None:
        self._failures += 1
        self.status.last_error = error
        log.warning(
            "embedding worker backing off", extra={"error": error, "failures": self._failures}
        )


def _lease(job: jq.Job) -> jq.JobLease:
    return jq.JobLease(job_id=job.id, lease_token=job.lease_token)
