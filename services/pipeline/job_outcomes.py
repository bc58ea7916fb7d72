"""What the store refusing a leased job's call means for the job: the one rule
every pipeline worker follows (the LLM job workers through
services/pipeline/llm_job_worker.py, the document and embedding workers
directly), so that the same refusal ends the same way for every job kind.

| the store says                                  | outcome | the job                 |
|-------------------------------------------------|---------|-------------------------|
| MUTATIONS_FROZEN, STORAGE_FULL,                 | RELEASE | back to pending, its    |
| STORAGE_UNAVAILABLE (nothing was written; the   |         | attempt not used; the   |
| store takes the write once it can)              |         | worker backs off        |
| NOT_FOUND (the job's target is gone), or a      | RETRY   | a failed attempt with   |
| rejection (INVALID_ARGUMENT, FAILED_PRECONDITION|         | the reason: retried     |
| such as EMBEDDING_MODEL_MISMATCH)               |         | with backoff, the dead  |
|                                                 |         | letter (with the reason)|
|                                                 |         | after workerMaxRetries  |
| the lease is lost (LEASE_OUTCOME_LEASE_LOST, or | DROP    | someone else's now:     |
| a renewal that finds it gone)                   |         | nothing is written      |

Neither the job nor the worker is at fault for a RELEASE: a full disk must not
bury jobs by using up their attempts while nobody can write. A failure that is
not a refusal (the store cannot be reached, an INTERNAL error) is none of
these: the worker backs off and the lease lapses (the reaper counts the
attempt), as before.

The refusals are typed (services/common/remote_errors.py StoreRefusal, raised
by `refusing` around each store call): no worker compares reason strings.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common.remote_errors import (
    StoreDatabaseDown,
    StoreFrozen,
    StoreFull,
    StoreNotFound,
    StoreRefusal,
)
from services.pipeline.leases import LeaseLost

log = logging.getLogger("engram.pipeline.jobs")


class Outcome(enum.Enum):
    RELEASE = "release"  # back to pending without using the attempt
    RETRY = "retry"  # a failed attempt: retried with backoff, then the dead letter
    DROP = "drop"  # the lease is gone: nothing to hand back


_RELEASED = (StoreFrozen, StoreFull, StoreDatabaseDown)


def outcome_of(refusal: StoreRefusal | LeaseLost) -> Outcome:
    if isinstance(refusal, LeaseLost):
        return Outcome.DROP
    if isinstance(refusal, _RELEASED):
        return Outcome.RELEASE
    return Outcome.RETRY


def describe(refusal: StoreRefusal | LeaseLost) -> str:
    """The error recorded for the job (and shown as the worker's last error)."""
    if isinstance(refusal, LeaseLost):
        return str(refusal) or "lease lost; result discarded"
    if isinstance(refusal, StoreNotFound):
        return f"the job's target is gone: {refusal.message}"
    if isinstance(refusal, _RELEASED):
        return f"the store refused the write ({refusal.reason}): {refusal.message}"
    return f"the store rejected the result ({refusal.reason}): {refusal.message}"


async def settle(
    jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
    leases: Sequence[jq.JobLease],
    refusal: StoreRefusal | LeaseLost,
) -> Outcome:
    """Apply the rule to `leases` (ReleaseJobs or FailJobs; nothing for DROP) and
    say which outcome it was. A store that cannot take that call either raises
    grpc.aio.AioRpcError: the leases then lapse and the reaper ends them."""
    outcome = outcome_of(refusal)
    error = describe(refusal)
    if outcome is Outcome.RELEASE:
        await jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=list(leases)))
    elif outcome is Outcome.RETRY:
        await jobs.FailJobs(
            jq.FailJobsRequest(
                failures=[jq.JobFailure(lease=lease, error=error) for lease in leases]
            )
        )
    log.warning(
        "the store refused a job's call",
        extra={
            "outcome": outcome.value,
            "jobs": [lease.job_id for lease in leases],
            "error": error,
        },
    )
    return outcome
