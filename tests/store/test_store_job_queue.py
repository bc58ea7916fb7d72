"""JobQueueService (on the store server): leasing with tokens, completion that
indexes vectors, failure and retry, release, stale-lease reaping, the index
model, and the vector index following deletes, recovers and content changes.

Every test drives the real store over gRPC; vectors are chosen by the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import admin_pb2, admin_pb2_grpc, dedup_pb2, dedup_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import DIM, MODEL, Stack, count, vec
from services.storage.store.repository import LEASE_EXPIRED
from store_helpers import rows

EMBED, EXTRACT = job_pb2.JOB_TYPE_EMBED, job_pb2.JOB_TYPE_EXTRACT
NEAR_DUPLICATE = job_pb2.JOB_TYPE_NEAR_DUPLICATE
PENDING, LEASED, COMPLETED, DEAD = (
    job_pb2.JOB_STATUS_PENDING,
    job_pb2.JOB_STATUS_LEASED,
    job_pb2.JOB_STATUS_COMPLETED,
    job_pb2.JOB_STATUS_DEAD,
)
OK, LOST = jq.LEASE_OUTCOME_OK, jq.LEASE_OUTCOME_LEASE_LOST
# The pipeline on: Remember queues an extract job only then.
BASE = {
    "providers.embedding.kind": "ollama",
    "providers.embedding.model": MODEL,
    "memory.pipelineV2.enabled": True,
}


@pytest.fixture
def queue(recall_stack: Callable[..., Stack]) -> Stack:
    """A store whose index model is MODEL (the store itself never calls the provider)."""
    return recall_stack(BASE, search=False)


def lease(stack: Stack, job_type: int = EMBED, max_jobs: int = 500, **kw: Any) -> list[jq.Job]:
    return list(
        stack.jobs.LeaseJobs(jq.LeaseJobsRequest(job_type=job_type, max_jobs=max_jobs, **kw)).jobs
    )


def held(job: jq.Job, token: str | None = None) -> jq.JobLease:
    return jq.JobLease(job_id=job.id, lease_token=job.lease_token if token is None else token)


def complete(
    stack: Stack,
    jobs: list[jq.Job],
    vectors: list[list[float]] | None = None,
    *,
    model: str = MODEL,
    tokens: list[str] | None = None,
) -> list[int]:
    vectors = vectors or [vec(0.5)] * len(jobs)
    response = stack.jobs.CompleteEmbedJobs(
        jq.CompleteEmbedJobsRequest(
            model=model,
            results=[
                jq.EmbedResult(
                    lease=held(j, tokens[i] if tokens else None),
                    content_hash=j.content_hash,
                    vector=v,
                )
                for i, (j, v) in enumerate(zip(jobs, vectors, strict=True))
            ],
        )
    )
    return list(response.outcomes)


def fail(stack: Stack, jobs: list[jq.Job], error: str = "boom") -> jq.FailJobsResponse:
    return stack.jobs.FailJobs(
        jq.FailJobsRequest(failures=[jq.JobFailure(lease=held(j), error=error) for j in jobs])
    )


def release(stack: Stack, jobs: list[jq.Job], token: str | None = None) -> list[int]:
    return list(
        stack.jobs.ReleaseJobs(
            jq.ReleaseJobsRequest(leases=[held(j, token) for j in jobs])
        ).outcomes
    )


# ---- remember enqueues, lease hands out ----------------------------------------------


def test_remember_enqueues_one_embed_and_one_extract_job(queue: Stack) -> None:
    before = queue.stats()
    assert not before.HasField("oldest_pending_create_time")
    memory = queue.remember("Alice prefers green tea")
    stats = queue.stats()
    assert count(stats, EMBED, PENDING) == 1
    assert count(stats, EXTRACT, PENDING) == 1
    assert (stats.live_memory_count, stats.indexed_memory_count) == (1, 0)
    assert stats.HasField("oldest_pending_create_time")
    assert stats.oldest_pending_create_time.ToDatetime() <= memory.create_time.ToDatetime()
    assert stats.index_model == MODEL
    assert stats.index_dimensions == 0, "no vector yet"
    # a duplicate remember writes nothing, so queues nothing
    queue.remember("alice prefers green tea.")
    assert count(queue.stats(), EMBED, PENDING) == 1


def test_lease_hands_out_the_oldest_jobs_with_tokens_and_counts_the_attempt(queue: Stack) -> None:
    memories = [queue.remember(f"memory number {i}") for i in range(3)]
    first = lease(queue, max_jobs=2)
    assert [j.memory_id for j in first] == [m.id for m in memories[:2]]
    for job, memory in zip(first, memories, strict=False):
        assert job.job_type == EMBED
        assert job.namespace == "default"
        assert (job.attempts, job.max_attempts) == (1, 3)
        assert job.content == memory.content
        assert job.content_hash == memory.content_hash
        assert job.lease_token
    assert first[0].lease_token != first[1].lease_token

    second = lease(queue, max_jobs=500)
    assert [j.memory_id for j in second] == [memories[2].id], "leased jobs are not handed out again"
    assert lease(queue) == []
    stats = queue.stats()
    assert (count(stats, EMBED, LEASED), count(stats, EMBED, PENDING)) == (3, 0)
    assert count(stats, EXTRACT, PENDING) == 3, "leasing one type leaves the others alone"


def test_extract_jobs_are_leased_separately_with_the_memory_content(queue: Stack) -> None:
    memory = queue.remember("We decided to deploy on Tuesdays")
    [job] = lease(queue, EXTRACT)
    assert (job.job_type, job.memory_id, job.content) == (EXTRACT, memory.id, memory.content)
    assert len(lease(queue, EMBED)) == 1


def test_lease_can_be_limited_to_namespaces(queue: Stack) -> None:
    queue.remember("in a", namespace="team-a")
    b = queue.remember("in b", namespace="team-b")
    queue.remember("in c", namespace="team-c")
    jobs = lease(queue, namespaces=["team-b"])
    assert [(j.namespace, j.memory_id) for j in jobs] == [("team-b", b.id)]
    assert {j.namespace for j in lease(queue)} == {"team-a", "team-c"}


def test_embed_job_of_a_deleted_memory_is_completed_without_being_handed_out(
    queue: Stack,
) -> None:
    memory = queue.remember("soon gone")
    queue.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=memory.id, reason="test"))
    assert lease(queue) == []
    stats = queue.stats()
    assert count(stats, EMBED, COMPLETED) == 1
    assert count(stats, EMBED, PENDING) == 0


# ---- completing --------------------------------------------------------------------------


def test_completing_with_the_lease_token_stores_the_vector_and_indexes_the_memory(
    queue: Stack,
) -> None:
    queue.remember("first")
    queue.remember("second")
    jobs = lease(queue)
    assert complete(queue, jobs, [vec(0.9), vec(0.1)]) == [OK, OK]
    stats = queue.stats()
    assert (stats.indexed_memory_count, stats.live_memory_count) == (2, 2)
    assert (stats.index_model, stats.index_dimensions) == (MODEL, DIM)
    assert count(stats, EMBED, COMPLETED) == 2
    assert count(stats, EMBED, LEASED) == 0
    # a completed job's token is spent
    assert complete(queue, jobs[:1]) == [LOST]


def test_a_wrong_token_loses_the_lease_and_writes_nothing(queue: Stack) -> None:
    queue.remember("one")
    [job] = lease(queue)
    assert complete(queue, [job], tokens=["not-the-token"]) == [LOST]
    stats = queue.stats()
    assert stats.indexed_memory_count == 0
    assert stats.index_dimensions == 0
    assert count(stats, EMBED, LEASED) == 1
    # results are per job: the right token still works
    assert complete(queue, [job]) == [OK]
    assert queue.stats().indexed_memory_count == 1


def test_outcomes_are_per_result_in_request_order(queue: Stack) -> None:
    for i in range(3):
        queue.remember(f"batch item {i}")
    jobs = lease(queue)
    tokens = [jobs[0].lease_token, "stale", jobs[2].lease_token]
    assert complete(queue, jobs, tokens=tokens) == [OK, LOST, OK]
    assert queue.stats().indexed_memory_count == 2


def test_a_vector_of_another_model_is_refused(queue: Stack) -> None:
    queue.remember("one")
    [job] = lease(queue)
    code, reason, _ = error_of(lambda: complete(queue, [job], model="some-other-model"))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "EMBEDDING_MODEL_MISMATCH")
    stats = queue.stats()
    assert stats.indexed_memory_count == 0
    assert count(stats, EMBED, LEASED) == 1, "the job is untouched"
    assert complete(queue, [job]) == [OK]


def test_a_vector_of_other_dimensions_is_refused(queue: Stack) -> None:
    queue.remember("one")
    queue.remember("two")
    jobs = lease(queue)
    assert complete(queue, jobs[:1], [vec(0.5)]) == [OK]
    code, reason, _ = error_of(lambda: complete(queue, jobs[1:], [[0.5] * (DIM * 2)]))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "EMBEDDING_DIMENSIONS_MISMATCH")
    stats = queue.stats()
    assert (stats.indexed_memory_count, stats.index_dimensions) == (1, DIM)
    assert count(stats, EMBED, LEASED) == 1


@pytest.mark.parametrize("dimensions", [12, 3])
def test_any_vector_length_is_either_indexed_or_refused_as_invalid(
    queue: Stack, dimensions: int
) -> None:
    """The contract lists no dimension rule: a provider with, say, 12-d vectors must
    not produce INTERNAL (which leaves the job leased and the worker retrying)."""
    queue.remember("odd sized")
    [job] = lease(queue)
    try:
        outcomes = complete(queue, [job], [[1.0] + [0.5] * (dimensions - 1)])
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.details()
    else:
        assert outcomes == [OK]
        assert queue.stats().indexed_memory_count == 1


@pytest.mark.parametrize(
    ("results", "model", "field"),
    [
        ([[0.1] * DIM], "", "model"),
        ([[]], MODEL, "results[0].vector"),
        ([[0.0] * DIM], MODEL, "results[0].vector"),
        ([[float("nan")] * DIM], MODEL, "results[0].vector"),
        ([[float("inf")] + [0.0] * (DIM - 1)], MODEL, "results[0].vector"),
        ([[0.1] * DIM] * 501, MODEL, "results"),
        ([[0.1] * DIM, [0.1] * (DIM * 2)], MODEL, "results"),
    ],
    ids=["empty-model", "empty-vector", "zero-vector", "nan", "inf", "too-many", "mixed-sizes"],
)
def test_bad_embed_results_are_invalid_and_write_nothing(
    queue: Stack, results: list[list[float]], model: str, field: str
) -> None:
    queue.remember("one")
    [job] = lease(queue)
    request = jq.CompleteEmbedJobsRequest(
        model=model,
        results=[
            jq.EmbedResult(lease=held(job), content_hash=job.content_hash, vector=v)
            for v in results
        ],
    )
    code, _, fields = error_of(lambda: queue.jobs.CompleteEmbedJobs(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in fields
    stats = queue.stats()
    assert (stats.indexed_memory_count, count(stats, EMBED, LEASED)) == (0, 1)


# ---- failing, releasing, reaping ------------------------------------------------------


def test_failed_jobs_wait_for_their_retry_time_then_die_after_max_attempts(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({**BASE, "memory.pipelineV2.workerMaxRetries": 2}, search=False)
    stack.remember("flaky")
    [job] = lease(stack)
    assert job.max_attempts == 2
    response = fail(stack, [job], "provider rejected it")
    assert (list(response.outcomes), response.dead_count) == ([OK], 0)
    # back to pending, but with a retry time in the future (backoff starts at 1 s)
    assert lease(stack) == []
    stats = stack.stats()
    assert (count(stats, EMBED, PENDING), count(stats, EMBED, LEASED)) == (1, 0)
    # the old token is spent
    assert list(fail(stack, [job]).outcomes) == [LOST]

    deadline = time.monotonic() + 15
    retried: list[jq.Job] = []
    while not retried and time.monotonic() < deadline:
        time.sleep(0.1)
        retried = lease(stack)
    assert retried, "the job became due again after its backoff"
    assert (retried[0].id, retried[0].attempts) == (job.id, 2)

    response = fail(stack, retried, "still rejected")
    assert (list(response.outcomes), response.dead_count) == ([OK], 1)
    stats = stack.stats()
    assert count(stats, EMBED, DEAD) == 1
    assert count(stats, EMBED, PENDING) == 0
    assert lease(stack) == []


def test_release_returns_jobs_to_pending_without_using_an_attempt(queue: Stack) -> None:
    queue.remember("provider down")
    for _ in range(5):  # more rounds than max attempts
        [job] = lease(queue)
        assert job.attempts == 1
        assert release(queue, [job]) == [OK]
        assert count(queue.stats(), EMBED, DEAD) == 0
    [job] = lease(queue)
    assert release(queue, [job], token="wrong") == [LOST]
    assert count(queue.stats(), EMBED, LEASED) == 1
    assert release(queue, [job]) == [OK]
    assert complete(queue, [job]) == [LOST], "a released lease cannot complete"


def test_renew_keeps_only_current_leases(queue: Stack) -> None:
    queue.remember("long job")
    [job] = lease(queue)
    renew = queue.jobs.RenewLeases(
        jq.RenewLeasesRequest(leases=[held(job), held(job, "someone-else")])
    )
    assert list(renew.outcomes) == [OK, LOST]


def test_stale_leases_are_released_and_their_tokens_stop_working(queue: Stack) -> None:
    queue.remember("abandoned by a crashed worker")
    [job] = lease(queue)
    time.sleep(0.05)
    released = queue.jobs.ReleaseStaleLeases(jq.ReleaseStaleLeasesRequest(lease_timeout_ms=1))
    assert released.released_count == 1
    stats = queue.stats()
    assert (count(stats, EMBED, PENDING), count(stats, EMBED, LEASED)) == (1, 0)
    assert complete(queue, [job]) == [LOST]
    assert list(queue.jobs.RenewLeases(jq.RenewLeasesRequest(leases=[held(job)])).outcomes) == [
        LOST
    ]
    assert queue.stats().indexed_memory_count == 0
    [again] = lease(queue)
    assert again.id == job.id
    assert again.lease_token != job.lease_token
    assert complete(queue, [again]) == [OK]


def test_a_job_that_always_outlives_its_lease_ends_dead_with_why(queue: Stack) -> None:
    """Issue 34: the reaper used to give such a job back as new, forever."""
    queue.remember("every attempt hangs past the lease")
    for n in range(3):  # max attempts (workerMaxRetries 3)
        [job] = lease(queue)
        assert (job.attempts, job.max_attempts) == (n + 1, 3)
        time.sleep(0.01)
        released = queue.jobs.ReleaseStaleLeases(jq.ReleaseStaleLeasesRequest(lease_timeout_ms=1))
        assert (released.released_count, released.dead_count) == (1, 1 if n == 2 else 0)
        assert complete(queue, [job]) == [LOST]
    stats = queue.stats()
    assert (count(stats, EMBED, DEAD), count(stats, EMBED, PENDING)) == (1, 0)
    assert lease(queue) == [], "never leased a fourth time"
    [(attempts, error)] = rows(
        queue.config.storage.path,
        "SELECT attempts, error FROM memory_jobs WHERE job_type = 'embed'",
    )
    assert (attempts, error) == (3, LEASE_EXPIRED)
    # the dead letter is the operator's: a requeue gives it its attempts back
    requeued = admin_pb2_grpc.StoreAdminServiceStub(queue.jobs_channel).RequeueDeadJobs(
        admin_pb2.RequeueDeadJobsRequest()
    )
    assert requeued.requeued == 1
    [job] = lease(queue)
    assert job.attempts == 1


def test_the_default_stale_lease_timeout_spares_fresh_leases(queue: Stack) -> None:
    queue.remember("in progress")
    lease(queue)
    released = queue.jobs.ReleaseStaleLeases(jq.ReleaseStaleLeasesRequest(lease_timeout_ms=0))
    assert released.released_count == 0
    assert count(queue.stats(), EMBED, LEASED) == 1


# ---- the vector index follows the memories ----------------------------------------------


def test_content_changed_during_the_lease_is_not_indexed_with_the_stale_vector(
    queue: Stack,
) -> None:
    memory = queue.remember("the old wording")
    [job] = lease(queue)
    patched = queue.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            reason="reworded",
            patches=[store_pb2.MemoryPatch(id=memory.id, content="the new wording")],
        )
    )
    assert patched.results[0].content_changed
    assert complete(queue, [job]) == [OK]
    stats = queue.stats()
    assert stats.indexed_memory_count == 0, "the vector describes content the memory lost"
    assert count(stats, EMBED, PENDING) == 1, "a new embed job was queued"
    [fresh] = lease(queue)
    assert (fresh.memory_id, fresh.content) == (memory.id, "the new wording")
    assert fresh.content_hash != job.content_hash
    assert complete(queue, [fresh]) == [OK]
    assert queue.stats().indexed_memory_count == 1


def test_content_changed_after_indexing_leaves_the_index_until_reembedded(queue: Stack) -> None:
    memory = queue.remember("version one")
    queue.embed_pending(lambda _text: vec(0.5))
    assert queue.stats().indexed_memory_count == 1
    queue.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            reason="reworded", patches=[store_pb2.MemoryPatch(id=memory.id, content="version two")]
        )
    )
    stats = queue.stats()
    assert stats.indexed_memory_count == 0
    assert count(stats, EMBED, PENDING) == 1
    # changing it back finds the stored vector of that content: indexed at once
    queue.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            reason="reverted", patches=[store_pb2.MemoryPatch(id=memory.id, content="version one")]
        )
    )
    assert queue.stats().indexed_memory_count == 1


def test_content_its_namespace_embedded_before_is_indexed_at_once_without_a_new_embed_job(
    queue: Stack,
) -> None:
    first = queue.remember("Shared wisdom about caching", namespace="team-a")
    assert queue.embed_pending(lambda _text: vec(0.7)) == 1
    queue.store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace="team-a", id=first.id, reason="obsolete")
    )
    second = queue.remember("Shared wisdom about caching", namespace="team-a")
    stats = queue.stats()
    assert (stats.indexed_memory_count, stats.live_memory_count) == (1, 1)
    assert count(stats, EMBED, PENDING) == 0
    assert count(stats, EMBED, COMPLETED) == 1
    assert count(stats, EXTRACT, PENDING) == 2, "extraction still runs per memory"
    # ImportMemories takes the same shortcut
    queue.store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace="team-a", id=second.id, reason="obsolete")
    )
    queue.store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    namespace="team-a",
                    items=[
                        store_pb2.ImportItem(content="Shared wisdom about caching"),
                        store_pb2.ImportItem(content="Brand new content"),
                    ],
                )
            ]
        )
    )
    stats = queue.stats()
    assert stats.indexed_memory_count == 1
    assert count(stats, EMBED, PENDING) == 1


def test_content_another_namespace_embedded_waits_for_its_own_embed_job(queue: Stack) -> None:
    """A vector never serves, nor skips work for, another namespace (issue 11)."""
    queue.remember("Shared wisdom about caching", namespace="team-a")
    assert queue.embed_pending(lambda _text: vec(0.7)) == 1
    queue.remember("Shared wisdom about caching", namespace="team-b")
    queue.store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    namespace="team-c",
                    items=[store_pb2.ImportItem(content="Shared wisdom about caching")],
                )
            ]
        )
    )
    stats = queue.stats()
    assert (stats.indexed_memory_count, stats.live_memory_count) == (1, 3)
    assert count(stats, EMBED, PENDING) == 2
    assert queue.embed_pending(lambda _text: vec(0.7), namespaces=["team-b", "team-c"]) == 2
    assert queue.stats().indexed_memory_count == 3


def test_soft_delete_leaves_the_index_at_once_and_recover_returns_to_it(queue: Stack) -> None:
    keep = queue.remember("keep me")
    gone = queue.remember("delete me")
    queue.embed_pending(lambda _text: vec(0.5))
    assert queue.stats().indexed_memory_count == 2
    queue.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=gone.id, reason="obsolete"))
    stats = queue.stats()
    assert (stats.indexed_memory_count, stats.live_memory_count) == (1, 1)
    queue.store.RecoverMemory(store_pb2.RecoverMemoryRequest(id=gone.id, reason="mistake"))
    stats = queue.stats()
    assert (stats.indexed_memory_count, stats.live_memory_count) == (2, 2)
    assert count(stats, EMBED, PENDING) == 0, "the stored vector is reused"
    assert keep.id != gone.id


def test_changing_the_embedding_model_reembeds_and_never_mixes_models(
    recall_stack: Callable[..., Stack],
) -> None:
    first = recall_stack({**BASE, "providers.embedding.model": "model-one"}, search=False)
    first.remember("alpha memory")
    first.remember("beta memory")
    assert first.embed_pending(lambda _text: vec(0.5), model="model-one") == 2
    assert first.stats().indexed_memory_count == 2
    first.store_thread.stop()

    second = recall_stack({**BASE, "providers.embedding.model": "model-two"}, search=False)
    stats = second.stats()
    assert (stats.index_model, stats.indexed_memory_count) == ("model-two", 0)
    assert stats.index_dimensions == 0
    assert count(stats, EMBED, PENDING) == 2, "every live memory is queued for re-embedding"
    jobs = lease(second)
    code, reason, _ = error_of(lambda: complete(second, jobs, model="model-one"))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "EMBEDDING_MODEL_MISMATCH")
    assert second.stats().indexed_memory_count == 0
    assert complete(second, jobs, [[0.3] * 16, [0.2] * 16], model="model-two") == [OK, OK]
    stats = second.stats()
    assert (stats.indexed_memory_count, stats.index_dimensions) == (2, 16)
    second.store_thread.stop()

    # back to the first model: its stored vectors refill the index, nothing to embed
    third = recall_stack({**BASE, "providers.embedding.model": "model-one"}, search=False)
    stats = third.stats()
    assert (stats.index_model, stats.index_dimensions) == ("model-one", DIM)
    assert stats.indexed_memory_count == 2
    assert count(stats, EMBED, PENDING) == 0


def test_a_store_with_embeddings_off_queues_nothing_new_on_restart(
    recall_stack: Callable[..., Stack],
) -> None:
    first = recall_stack(BASE, search=False)
    first.remember("some memory")
    first.embed_pending(lambda _text: vec(0.5))
    first.store_thread.stop()
    second = recall_stack({"providers.embedding.kind": "none"}, search=False)
    stats = second.stats()
    assert count(stats, EMBED, PENDING) == 0
    assert (stats.live_memory_count, stats.indexed_memory_count) == (1, 1)


# ---- long-polling leases -----------------------------------------------------------------


def _long_poll(stack: Stack, seconds: int, **kw: Any) -> Any:
    """A LeaseJobs that waits up to `seconds`, started on a thread of its own."""
    return stack.jobs.LeaseJobs.future(
        jq.LeaseJobsRequest(job_type=EMBED, max_jobs=10, wait=Duration(seconds=seconds), **kw),
        timeout=seconds + 30,
    )


def test_a_long_polling_lease_answers_with_a_job_remembered_while_it_waits(queue: Stack) -> None:
    waiting = _long_poll(queue, 60)
    wait_until_waiting(queue, waiting)
    memory = queue.remember("arrives during the long poll")
    jobs = waiting.result().jobs
    assert [(j.memory_id, j.content) for j in jobs] == [(memory.id, "arrives during the long poll")]
    assert count(queue.stats(), EMBED, LEASED) == 1


def test_a_long_poll_for_other_namespaces_or_types_keeps_waiting(queue: Stack) -> None:
    waiting = _long_poll(queue, 60, namespaces=["theirs"])
    wait_until_waiting(queue, waiting)
    queue.remember("mine", namespace="mine")
    extract = lease(queue, EXTRACT)  # a commit that queues nothing for the poll
    assert len(extract) == 1 and not waiting.done()
    theirs = queue.remember("theirs", namespace="theirs")
    assert [j.memory_id for j in waiting.result().jobs] == [theirs.id]
    assert count(queue.stats(), EMBED, PENDING) == 1  # "mine" is still waiting


def test_a_long_poll_with_nothing_to_do_answers_empty_when_its_wait_ends(queue: Stack) -> None:
    response = queue.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=EMBED, max_jobs=10, wait=Duration(nanos=200_000_000))
    )
    assert list(response.jobs) == []


def test_a_due_job_is_leased_at_once_even_when_a_wait_is_given(queue: Stack) -> None:
    memory = queue.remember("already due")
    jobs = _long_poll(queue, 60).result(timeout=30).jobs  # would time out if it waited
    assert [j.memory_id for j in jobs] == [memory.id]


def test_stopping_the_store_answers_its_long_polls(queue: Stack) -> None:
    waiting = _long_poll(queue, 60)
    wait_until_waiting(queue, waiting)
    queue.store_thread.stop()
    try:
        assert list(waiting.result().jobs) == []
    except grpc.RpcError as exc:  # the listener closed first; never the 90 s deadline
        assert exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED


def wait_until_waiting(stack: Stack, call: Any) -> None:
    """Give the long poll time to reach the store (two writes through the one
    writer). A test passes the same if the poll arrives later: it then finds at
    once what the test queued, or the store already stopped."""
    stack.jobs.RenewLeases(jq.RenewLeasesRequest(leases=[]))
    stack.jobs.RenewLeases(jq.RenewLeasesRequest(leases=[]))
    assert not call.done()


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"job_type": EMBED, "max_jobs": 0}, "max_jobs"),
        ({"job_type": EMBED, "max_jobs": 501}, "max_jobs"),
        ({"job_type": EMBED, "max_jobs": -1}, "max_jobs"),
        ({"job_type": job_pb2.JOB_TYPE_UNSPECIFIED, "max_jobs": 10}, "job_type"),
        ({"job_type": 42, "max_jobs": 10}, "job_type"),
        (
            {"job_type": EMBED, "max_jobs": 10, "namespaces": ["ok", "bad namespace!"]},
            "namespaces[1]",
        ),
        ({"job_type": EMBED, "max_jobs": 10, "wait": Duration(seconds=-1)}, "wait"),
        ({"job_type": EMBED, "max_jobs": 10, "wait": Duration(seconds=61)}, "wait"),
        ({"job_type": EMBED, "max_jobs": 10, "wait": Duration(seconds=1, nanos=-5)}, "wait"),
    ],
)
def test_bad_lease_requests_are_invalid_and_name_the_field(
    queue: Stack, request_fields: dict[str, Any], field: str
) -> None:
    queue.remember("untouched")
    code, _, fields = error_of(lambda: queue.jobs.LeaseJobs(jq.LeaseJobsRequest(**request_fields)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert fields == [field]
    assert count(queue.stats(), EMBED, PENDING) == 1


def test_oversized_batches_and_negative_timeouts_are_invalid(queue: Stack) -> None:
    leases = [jq.JobLease(job_id=f"j{i}", lease_token="t") for i in range(501)]
    for call, field in [
        (lambda: queue.jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=leases)), "leases"),
        (lambda: queue.jobs.RenewLeases(jq.RenewLeasesRequest(leases=leases)), "leases"),
        (
            lambda: queue.jobs.FailJobs(
                jq.FailJobsRequest(failures=[jq.JobFailure(lease=x, error="e") for x in leases])
            ),
            "failures",
        ),
        (
            lambda: queue.jobs.ReleaseStaleLeases(
                jq.ReleaseStaleLeasesRequest(lease_timeout_ms=-1)
            ),
            "lease_timeout_ms",
        ),
    ]:
        code, _, fields = error_of(call)
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, [field])


def test_near_duplicate_checks_are_queued_when_dedup_is_on_and_finish_under_their_lease(
    recall_stack: Callable[..., Stack],
) -> None:
    """The store queues a check per embedded memory that may merge; deciding it
    (ResolveNearDuplicate with the lease) completes the job in the same
    transaction, and a lease that is not held writes nothing."""
    stack = recall_stack({**BASE, "dedup.enabled": True}, search=False)
    dedup = dedup_pb2_grpc.DedupServiceStub(stack.jobs_channel)
    older = stack.remember("User prefers dark mode")
    newer = stack.remember("The user prefers dark mode")
    stack.remember("a passing thought", ttl={"seconds": 3600})  # has an expiry: never checked
    assert lease(stack, NEAR_DUPLICATE) == []  # nothing before the vectors are in
    assert complete(stack, lease(stack)) == [OK] * 3
    checks = {j.memory_id: j for j in lease(stack, NEAR_DUPLICATE)}
    assert set(checks) == {older.id, newer.id}

    def resolve(lease: jq.JobLease) -> Any:
        return dedup.ResolveNearDuplicate(
            dedup_pb2.ResolveNearDuplicateRequest(
                survivor_id=older.id,
                duplicate_id=newer.id,
                action=dedup_pb2.NEAR_DUPLICATE_ACTION_MERGE,
                similarity=0.99,
                lease=lease,
            )
        )

    lost = resolve(held(checks[newer.id], "not-the-token"))
    assert (lost.lease_lost, lost.applied) == (True, False)
    get = store_pb2.GetMemoryRequest
    assert not stack.store.GetMemory(get(id=newer.id)).memory.deleted
    assert resolve(held(checks[newer.id])).applied
    assert stack.store.GetMemory(get(id=newer.id)).memory.deleted
    assert resolve(held(checks[newer.id])).lease_lost  # completed with the merge
    done = dedup.CompleteNearDuplicateJobs(
        dedup_pb2.CompleteNearDuplicateJobsRequest(
            leases=[held(checks[older.id]), held(checks[newer.id])]
        )
    )
    assert list(done.outcomes) == [OK, LOST]
    embed = stack.remember("another thought")
    [embed_job] = lease(stack)
    other_type = dedup.CompleteNearDuplicateJobs(
        dedup_pb2.CompleteNearDuplicateJobsRequest(leases=[held(embed_job)])
    )
    assert list(other_type.outcomes) == [LOST]  # an embed job is not finished this way
    assert embed.id == embed_job.memory_id
