"""An embedding provider that goes away: nothing is lost and nothing is burnt.

The scripted Ollama server is stopped (connections refused). Recall still
answers from keywords and says it is degraded; the pipeline hands the leased
jobs back without using attempts, reports the provider as degraded, and once
the server listens again on the same port the jobs complete and everything
returns to normal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engram.common.v1 import job_pb2, provider_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2 as jq
from http_fakes import VectorBook, ollama_server
from recall_helpers import QUERY_VECTOR, Stack, count, fake_embedding_overrides, vec, wait_for

EMBED = job_pb2.JOB_TYPE_EMBED
CONTENTS = ["zebra at the waterhole", "zebra foals play", "lions watch the zebra"]


def status(stack: Stack) -> pb.GetStatusResponse:
    return stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)


@pytest.fixture
def down_stack(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> tuple[Stack, Any]:
    """Store + search + pipeline, three memories, and a provider that is down."""
    book = VectorBook({"zebra": QUERY_VECTOR, **{c: vec(0.8) for c in CONTENTS}})
    server = http_servers(ollama_server(book))
    server.stop()  # the provider is down from the start: connection refused
    stack = recall_stack(fake_embedding_overrides(server.url))
    for content in CONTENTS:
        stack.remember(content)
    stack.pipeline_thread, stack.pipeline = start_pipeline_server(stack.config)
    return stack, server


def test_provider_outage_degrades_recall_and_parks_jobs_until_it_returns(
    down_stack: tuple[Stack, Any],
) -> None:
    stack, server = down_stack
    degraded = wait_for(
        lambda: (
            (s := status(stack)).providers[0].state == provider_pb2.PROVIDER_STATE_DEGRADED
            and s.workers[0].released_count >= len(CONTENTS)
            and s
        ),
        what="embedding provider reported degraded and the jobs handed back",
    )
    assert degraded.providers[0].last_error
    assert degraded.providers[0].HasField("check_time")
    assert degraded.workers[0].failed_count == 0, "an outage is no job's failure"

    response = stack.recall("zebra")
    assert response.degraded
    assert response.warnings, "the warning says why"
    assert len(response.results) == len(CONTENTS), "keywords still answer"
    assert all(r.vector.rank == 0 for r in response.results)

    stats = stack.stats()
    assert count(stats, EMBED, job_pb2.JOB_STATUS_DEAD) == 0
    assert count(stats, EMBED, job_pb2.JOB_STATUS_COMPLETED) == 0
    assert count(stats, EMBED, job_pb2.JOB_STATUS_PENDING) + count(
        stats, EMBED, job_pb2.JOB_STATUS_LEASED
    ) == len(CONTENTS)
    assert stats.indexed_memory_count == 0

    server.start()  # back on the same port
    wait_for(
        lambda: stack.stats().indexed_memory_count == len(CONTENTS),
        what="jobs completed after the provider returned",
    )
    recovered = wait_for(
        lambda: (
            (s := status(stack)).providers[0].state == provider_pb2.PROVIDER_STATE_AVAILABLE and s
        ),
        what="embedding provider available again",
    )
    assert recovered.providers[0].last_error == ""
    assert recovered.workers[0].completed_count == len(CONTENTS)
    assert count(stack.stats(), EMBED, job_pb2.JOB_STATUS_DEAD) == 0

    healthy = wait_for(
        lambda: (r := stack.recall("zebra")) and not r.degraded and r,
        what="recall no longer degraded",
    )
    assert list(healthy.warnings) == []
    assert all(r.vector.rank >= 1 for r in healthy.results)


def test_jobs_handed_back_during_an_outage_keep_all_their_attempts(
    down_stack: tuple[Stack, Any],
) -> None:
    stack, _server = down_stack
    # two rounds of lease -> refused -> release, and the worker is in its back-off wait
    wait_for(
        lambda: (
            (w := status(stack).workers[0]).released_count >= 2 * len(CONTENTS)
            and w.state == pb.WORKER_STATE_BACKOFF
        ),
        what="two released rounds",
    )
    stack.pipeline_thread.stop()
    stats = stack.stats()
    assert count(stats, EMBED, job_pb2.JOB_STATUS_LEASED) == 0
    assert count(stats, EMBED, job_pb2.JOB_STATUS_DEAD) == 0
    jobs = stack.jobs.LeaseJobs(jq.LeaseJobsRequest(job_type=EMBED, max_jobs=10)).jobs
    assert sorted(j.content for j in jobs) == sorted(CONTENTS)
    assert [j.attempts for j in jobs] == [1] * len(CONTENTS), "no attempt was used up"
