"""Recall by meaning with the real local model, end to end in one process:
remember -> the pipeline embeds (all-MiniLM-L6-v2) -> recall finds a memory that
shares no keyword with the query."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engram.common.v1 import job_pb2, provider_pb2
from engram.pipeline.v1 import pipeline_pb2
from recall_helpers import Stack, count, wait_for

# the first query loads the model: on a loaded machine that takes longer than
# the default 2 s, which would make the answer degraded rather than wrong
PATIENT = {"search.query_embedding_timeout_ms": 30000}

MEMORIES = {
    "dog": "Alice adopted a golden retriever puppy last spring",
    "budget": "The quarterly budget meeting moved to Thursday",
    "tea": "Bob prefers green tea over coffee",
    "db": "The database server runs PostgreSQL 16",
    "car": "Carol sold her old bicycle and bought an electric scooter",
}


def test_recall_finds_a_memory_by_meaning_with_no_shared_keyword(
    local_embedding: Any, recall_stack: Callable[..., Stack]
) -> None:
    stack = recall_stack({"workers.embed.poll_ms": 50, **PATIENT}, pipeline=True)
    ids = {key: stack.remember(text).id for key, text in MEMORIES.items()}
    wait_for(
        lambda: stack.stats().indexed_memory_count == len(MEMORIES),
        timeout=120,
        what="every memory embedded by the pipeline",
    )
    assert stack.stats().index_model == "all-MiniLM-L6-v2"
    assert stack.stats().index_dimensions == 384

    response = stack.recall("Which animal does she own?")
    assert not response.degraded, list(response.warnings)
    best = response.results[0]
    assert best.memory.id == ids["dog"]
    assert best.keyword.rank == 0, "no keyword is shared"
    assert best.vector.rank == 1

    response = stack.recall("hot beverages someone likes to drink")
    assert response.results[0].memory.id == ids["tea"]

    status = stack.pipeline.GetStatus(pipeline_pb2.GetStatusRequest())
    [provider] = [p for p in status.providers if p.role == "embedding"]
    assert (provider.role, provider.kind, provider.model) == (
        "embedding",
        "local",
        "all-MiniLM-L6-v2",
    )
    assert provider.state == provider_pb2.PROVIDER_STATE_AVAILABLE
    [worker] = [w for w in status.workers if w.name == "embed"]
    assert worker.completed_count == len(MEMORIES)


def test_vectors_stored_by_the_torch_runtime_are_found_by_int8_queries_without_reembedding(
    local_embedding: Any, recall_stack: Callable[..., Stack]
) -> None:
    """Upgrading to the int8 runtime (the default) keeps an index built by torch:
    one model name, no re-embedding, recall by meaning unchanged."""
    torch = {"providers.embedding.runtime": "torch", "workers.embed.poll_ms": 50}
    before = recall_stack(torch, pipeline=True)
    ids = {key: before.remember(text).id for key, text in MEMORIES.items()}
    wait_for(
        lambda: before.stats().indexed_memory_count == len(MEMORIES),
        timeout=120,
        what="every memory embedded by the torch runtime",
    )
    for thread in (before.pipeline_thread, before.search_thread, before.store_thread):
        thread.stop()

    after = recall_stack({"providers.embedding.runtime": "onnx", **PATIENT})
    stats = after.stats()
    assert (stats.index_model, stats.indexed_memory_count) == ("all-MiniLM-L6-v2", len(MEMORIES))
    assert count(stats, job_pb2.JOB_TYPE_EMBED, job_pb2.JOB_STATUS_PENDING) == 0
    response = after.recall("Which animal does she own?")
    assert not response.degraded, list(response.warnings)
    assert (response.results[0].memory.id, response.results[0].vector.rank) == (ids["dog"], 1)
    assert after.recall("hot beverages someone likes to drink").results[0].memory.id == ids["tea"]
