"""The embedding worker: lease embed jobs in batches, embed outside any lock,
hand the vectors to the store.

The stages overlap, so the model never waits for the store: while one batch is
in the model, the next is already leased and the previous one's vectors are on
their way to the store (CompleteEmbedJobs, at most COMPLETIONS_IN_FLIGHT at a
time). Leases long-poll (`workers.embed.long_poll_ms`): a Remember's job is
picked up as soon as it commits, instead of on the next poll. Batches adapt by
themselves: a lease takes what is due, up to `providers.embedding.batch_size`,
so a trickle is embedded one memory at a time and a backlog in full batches.

A provider that is down is nobody's job's fault: the batch is released without
using an attempt and the worker backs off (seed 000 backoff: 1 s doubling to
30 s plus up to 0.5 s jitter), so nothing is lost and the status says degraded.
A provider that rejects an input fails that job, which retries with backoff and
goes dead after its attempts. The store refusing the vectors follows the
pipeline's one rule for refusals (services/pipeline/job_outcomes.py): a full
disk releases the batch without using attempts, a rejection
(EMBEDDING_MODEL_MISMATCH) is a failed attempt.

Each content of two or more sentences (services/common/text.py sentences) is
embedded with its sentences, in the same provider calls, and the sentences'
vectors go to the store in the same result as the whole one (Recall rescores
its candidates by the best of them, issue 19). `sentence_vectors` False sends
the whole vectors alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import clock, tracing
from services.common.backoff import backoff_s
from services.common.metrics import EMBED_WORKER_SECONDS
from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.remote_errors import StoreRefusal, refusing
from services.common.text import sentences
from services.pipeline.job_outcomes import Outcome, describe, settle
from services.pipeline.leases import LeaseIdentity
from services.pipeline.status import ProviderHealth, WorkerStatus

log = logging.getLogger("engram.pipeline.embed")

# CompleteEmbedJobs calls in flight at once: the store commits one while the
# model embeds the next batch; more would only queue in the store's writer.
COMPLETIONS_IN_FLIGHT = 2
# beyond the long poll's wait: time for the lease itself (the channel's default
# lease deadline applies when the worker does not long-poll)
LEASE_MARGIN_S = 5.0
# Texts per provider call when sentences join a batch: a batch of long turns
# holds thousands of sentences, and one request of them all could outlast the
# provider's timeout.
TEXTS_PER_CALL = 512


@dataclass(frozen=True, slots=True)
class Embedded:
    """One job's vectors: the whole content's, and its sentences' (none for a
    single sentence)."""

    vector: list[float]
    parts: list[list[float]]


class EmbedWorker:
    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        provider: EmbeddingProvider,
        identity: LeaseIdentity,
        *,
        batch_size: int,
        poll_s: float,
        long_poll_s: float = 0.0,
        sentence_vectors: bool = True,
    ) -> None:
        self._jobs = jobs
        self._identity = identity
        self._provider = provider
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._long_poll_s = long_poll_s
        self._sentence_vectors = sentence_vectors
        self._failures = 0
        self._waiting = False  # for work, with no batch in hand
        self._completing: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(COMPLETIONS_IN_FLIGHT)
        self.status = WorkerStatus("embed")
        self.health = ProviderHealth("embedding", provider.kind, provider.model)

    async def run(self) -> None:
        if self._provider.kind == "none":
            self.status.state = "stopped"
            self.health.state = "disabled"
            return
        prefetch: asyncio.Task[tuple[list[jq.Job], Any]] | None = None
        try:
            while True:
                try:
                    if prefetch is None:
                        prefetch = asyncio.create_task(self._lease())
                    waited = time.perf_counter()
                    if not prefetch.done():
                        self._waiting = True
                        self._show_idle()
                    try:
                        jobs, metadata = await prefetch
                    finally:
                        self._waiting = False
                    prefetch = None
                    if jobs:
                        EMBED_WORKER_SECONDS.labels("wait_lease").observe(
                            time.perf_counter() - waited
                        )
                        self.status.state = "busy"
                        # the next batch is leased while this one is in the model
                        prefetch = asyncio.create_task(self._lease())
                        # linked to the Remembers' traces, when tracing is on
                        with tracing.job_span("pipeline.embed", metadata, jobs=len(jobs)):
                            await self._embed_batch(jobs)
                except grpc.aio.AioRpcError as exc:
                    self._fail_round(f"store unreachable: {exc.code().name}")
                    jobs = []
                if self._failures:
                    # nothing is held while we back off: a batch leased ahead goes back
                    await self._give_back(prefetch)
                    prefetch = None
                    self.status.state = "backoff"
                    await asyncio.sleep(backoff_s(self._failures))
                elif not jobs and prefetch is None:
                    self._show_idle()
                    if self._long_poll_s <= 0:
                        await asyncio.sleep(self._poll_s)
        finally:
            if prefetch is not None:
                prefetch.cancel()
            for task in list(self._completing):
                task.cancel()

    def _show_idle(self) -> None:
        """Idle: no batch in the model and none on its way to the store."""
        if not self._completing and not self._failures:
            self.status.state = "idle"

    async def run_once(self) -> bool:
        """Lease and process one batch, its completion included; False when there
        was nothing to do."""
        jobs, metadata = await self._lease()
        if not jobs:
            return False
        self.status.state = "busy"
        with tracing.job_span("pipeline.embed", metadata, jobs=len(jobs)):
            await self._embed_batch(jobs)
        await self.drain()
        return True

    async def drain(self) -> None:
        """Wait for the completions in flight."""
        while self._completing:
            await asyncio.gather(*self._completing, return_exceptions=True)

    async def _lease(self) -> tuple[list[jq.Job], Any]:
        """One LeaseJobs (a long poll when configured) and its initial metadata
        (trace links) when tracing is on."""
        await self._identity.release_prior_instances()
        request = jq.LeaseJobsRequest(
            job_type=job_pb2.JOB_TYPE_EMBED,
            max_jobs=self._batch_size,
            holder=self._identity.holder,
        )
        timeout = None
        if self._long_poll_s > 0:
            request.wait.FromMilliseconds(round(self._long_poll_s * 1000))
            timeout = self._long_poll_s + LEASE_MARGIN_S
        started = time.perf_counter()
        call = self._jobs.LeaseJobs(request, timeout=timeout)
        leased = await call
        EMBED_WORKER_SECONDS.labels("lease").observe(time.perf_counter() - started)
        metadata = await call.initial_metadata() if tracing.enabled() and leased.jobs else None
        return list(leased.jobs), metadata

    async def _give_back(self, prefetch: asyncio.Task[tuple[list[jq.Job], Any]] | None) -> None:
        """Release the jobs of a lease made ahead (during a backoff nobody may hold
        them); the call itself may have failed, then there is nothing to release."""
        if prefetch is None:
            return
        try:
            jobs, _ = await prefetch
        except grpc.aio.AioRpcError:
            return
        if jobs:
            with contextlib.suppress(grpc.aio.AioRpcError):  # the reaper frees them then
                await self._jobs.ReleaseJobs(
                    jq.ReleaseJobsRequest(leases=[_lease(j) for j in jobs])
                )
                self.status.released += len(jobs)

    async def _embed_batch(self, jobs: list[jq.Job]) -> bool:
        try:
            vectors = await self._embed_with_parts([job.content for job in jobs])
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
        await self._complete_soon(jobs, vectors)
        return True

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        """The provider's vectors, with the local model's tokenise and model time
        observed per batch (other providers: the call's time is the model's)."""
        stages: dict[str, float] = getattr(self._provider, "stage_seconds", {})
        before = dict(stages)
        started = time.perf_counter()
        vectors = await self._provider.embed(texts)
        if stages:
            for stage, total in stages.items():
                EMBED_WORKER_SECONDS.labels(stage).observe(total - before.get(stage, 0.0))
        else:
            EMBED_WORKER_SECONDS.labels("model").observe(time.perf_counter() - started)
        return vectors

    async def _embed_with_parts(self, contents: list[str]) -> list[Embedded]:
        """Every content's vector and its sentences' vectors, embedded together
        (calls of at most TEXTS_PER_CALL texts when sentences are added)."""
        split = [
            (s if len(s := sentences(c)) > 1 else []) if self._sentence_vectors else []
            for c in contents
        ]
        texts = list(contents) + [s for parts in split for s in parts]
        if len(texts) == len(contents):
            return [Embedded(v, []) for v in await self._embed(texts)]
        vectors: list[list[float]] = []
        for start in range(0, len(texts), TEXTS_PER_CALL):
            vectors.extend(await self._embed(texts[start : start + TEXTS_PER_CALL]))
        out, at = [], len(contents)
        for i, parts in enumerate(split):
            out.append(Embedded(vectors[i], vectors[at : at + len(parts)]))
            at += len(parts)
        return out

    async def _complete_soon(self, jobs: list[jq.Job], vectors: list[Embedded]) -> None:
        """Hand the vectors to the store in the background (the model goes on with
        the next batch), with at most COMPLETIONS_IN_FLIGHT calls in flight."""
        waited = time.perf_counter()
        await self._slots.acquire()
        EMBED_WORKER_SECONDS.labels("wait_complete").observe(time.perf_counter() - waited)
        task = asyncio.create_task(self._complete_in_background(jobs, vectors))
        self._completing.add(task)
        task.add_done_callback(self._completing.discard)

    async def _complete_in_background(self, jobs: list[jq.Job], vectors: list[Embedded]) -> None:
        try:
            await self._complete(jobs, vectors)
        except StoreRefusal as exc:  # the pipeline's one rule (job_outcomes)
            await self._refused(jobs, exc)
        except grpc.aio.AioRpcError as exc:  # the leases lapse and the jobs come back
            self._fail_round(f"store unreachable: {exc.code().name}")
        finally:
            self._slots.release()
            self._completing.discard(asyncio.current_task())
            if self._waiting:
                self._show_idle()

    async def _refused(self, jobs: list[jq.Job], refusal: StoreRefusal) -> None:
        try:
            outcome = await settle(self._jobs, [_lease(j) for j in jobs], refusal)
        except grpc.aio.AioRpcError as exc:  # the leases lapse and the jobs come back
            self._fail_round(f"store unreachable: {exc.code().name}")
            return
        if outcome is Outcome.RELEASE:
            self.status.released += len(jobs)
        elif outcome is Outcome.RETRY:
            self.status.failed += len(jobs)
        self._fail_round(describe(refusal))

    async def _embed_alone(self, job: jq.Job) -> None:
        try:
            [vector] = await self._embed_with_parts([job.content])
        except ProviderUnavailable as exc:
            await self._jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[_lease(job)]))
            self.status.released += 1
            self._fail_round(str(exc))
            return
        except ProviderError as exc:
            await self._fail_jobs([job], str(exc))
            return
        await self._complete_soon([job], [vector])

    async def _complete(self, jobs: list[jq.Job], vectors: list[Embedded]) -> None:
        started = time.perf_counter()
        response = await refusing(
            self._jobs.CompleteEmbedJobs(
                jq.CompleteEmbedJobsRequest(
                    model=self._provider.model,
                    results=[
                        jq.EmbedResult(
                            lease=_lease(job),
                            content_hash=job.content_hash,
                            vector=embedded.vector,
                            parts=[x for part in embedded.parts for x in part],
                        )
                        for job, embedded in zip(jobs, vectors, strict=True)
                    ],
                )
            )
        )
        EMBED_WORKER_SECONDS.labels("complete").observe(time.perf_counter() - started)
        done = sum(outcome == jq.LEASE_OUTCOME_OK for outcome in response.outcomes)
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
