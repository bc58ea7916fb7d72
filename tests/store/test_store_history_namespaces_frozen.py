from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from engram.store.v1 import store_pb2 as S
from grpc_helpers import error_of
from store_helpers import remember, rows


def test_history_is_ordered_and_paginated(store) -> None:
    memory = remember(store, "v1").memory
    for i in range(2, 8):
        store.ModifyMemories(
            S.ModifyMemoriesRequest(
                patches=[S.MemoryPatch(id=memory.id, content=f"v{i}")], reason=f"r{i}"
            )
        )
    events, token = [], ""
    while True:
        page = store.ListMemoryHistory(
            S.ListMemoryHistoryRequest(memory_id=memory.id, page_size=3, page_token=token)
        )
        events.extend(page.events)
        token = page.next_page_token
        if not token:
            break
    assert [e.new_content for e in events] == [f"v{i}" for i in range(1, 8)]
    assert [e.old_content for e in events[1:]] == [f"v{i}" for i in range(1, 7)]
    assert events[0].event_type == S.HISTORY_EVENT_TYPE_CREATED
    assert all(e.create_time.seconds > 0 and e.id for e in events)


def test_namespaces_are_sealed(store) -> None:
    memory = remember(store, "private to a", namespace="a").memory
    assert (
        error_of(lambda: store.GetMemory(S.GetMemoryRequest(namespace="b", id=memory.id)))[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        error_of(lambda: store.GetMemory(S.GetMemoryRequest(id=memory.id)))[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert store.ListMemories(S.ListMemoriesRequest(namespace="b")).memories == []
    assert (
        error_of(
            lambda: store.ListMemoryHistory(
                S.ListMemoryHistoryRequest(namespace="b", memory_id=memory.id)
            )
        )[0]
        == grpc.StatusCode.NOT_FOUND
    )
    [result] = store.ModifyMemories(
        S.ModifyMemoriesRequest(
            namespace="b", reason="r", patches=[S.MemoryPatch(id=memory.id, who="x")]
        )
    ).results
    assert result.status == S.PATCH_STATUS_NOT_FOUND
    assert (
        error_of(
            lambda: store.DeleteMemory(
                S.DeleteMemoryRequest(namespace="b", id=memory.id, reason="r")
            )
        )[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert store.GetMemory(S.GetMemoryRequest(namespace="a", id=memory.id)).memory.version == 1


MUTATIONS = {
    "remember": lambda s, i: s.Remember(S.RememberRequest(content="new")),
    "import": lambda s, i: s.ImportMemories(
        iter([S.ImportMemoriesRequest(items=[S.ImportItem(content="x")])])
    ),
    "modify": lambda s, i: s.ModifyMemories(
        S.ModifyMemoriesRequest(reason="r", patches=[S.MemoryPatch(id=i, who="x")])
    ),
    "delete": lambda s, i: s.DeleteMemory(S.DeleteMemoryRequest(id=i, reason="r")),
    "recover": lambda s, i: s.RecoverMemory(S.RecoverMemoryRequest(id=i, reason="r")),
    "forget": lambda s, i: s.ForgetMemories(
        S.ForgetMemoriesRequest(ids=[i], mode=S.FORGET_MODE_EXECUTE, reason="r")
    ),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_frozen_mutations_are_unavailable(make_config, start_store_server, name: str) -> None:
    seeding, store = start_store_server(make_config())
    memory_id = remember(store, "existing").memory.id
    seeding.stop()
    _, frozen = start_store_server(make_config(**{"memory.pipelineV2.mutationsFrozen": True}))
    code, reason, _ = error_of(lambda: MUTATIONS[name](frozen, memory_id))
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert frozen.GetMemory(S.GetMemoryRequest(id=memory_id)).memory.version == 1
    assert len(frozen.ListMemories(S.ListMemoriesRequest()).memories) == 1
    assert len(frozen.ForgetMemories(S.ForgetMemoriesRequest(ids=[memory_id])).candidates) == 1


def _lease(jobs: Any) -> jq.JobLease:
    [job] = jobs.LeaseJobs(
        jq.LeaseJobsRequest(
            job_type=job_pb2.JOB_TYPE_EXTRACT,
            max_jobs=1,
            holder=jq.LeaseHolder(worker_name="worker", instance_id="before"),
        )
    ).jobs
    return jq.JobLease(job_id=job.id, lease_token=job.lease_token)


# A frozen store is a shadow pipeline (seed 000): it still runs the job queue,
# so that extract jobs are leased and completed in shadow mode. Each call's
# outcome as the job queue reports it.
JOB_WRITES_TAKEN = {
    "lease extract": lambda jobs, lease: len(
        jobs.LeaseJobs(jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=5)).jobs
    ),
    "renew": lambda jobs, lease: list(
        jobs.RenewLeases(jq.RenewLeasesRequest(leases=[lease])).outcomes
    ),
    "fail": lambda jobs, lease: list(
        jobs.FailJobs(
            jq.FailJobsRequest(failures=[jq.JobFailure(lease=lease, error="boom")])
        ).outcomes
    ),
    "release": lambda jobs, lease: list(
        jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[lease])).outcomes
    ),
    "release_stale": lambda jobs, lease: (
        jobs.ReleaseStaleLeases(jq.ReleaseStaleLeasesRequest(lease_timeout_ms=1)).released_count
    ),
    "release_prior": lambda jobs, lease: (
        jobs.ReleasePriorInstanceLeases(
            jq.ReleasePriorInstanceLeasesRequest(
                holder=jq.LeaseHolder(worker_name="worker", instance_id="after")
            )
        ).released_count
    ),
}
OK = [jq.LEASE_OUTCOME_OK]
EXPECTED = {
    "lease extract": 1,  # the second memory's job; the first one's is held
    "renew": OK,
    "fail": OK,
    "release": OK,
    "release_stale": 1,
    "release_prior": 1,
}


def _frozen_after_a_lease(make_config: Any, start_store_server: Any) -> tuple[Any, jq.JobLease]:
    """A store with two memories (the pipeline on) whose first extract job was
    leased before the store restarted frozen: (job queue stub, that lease)."""
    on = {"memory.pipelineV2.enabled": True}
    seeding, store = start_store_server(make_config(**on))
    remember(store, "a memory with jobs")
    lease = _lease(job_queue_pb2_grpc.JobQueueServiceStub(_channel(seeding)))
    remember(store, "another memory with jobs")
    seeding.stop()
    frozen, _ = start_store_server(make_config(**on, **{"memory.pipelineV2.mutationsFrozen": True}))
    return job_queue_pb2_grpc.JobQueueServiceStub(_channel(frozen)), lease


@pytest.mark.parametrize("name", list(JOB_WRITES_TAKEN))
def test_a_frozen_store_takes_the_job_queues_writes(
    make_config, start_store_server, name: str
) -> None:
    """Was: UNAVAILABLE / MUTATIONS_FROZEN, so a frozen pipeline got no work at
    all instead of running in shadow mode (seed 000)."""
    jobs, lease = _frozen_after_a_lease(make_config, start_store_server)
    assert JOB_WRITES_TAKEN[name](jobs, lease) == EXPECTED[name]


def test_a_frozen_store_hands_out_no_embed_work(make_config, start_store_server) -> None:
    """An embed job's result is a vector write a frozen store refuses: leasing
    one is refused too, so no embedding is computed for nothing and no attempt
    is used."""
    config = make_config()
    jobs, _ = _frozen_after_a_lease(make_config, start_store_server)
    db = Path(config.storage.path)
    before = rows(db, "SELECT * FROM memory_jobs ORDER BY id")
    code, reason, _ = error_of(
        lambda: jobs.LeaseJobs(jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=1))
    )
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert [tuple(r) for r in rows(db, "SELECT * FROM memory_jobs ORDER BY id")] == [
        tuple(r) for r in before
    ]
    assert jobs.GetQueueStats(jq.GetQueueStatsRequest()).counts  # reads go on


def _channel(server: Any) -> grpc.Channel:
    """The store's internal listener (the job queue)."""
    return grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
