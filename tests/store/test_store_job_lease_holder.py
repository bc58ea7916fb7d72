"""JobQueueService: leases record their holder (worker name, instance id), and a
restarted worker takes back at once what its previous process held
(ReleasePriorInstanceLeases): fenced, nobody else's, and with the crashed
attempt counted, so a job that kills its worker every time ends dead.

Every test drives the real store over gRPC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from grpc_helpers import error_of
from recall_helpers import MODEL, Stack, count, vec
from services.storage.store.repository import WORKER_LOST
from store_helpers import rows

EMBED, EXTRACT = job_pb2.JOB_TYPE_EMBED, job_pb2.JOB_TYPE_EXTRACT
PENDING, LEASED, DEAD = (
    job_pb2.JOB_STATUS_PENDING,
    job_pb2.JOB_STATUS_LEASED,
    job_pb2.JOB_STATUS_DEAD,
)
OK, LOST = jq.LEASE_OUTCOME_OK, jq.LEASE_OUTCOME_LEASE_LOST


@pytest.fixture
def queue(recall_stack: Callable[..., Stack]) -> Stack:
    return recall_stack(
        {
            "providers.embedding.kind": "ollama",
            "providers.embedding.model": MODEL,
            "memory.pipelineV2.enabled": True,  # so that Remember queues extract jobs
        },
        search=False,
    )


def holder(worker: str, instance: str) -> jq.LeaseHolder:
    return jq.LeaseHolder(worker_name=worker, instance_id=instance)


def lease(
    stack: Stack, by: jq.LeaseHolder | None, job_type: int = EMBED, max_jobs: int = 500
) -> list[jq.Job]:
    request = jq.LeaseJobsRequest(job_type=job_type, max_jobs=max_jobs)
    if by is not None:
        request.holder.CopyFrom(by)
    return list(stack.jobs.LeaseJobs(request).jobs)


def release_prior(stack: Stack, by: jq.LeaseHolder) -> int:
    request = jq.ReleasePriorInstanceLeasesRequest(holder=by)
    return stack.jobs.ReleasePriorInstanceLeases(request).released_count


def held(job: jq.Job) -> jq.JobLease:
    return jq.JobLease(job_id=job.id, lease_token=job.lease_token)


def complete(stack: Stack, jobs: list[jq.Job]) -> list[int]:
    response = stack.jobs.CompleteEmbedJobs(
        jq.CompleteEmbedJobsRequest(
            model=MODEL,
            results=[
                jq.EmbedResult(lease=held(j), content_hash=j.content_hash, vector=vec(0.5))
                for j in jobs
            ],
        )
    )
    return list(response.outcomes)


def test_a_restarted_worker_gets_its_previous_instances_jobs_back_at_once(queue: Stack) -> None:
    for i in range(3):
        queue.remember(f"in flight when the worker died {i}")
    crashed = lease(queue, holder("host-a:50053/embed", "first-process"), max_jobs=2)
    assert [j.attempts for j in crashed] == [1, 1]

    restarted = holder("host-a:50053/embed", "second-process")
    assert release_prior(queue, restarted) == 2
    stats = queue.stats()
    assert (count(stats, EMBED, PENDING), count(stats, EMBED, LEASED)) == (3, 0)

    again = lease(queue, restarted)
    assert {j.id for j in crashed} <= {j.id for j in again}
    attempts = {j.id: j.attempts for j in again}
    assert [attempts[j.id] for j in crashed] == [2, 2], "the crashed attempt is counted"
    assert not {j.lease_token for j in crashed} & {j.lease_token for j in again}
    assert complete(queue, again) == [OK, OK, OK]
    assert queue.stats().indexed_memory_count == 3


def test_the_previous_instances_tokens_no_longer_complete_anything(queue: Stack) -> None:
    queue.remember("the old process is somehow still running")
    [old] = lease(queue, holder("w/embed", "old"))
    assert release_prior(queue, holder("w/embed", "new")) == 1

    assert complete(queue, [old]) == [LOST]
    renewed = queue.jobs.RenewLeases(jq.RenewLeasesRequest(leases=[held(old)]))
    assert list(renewed.outcomes) == [LOST]
    failed = queue.jobs.FailJobs(
        jq.FailJobsRequest(failures=[jq.JobFailure(lease=held(old), error="late")])
    )
    assert (list(failed.outcomes), failed.dead_count) == ([LOST], 0)
    released = queue.jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[held(old)]))
    assert list(released.outcomes) == [LOST]
    stats = queue.stats()
    assert (count(stats, EMBED, PENDING), stats.indexed_memory_count) == (1, 0)


def test_other_workers_anonymous_leases_and_the_callers_own_leases_are_untouched(
    queue: Stack,
) -> None:
    for i in range(5):
        queue.remember(f"memory {i}")
    [crashed] = lease(queue, holder("replica-a/embed", "a1"), max_jobs=1)
    [other_replica] = lease(queue, holder("replica-b/embed", "b1"), max_jobs=1)
    [anonymous] = lease(queue, None, max_jobs=1)
    [own] = lease(queue, holder("replica-a/embed", "a2"), max_jobs=1)
    [other_kind] = lease(queue, holder("replica-a/extract", "a1"), EXTRACT, max_jobs=1)

    assert release_prior(queue, holder("replica-a/embed", "a2")) == 1
    assert release_prior(queue, holder("replica-a/embed", "a2")) == 0, "nothing left to release"

    assert complete(queue, [crashed]) == [LOST]
    assert complete(queue, [other_replica, anonymous, own]) == [OK, OK, OK]
    renewed = queue.jobs.RenewLeases(jq.RenewLeasesRequest(leases=[held(other_kind)]))
    assert list(renewed.outcomes) == [OK]
    assert count(queue.stats(), EXTRACT, LEASED) == 1


def test_a_job_that_crashes_its_worker_every_time_ends_dead_with_why(queue: Stack) -> None:
    """Issue 34: it was leased 6 times with a maximum of 3 and never dead."""
    queue.remember("killed every time")
    for n in range(3):  # max attempts (workerMaxRetries 3)
        [job] = lease(queue, holder("w/embed", f"process-{n}"))
        assert (job.attempts, job.max_attempts) == (n + 1, 3)
        released = queue.jobs.ReleasePriorInstanceLeases(
            jq.ReleasePriorInstanceLeasesRequest(holder=holder("w/embed", f"process-{n + 1}"))
        )
        assert (released.released_count, released.dead_count) == (1, 1 if n == 2 else 0)
    stats = queue.stats()
    assert (count(stats, EMBED, DEAD), count(stats, EMBED, PENDING)) == (1, 0)
    assert lease(queue, holder("w/embed", "process-4")) == [], "never leased a fourth time"
    # no RPC lists a job's error: the row itself keeps why it died
    [(attempts, error)] = rows(
        queue.config.storage.path,
        "SELECT attempts, error FROM memory_jobs WHERE job_type = 'embed'",
    )
    assert (attempts, error) == (3, WORKER_LOST)


@pytest.mark.parametrize(
    ("bad", "fields"),
    [
        (holder("", ""), ["holder.worker_name", "holder.instance_id"]),
        (holder("w" * 201, "i"), ["holder.worker_name"]),
        (holder("w", "i" * 101), ["holder.instance_id"]),
    ],
)
def test_bad_holders_are_invalid_name_every_field_and_change_nothing(
    queue: Stack, bad: jq.LeaseHolder, fields: list[str]
) -> None:
    queue.remember("untouched")
    [job] = lease(queue, holder("w/embed", "old"))
    calls: list[Callable[[], Any]] = [
        lambda: release_prior(queue, bad),
        lambda: queue.jobs.ReleasePriorInstanceLeases(jq.ReleasePriorInstanceLeasesRequest()),
        lambda: lease(queue, bad, EXTRACT),
    ]
    expected = [fields, ["holder.worker_name", "holder.instance_id"], fields]
    for call, want in zip(calls, expected, strict=True):
        code, _, named = error_of(call)
        assert (code, named) == (grpc.StatusCode.INVALID_ARGUMENT, want)
    stats = queue.stats()
    assert (count(stats, EMBED, LEASED), count(stats, EXTRACT, PENDING)) == (1, 1)
    assert complete(queue, [job]) == [OK]
