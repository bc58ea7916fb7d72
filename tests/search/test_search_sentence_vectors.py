"""Sentence vectors beside whole-memory vectors (issue 19): the pipeline embeds a
memory's sentences with it, the store keeps them with its vector, and Recall
rescores its candidates by the best sentence cosine less what that many
sentences reach by chance (services/search/recall.py _best_parts), so a turn
whose one answering sentence is buried among others still meets the question.

Every vector is chosen by the test (a scripted Ollama server answers the
pipeline and the query embedder alike); "zebra" embeds to QUERY_VECTOR.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from http_fakes import VectorBook, ollama_server
from recall_helpers import MODEL, QUERY_VECTOR, Stack, fake_embedding_overrides, ids, vec, wait_for
from services.common.text import sentences
from store_helpers import scalar

# A long turn about gardening with one sentence that answers the question.
BURIED = "The sister moved to Lisbon last spring and loves it there."
GARDEN = "We spent the whole afternoon talking about the garden and the weather."
FENCE = "Then we went back to the tomatoes, the roses and the broken fence."
LONG_TURN = f"{GARDEN} {BURIED} {FENCE}"
# A one-sentence memory that is closer to the question than the long turn as a whole.
NEAR = "A short note about summer travel plans for the family"
WHOLE_COSINE, BURIED_COSINE, OTHER_COSINE, NEAR_COSINE = 0.3, 0.95, 0.3, 0.45
# The long turn's lifted cosine: its best sentence less the maximum three
# sentences reach by chance, sd x sqrt(2 ln 3), sd over every sentence cosine
# in the pool (the long turn's three are the only ones).
_PARTS = (OTHER_COSINE, BURIED_COSINE, OTHER_COSINE)
_MEAN = sum(_PARTS) / 3
_SD = math.sqrt(sum((c - _MEAN) ** 2 for c in _PARTS) / 3)
LIFTED_COSINE = BURIED_COSINE - _SD * math.sqrt(2 * math.log(3))


def book() -> VectorBook:
    return VectorBook(
        {
            "zebra": QUERY_VECTOR,
            LONG_TURN: vec(WHOLE_COSINE, axis=2),
            BURIED: vec(BURIED_COSINE, axis=3),
            GARDEN: vec(OTHER_COSINE, axis=5),
            FENCE: vec(OTHER_COSINE, axis=6),
            NEAR: vec(NEAR_COSINE, axis=4),
        }
    )


def parts_for(text: str, vectors: VectorBook) -> list[float]:
    """What the embed worker sends: its sentences' vectors, concatenated."""
    split = sentences(text)
    return [x for s in split for x in vectors(s)] if len(split) > 1 else []


def complete_embeds(stack: Stack, vectors: VectorBook, *, with_parts: bool = True) -> int:
    """Complete every due embed job as the embed worker would (sentence vectors
    included unless `with_parts` is False)."""
    done = 0
    while leased := stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=100)
    ).jobs:
        response = stack.jobs.CompleteEmbedJobs(
            jq.CompleteEmbedJobsRequest(
                model=MODEL,
                results=[
                    jq.EmbedResult(
                        lease=jq.JobLease(job_id=j.id, lease_token=j.lease_token),
                        content_hash=j.content_hash,
                        vector=vectors(j.content),
                        parts=parts_for(j.content, vectors) if with_parts else [],
                    )
                    for j in leased
                ],
            )
        )
        assert list(response.outcomes) == [jq.LEASE_OUTCOME_OK] * len(leased)
        done += len(leased)
    return done


@pytest.fixture
def stack_of(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> Callable[..., Stack]:
    def build(overrides: dict[str, Any] | None = None, *, pipeline: bool = False) -> Stack:
        server = http_servers(ollama_server(book()))
        return recall_stack(
            fake_embedding_overrides(server.url, **(overrides or {})), pipeline=pipeline
        )

    return build


@pytest.mark.parametrize("sentence_vectors", [True, False], ids=["sentences", "whole-only"])
def test_a_buried_sentence_lifts_its_long_turn_only_with_sentence_vectors(
    stack_of: Callable[..., Stack], sentence_vectors: bool
) -> None:
    """Through the pipeline: the embed worker embeds the long turn's sentences
    in the same batch and the store keeps them with its vector."""
    stack = stack_of(
        {"workers.embed.poll_ms": 50, "workers.embed.sentence_vectors": sentence_vectors},
        pipeline=True,
    )
    long_turn = stack.remember(LONG_TURN)
    near = stack.remember(NEAR)
    wait_for(lambda: stack.stats().indexed_memory_count == 2, what="both memories indexed")

    response = stack.recall("zebra")
    assert not response.degraded, list(response.warnings)
    if sentence_vectors:
        assert ids(response) == [long_turn.id, near.id]
        assert response.results[0].vector.score == pytest.approx(LIFTED_COSINE, abs=3e-3)
    else:
        assert ids(response) == [near.id, long_turn.id]
        assert response.results[1].vector.score == pytest.approx(WHOLE_COSINE, abs=1e-4)


def test_search_can_leave_stored_sentence_vectors_unread(
    stack_of: Callable[..., Stack],
) -> None:
    stack = stack_of({"search.sentence_weight": 0.0})
    long_turn = stack.remember(LONG_TURN)
    near = stack.remember(NEAR)
    complete_embeds(stack, book())
    assert ids(stack.recall("zebra")) == [near.id, long_turn.id]


def test_new_content_replaces_the_sentence_vectors_and_purge_removes_them(
    stack_of: Callable[..., Stack],
) -> None:
    stack = stack_of()
    vectors = book()
    long_turn = stack.remember(LONG_TURN)
    near = stack.remember(NEAR)
    complete_embeds(stack, vectors)
    assert ids(stack.recall("zebra")) == [long_turn.id, near.id]

    # The long turn loses its answering sentence: its new content's parts are
    # its own, and the old ones no longer lift it.
    rewritten = LONG_TURN.replace(BURIED, "Nothing else of note happened during the visit.")
    stack.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            patches=[store_pb2.MemoryPatch(id=long_turn.id, content=rewritten)], reason="edit"
        )
    )
    vectors.vectors[rewritten] = vec(WHOLE_COSINE, axis=2)
    assert complete_embeds(stack, vectors) == 1
    response = stack.recall("zebra")
    assert ids(response)[0] == near.id
    [current] = [r for r in response.results if r.memory.content == rewritten]
    assert current.vector.score == pytest.approx(WHOLE_COSINE, abs=1e-4)

    # Both contents' rows hold parts: the old content's stays with its whole
    # vector (services/store/mutations.py new_version: a revert is indexed at once).
    path = stack.config.storage.path
    with_parts = "SELECT count(*) FROM embeddings WHERE parts IS NOT NULL"
    assert scalar(path, with_parts) == 2
    stack.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            ids=[current.memory.id], mode=store_pb2.FORGET_MODE_EXECUTE, reason="gone", purge=True
        )
    )
    assert scalar(path, with_parts) == 1, "the purged content's sentence vectors went with it"
    assert ids(stack.recall("zebra")) == [near.id]


def test_sentence_vectors_serve_their_own_namespace_only(
    stack_of: Callable[..., Stack],
) -> None:
    """The same text in two namespaces: one's sentence vectors never lift the
    other's memory (each namespace's vectors are its own, issue 11)."""
    stack = stack_of()
    vectors = book()
    in_a = stack.remember(LONG_TURN, namespace="a")
    near_a = stack.remember(NEAR, namespace="a")
    complete_embeds(stack, vectors)
    in_b = stack.remember(LONG_TURN, namespace="b")
    near_b = stack.remember(NEAR, namespace="b")
    complete_embeds(stack, vectors, with_parts=False)

    assert ids(stack.recall("zebra", namespace="a")) == [in_a.id, near_a.id]
    assert ids(stack.recall("zebra", namespace="b")) == [near_b.id, in_b.id]


@pytest.mark.parametrize(
    "bad_parts",
    [[*vec(0.5), 1.0, 2.0], vec(0.5) * 257],
    ids=["not-whole-vectors", "over-256-sentences"],
)
def test_bad_parts_are_refused_and_nothing_is_written(
    stack_of: Callable[..., Stack], bad_parts: list[float]
) -> None:
    stack = stack_of()
    stack.remember(LONG_TURN)
    [job] = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=10)
    ).jobs

    def complete(parts: list[float]) -> jq.CompleteEmbedJobsResponse:
        return stack.jobs.CompleteEmbedJobs(
            jq.CompleteEmbedJobsRequest(
                model=MODEL,
                results=[
                    jq.EmbedResult(
                        lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
                        content_hash=job.content_hash,
                        vector=vec(0.5),
                        parts=parts,
                    )
                ],
            )
        )

    with pytest.raises(grpc.RpcError) as raised:
        complete(bad_parts)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "results[0].parts" in (raised.value.details() or "")
    # nothing was written: the job is still leased to us and completes now
    assert list(complete(vec(0.5) * 2).outcomes) == [jq.LEASE_OUTCOME_OK]
