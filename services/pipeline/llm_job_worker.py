"""The lease/retry machinery every LLM job worker shares (extract, summarize):
a pool of lease loops with one backoff, leases renewed while the LLM runs, and
what each failure means for the job (seed 000 "Worker Model").

- the LLM refuses connections, or another service the job needs is down
  (`release_errors`): nobody's job is at fault. The job is released without
  using an attempt, the LLM is reported degraded (not for the other
  services), and the pool backs off (1 s doubling to 30 s, plus jitter).
- a timeout, a 5xx, garbage, or an answer that is not the expected JSON: a
  failed attempt (FailJobs: the store retries it later and makes it dead after
  `workerMaxRetries`), and the pool backs off.
- the lease is lost (reaped while the LLM was slow): the renewal notices and
  stops the work, or the store answers LEASE_LOST; nothing is written.
- the store refuses the result (frozen, disk full, the target gone, the
  result rejected): the pipeline's one rule for refusals
  (services/pipeline/job_outcomes.py), the same for every job kind.
- a bug costs an attempt, never the job or the pool.

A subclass says which job type it leases, does the work (`work`) and hands the
result to the store (`complete`), calling the store through `refusing`
(services/common/remote_errors.py) and raising LeaseLost when the store says
the lease is gone: what either means for the job is decided here, once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import clock
from services.common.backoff import backoff_s
from services.common.config import Config
from services.common.providers.errors import ProviderError, ProviderUnavailable
from services.common.providers.llm import LlmProvider, LlmUnreachable
from services.common.remote_errors import StoreRefusal
from services.pipeline.job_outcomes import Outcome, describe, settle
from services.pipeline.leases import LeaseIdentity, LeaseLost, run_renewing
from services.pipeline.llm_json import LlmOutputInvalid
from services.pipeline.status import ProviderHealth, WorkerStatus

R = TypeVar("R")


@dataclass(frozen=True)
class LlmWorkerSettings:
    enabled: bool
    concurrency: int
    poll_s: float
    renew_every_s: float


def single_loop_settings(config: Config, enabled: bool) -> LlmWorkerSettings:
    """One lease loop at Pipeline V2's poll and lease rhythm: for session jobs
    (summaries, consolidations), rare next to extraction."""
    pipeline = config.memory.pipelineV2
    return LlmWorkerSettings(
        enabled=enabled,
        concurrency=1,
        poll_s=pipeline.workerPollMs / 1000,
        renew_every_s=pipeline.leaseTimeoutMs / 3000,
    )


class ReleaseJob(Exception):
    """Hand the job back unattempted: a service it needs is down, not its fault."""


class LlmJobWorker(Generic[R]):
    job_type: job_pb2.JobType.ValueType = job_pb2.JOB_TYPE_UNSPECIFIED
    # Raised by `work` when the job is not at fault (besides LlmUnreachable).
    release_errors: tuple[type[Exception], ...] = (ReleaseJob,)

    def __init__(
        self,
        name: str,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        llm: LlmProvider,
        settings: LlmWorkerSettings,
        identity: LeaseIdentity,
    ) -> None:
        self._jobs = jobs
        self._identity = identity
        self._settings = settings
        self._failures = 0
        self._resume_at = 0.0
        self._busy = 0
        self._log = logging.getLogger(f"engram.pipeline.{name}")
        self.name = name
        self.status = WorkerStatus(name)
        self.health = ProviderHealth("llm", llm.kind, llm.model)

    async def work(self, job: jq.Job) -> R:
        raise NotImplementedError

    async def complete(self, job: jq.Job, lease: jq.JobLease, result: R) -> None:
        """Hand `result` to the store; call `completed()` or the outcome methods."""
        raise NotImplementedError

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
                self.fail_round(f"store unreachable: {exc.code().name}: {exc.details()}")
                worked = False
            if not worked and self._resume_at <= loop.time():
                if not self._busy:
                    self.status.state = "idle"
                await asyncio.sleep(self._settings.poll_s)

    async def run_once(self) -> bool:
        """Lease and process one job; False when none was due."""
        leased = await self._identity.lease(self.job_type, 1)
        if not leased:
            return False
        self._busy += 1
        self.status.state = "busy"
        try:
            await self._process(leased[0])
        finally:
            self._busy -= 1
        return True

    async def _process(self, job: jq.Job) -> None:
        lease = jq.JobLease(job_id=job.id, lease_token=job.lease_token)
        not_its_fault: tuple[type[Exception], ...] = (LlmUnreachable, *self.release_errors)
        try:
            result = await run_renewing(
                self._jobs, lease, self.work(job), self._settings.renew_every_s
            )
        except LeaseLost:
            self.lease_lost(job, "lease lost while the LLM ran; result discarded")
            return
        except StoreRefusal as exc:
            await self.refused(job, lease, exc)
            return
        except not_its_fault as exc:
            await self.release(lease, str(exc), llm_down=isinstance(exc, LlmUnreachable))
            return
        except (ProviderError, LlmOutputInvalid) as exc:
            await self.fail(lease, str(exc), llm_degraded=isinstance(exc, ProviderUnavailable))
            return
        except grpc.aio.AioRpcError:
            raise  # the store is unreachable: the loop backs off, the lease expires
        except Exception as exc:  # a bug must cost an attempt, not the job or the pool
            self._log.exception(f"{self.name} job crashed", extra={"job": job.id})
            await self.fail(lease, f"internal error: {exc!r}")
            return
        try:
            await self.complete(job, lease, result)
        except (StoreRefusal, LeaseLost) as exc:
            await self.refused(job, lease, exc)

    async def refused(
        self, job: jq.Job, lease: jq.JobLease, refusal: StoreRefusal | LeaseLost
    ) -> None:
        """The store refused the job's call: release, retry or drop it by the one rule."""
        outcome = await settle(self._jobs, [lease], refusal)
        error = describe(refusal)
        if outcome is Outcome.RELEASE:
            self.status.released += 1
            self.fail_round(error)
        elif outcome is Outcome.RETRY:
            self.status.failed += 1
            self.fail_round(error)
        else:
            self.lease_lost(job, error)

    # ---- outcomes ----------------------------------------------------------------------

    def completed(self) -> None:
        self.status.completed += 1
        self.status.last_batch_at = clock.now_text()
        self._failures = 0
        self.mark_llm("available", "")

    async def release(self, lease: jq.JobLease, error: str, *, llm_down: bool) -> None:
        await self._jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[lease]))
        self.status.released += 1
        if llm_down:
            self.mark_llm("degraded", error)
        self.fail_round(error)

    async def fail(self, lease: jq.JobLease, error: str, *, llm_degraded: bool = False) -> None:
        response = await self._jobs.FailJobs(
            jq.FailJobsRequest(failures=[jq.JobFailure(lease=lease, error=error)])
        )
        self.status.failed += 1
        if llm_degraded:
            self.mark_llm("degraded", error)
        self.fail_round(error)
        self._log.warning(
            f"{self.name} job failed",
            extra={"job": lease.job_id, "error": error, "dead": response.dead_count},
        )

    def lease_lost(self, job: jq.Job, message: str) -> None:
        self.status.last_error = message
        self._log.warning(message, extra={"job": job.id})

    def mark_llm(self, state: str, error: str) -> None:
        self.health.state = state
        self.health.last_error = error
        self.health.checked_at = clock.now_text()

    def fail_round(self, error: str) -> None:
        """Every failure lengthens the shared backoff; a completion resets it."""
        self._failures += 1
        self.status.last_error = error
        delay = backoff_s(self._failures)
        self._resume_at = max(self._resume_at, asyncio.get_running_loop().time() + delay)
        self._log.warning(
            f"{self.name} worker backing off",
            extra={"error": error, "failures": self._failures, "delay_s": round(delay, 3)},
        )
