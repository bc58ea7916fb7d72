"""The pipeline's embed worker and PipelineService/GetStatus, against a real
store and a scripted Ollama server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engram.common.v1 import job_pb2, provider_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from http_fakes import Reply, Request, ScriptedHttpServer, VectorBook, ollama_server
from recall_helpers import MODEL, Stack, count, fake_embedding_overrides, wait_for

EMBED_PATH = "/api/embed"


def status(stub: Any) -> pb.GetStatusResponse:
    return stub.GetStatus(pb.GetStatusRequest(), timeout=10)


def depths(response: pb.GetStatusResponse) -> dict[tuple[str, str], int]:
    """Queue depths by (JobType name, JobStatus name)."""
    return {
        (job_pb2.JobType.Name(q.job_type), job_pb2.JobStatus.Name(q.status)): q.count
        for q in response.queue
    }


def embed_batches(server: ScriptedHttpServer) -> list[list[str]]:
    return [r.json["input"] for r in server.requests_to("POST", EMBED_PATH)]


def test_status_shows_queue_depths_provider_and_worker(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    server = http_servers(ollama_server(VectorBook()))
    # dedup off: the depths below are the embed queue's alone
    stack = recall_stack(
        fake_embedding_overrides(server.url, **{"dedup.enabled": False}), search=False
    )
    for text in ("first memory", "second memory", "third memory"):
        stack.remember(text)
    _, pipeline = start_pipeline_server(stack.config)
    wait_for(lambda: stack.stats().indexed_memory_count == 3, what="all embedded")
    response = wait_for(
        lambda: (s := status(pipeline)).workers[0].state == pb.WORKER_STATE_IDLE and s,
        what="worker idle",
    )
    # no extract jobs: the pipeline (memory.pipelineV2.enabled) is off
    assert depths(response) == {("JOB_TYPE_EMBED", "JOB_STATUS_COMPLETED"): 3}
    [provider] = [p for p in response.providers if p.role == "embedding"]
    assert (provider.role, provider.kind, provider.model) == ("embedding", "ollama", MODEL)
    assert provider.state == provider_pb2.PROVIDER_STATE_AVAILABLE
    assert provider.last_error == ""
    [worker] = [w for w in response.workers if w.name == "embed"]
    assert worker.name == "embed"
    assert (worker.completed_count, worker.failed_count, worker.released_count) == (3, 0, 0)
    assert worker.HasField("last_batch_time")
    assert response.index_model == MODEL
    assert (response.indexed_memory_count, response.live_memory_count) == (3, 3)


def test_the_embed_worker_embeds_in_batches_oldest_first(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    server = http_servers(ollama_server(VectorBook()))
    stack = recall_stack(
        fake_embedding_overrides(server.url, **{"providers.embedding.batch_size": 3}),
        search=False,
    )
    texts = [f"memory number {i}" for i in range(7)]
    for text in texts:
        stack.remember(text)
    start_pipeline_server(stack.config)
    wait_for(lambda: stack.stats().indexed_memory_count == 7, what="all embedded")
    assert embed_batches(server) == [texts[0:3], texts[3:6], texts[6:7]]
    for request in server.requests_to("POST", EMBED_PATH):
        assert request.json["model"] == MODEL


def test_a_memory_remembered_while_the_worker_long_polls_is_embedded_without_a_poll(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    """With an hour between polls, only the long poll can pick the job up."""
    server = http_servers(ollama_server(VectorBook()))
    stack = recall_stack(
        fake_embedding_overrides(
            server.url, **{"workers.embed.poll_ms": 60000, "workers.embed.long_poll_ms": 60000}
        ),
        search=False,
        pipeline=True,
    )
    wait_for(
        lambda: status(stack.pipeline).workers[0].state == pb.WORKER_STATE_IDLE,
        what="worker idle",
    )
    for number in range(3):
        stack.remember(f"arrives while the worker waits, number {number}")
        wait_for(lambda n=number: stack.stats().indexed_memory_count == n + 1, what="embedded")
    [worker] = [w for w in status(stack.pipeline).workers if w.name == "embed"]
    assert worker.completed_count == 3


def test_memories_remembered_later_are_embedded_too(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(ollama_server(VectorBook()))
    stack = recall_stack(
        fake_embedding_overrides(server.url, **{"workers.embed.poll_ms": 50}),
        search=False,
        pipeline=True,
    )
    wait_for(
        lambda: status(stack.pipeline).workers[0].state == pb.WORKER_STATE_IDLE,
        what="worker idle",
    )
    stack.remember("arrives while the worker waits")
    wait_for(lambda: stack.stats().indexed_memory_count == 1, what="embedded")
    stack.remember("and one more")
    wait_for(lambda: stack.stats().indexed_memory_count == 2, what="embedded")
    assert status(stack.pipeline).workers[0].completed_count == 2


def test_a_rejected_input_fails_only_its_own_job(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    server = http_servers(ollama_server(VectorBook()))
    accept = server.routes[("POST", EMBED_PATH)]

    def picky(request: Request) -> Reply:
        if any("poison" in text for text in request.json["input"]):
            return Reply(400, {"error": "input rejected by the model"})
        return accept(request)

    server.routes[("POST", EMBED_PATH)] = picky
    stack = recall_stack(
        fake_embedding_overrides(server.url, **{"memory.pipelineV2.workerMaxRetries": 1}),
        search=False,
    )
    for text in ("good one", "poison pill", "good two"):
        stack.remember(text)
    _, pipeline = start_pipeline_server(stack.config)
    wait_for(
        lambda: count(stack.stats(), job_pb2.JOB_TYPE_EMBED, job_pb2.JOB_STATUS_DEAD) == 1,
        what="the rejected job dead",
    )
    wait_for(lambda: stack.stats().indexed_memory_count == 2, what="the others embedded")
    response = status(pipeline)
    assert depths(response)[("JOB_TYPE_EMBED", "JOB_STATUS_DEAD")] == 1
    assert depths(response)[("JOB_TYPE_EMBED", "JOB_STATUS_COMPLETED")] == 2
    [worker] = [w for w in response.workers if w.name == "embed"]
    assert worker.failed_count == 1
    assert "400" in worker.last_error
    assert response.providers[0].state == provider_pb2.PROVIDER_STATE_AVAILABLE, (
        "a rejection is no outage"
    )


def test_embeddings_off_disable_the_provider_and_stop_the_worker(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({"providers.embedding.kind": "none"}, search=False, pipeline=True)
    stack.remember("keywords only")
    response = wait_for(
        lambda: (s := status(stack.pipeline)).workers[0].state == pb.WORKER_STATE_STOPPED and s,
        what="worker stopped",
    )
    [provider] = [p for p in response.providers if p.role == "embedding"]
    assert (provider.kind, provider.state) == ("none", provider_pb2.PROVIDER_STATE_DISABLED)
    assert depths(response)[("JOB_TYPE_EMBED", "JOB_STATUS_PENDING")] == 1


@pytest.fixture
def orphan_pipeline(
    make_config: Callable[..., Any],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> Any:
    """A pipeline whose store address has nobody listening."""
    dead = http_servers(ScriptedHttpServer())
    dead_address = f"127.0.0.1:{dead.port}"
    dead.stop()
    server = http_servers(ollama_server(VectorBook()))
    config = make_config(
        **fake_embedding_overrides(server.url), **{"clients.store_address": dead_address}
    )
    _, pipeline = start_pipeline_server(config)
    return pipeline


def test_status_without_the_store_still_describes_providers_and_workers(
    orphan_pipeline: Any,
) -> None:
    response = status(orphan_pipeline)
    assert not response.store_available and "UNAVAILABLE" in response.store_error
    assert list(response.queue) == [] and response.live_memory_count == 0
    assert [p.role for p in response.providers] == ["embedding", "llm"]
    assert [w.name for w in response.workers][:2] == ["embed", "extract"]
