"""Who a pipeline worker is when it leases jobs, and taking back at start what its
previous process held.

A worker's name is stable across restarts and different for every live replica:
`workers.instance_name` (default: host name and the pipeline's port, which two
live replicas on one host cannot share) plus the worker kind. Every process start
draws a fresh instance id. Before its first lease a worker asks the store to
release the leases its name holds under any other instance id: a pipeline killed
with SIGKILL gets its in-flight jobs back as soon as it restarts, instead of after
the lease timeout plus the reaper's interval. Each such lease has used its job's
attempt (issue 34: a job that kills its worker every time reaches the dead
letter after `workerMaxRetries`, it does not loop forever).

While a worker holds a job it renews the lease (`run_renewing`, the one renewal
loop); when the store says the lease is gone, the work is cancelled at once, so
a worker whose job was reaped stops spending provider calls on it and writes
nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import Awaitable
from typing import TypeVar

import grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common.config import Config

log = logging.getLogger("engram.pipeline.leases")

T = TypeVar("T")


class LeaseLost(Exception):
    """The store no longer recognises our lease: the job is someone else's now."""


def instance_name(config: Config, port: int) -> str:
    """This pipeline replica's stable name. Without a configured name and with an
    ephemeral port (0) there is nothing stable to go by: the name is then unique
    to this process, so a restart waits for the stale-lease reaper as before."""
    configured = config.workers.instance_name  # its length is checked at load
    if configured:
        return configured
    if port:
        return f"{socket.gethostname()}:{port}"
    return f"{socket.gethostname()}:ephemeral-{uuid.uuid4().hex[:12]}"


def new_instance_id() -> str:
    return uuid.uuid4().hex


class LeaseIdentity:
    """One worker's lease holder; releases its predecessors' leases once, before
    the first lease (retried on the next round if the store was unreachable)."""

    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        worker_name: str,
        instance_id: str,
    ) -> None:
        self._jobs = jobs
        self.holder = jq.LeaseHolder(worker_name=worker_name, instance_id=instance_id)
        self._released = False
        self._lock = asyncio.Lock()

    async def release_prior_instances(self) -> None:
        """Raises grpc.aio.AioRpcError when the store cannot be reached."""
        if self._released:
            return
        async with self._lock:  # one call even when several lease loops start at once
            if self._released:
                return
            response = await self._jobs.ReleasePriorInstanceLeases(
                jq.ReleasePriorInstanceLeasesRequest(holder=self.holder)
            )
            self._released = True
        if response.released_count:
            log.info(
                "released the leases of a previous instance",
                extra={"worker": self.holder.worker_name, "released": response.released_count},
            )

    async def lease(self, job_type: job_pb2.JobType.ValueType, max_jobs: int) -> list[jq.Job]:
        """Up to `max_jobs` due jobs of `job_type`, leased under this holder (after
        releasing a previous instance's leases, the first time)."""
        await self.release_prior_instances()
        leased = await self._jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_type, max_jobs=max_jobs, holder=self.holder)
        )
        return list(leased.jobs)


def worker_identities(
    jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub, name: str, kinds: tuple[str, ...]
) -> dict[str, LeaseIdentity]:
    """One identity per worker kind (`<name>/<kind>`), sharing this process's instance id."""
    instance_id = new_instance_id()
    return {kind: LeaseIdentity(jobs, f"{name}/{kind}", instance_id) for kind in kinds}


async def run_renewing(
    jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
    lease: jq.JobLease,
    work: Awaitable[T],
    every_s: float,
) -> T:
    """`work`'s result, renewing `lease` every `every_s` while it runs. Raises
    LeaseLost (after cancelling `work`) when a renewal finds the lease gone; a
    renewal the store cannot answer is retried at the next tick."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                return task.result()
            try:
                renewed = await jobs.RenewLeases(jq.RenewLeasesRequest(leases=[lease]))
            except grpc.aio.AioRpcError as exc:
                log.warning("lease renewal failed", extra={"error": exc.code().name})
                continue
            if renewed.outcomes[0] != jq.LEASE_OUTCOME_OK:
                raise LeaseLost()
    finally:
        if not task.done():  # lease lost, or the worker itself is being stopped
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
