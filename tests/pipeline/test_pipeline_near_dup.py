"""Near-duplicates after embedding (seed 004 §3): a real store, search and pipeline,
a scripted Ollama embedding server that gives each text a chosen vector (so the
cosines are known), and a scripted LLM for the 0.70-0.98 band."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from engram.common.v1 import job_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from http_fakes import VectorBook, ollama_server, unit_axis
from llm_fakes import LlmServer, is_extraction
from recall_helpers import Stack, fake_embedding_overrides, wait_for

DIM = 8


def pair(cosine: float, axis: int, other: int) -> tuple[list[float], list[float]]:
    """Two unit vectors with this cosine, on two axes of their own."""
    second = [0.0] * DIM
    second[axis] = cosine
    second[other] = math.sqrt(1 - cosine * cosine)
    return unit_axis(DIM, axis), second


SAME = ("User prefers dark mode", "The user prefers dark mode.")
CLOSE = ("Client likes morning calls", "Client likes morning meetings")
DIFFERENT = ("Postgres uses pgvector", "Postgres is a database")
RICHER = ("Release is on Friday", "Release is on Friday at 5pm after QA sign-off")
# on CLOSE's axes: never remembered in the same test as CLOSE
SENTINEL = ("The office opens at nine", "The office opens at 9")
# on RICHER's axes: never remembered in the same test as RICHER
MORE_VALUES = ("Meet Anna at the cafe", "Meet Anna at the cafe on Friday")


def book() -> VectorBook:
    vectors: dict[str, list[float]] = {}
    for texts, cosine, axes in (
        (SAME, 0.99, (0, 1)),
        (CLOSE, 0.85, (2, 3)),
        (DIFFERENT, 0.75, (4, 5)),
        (RICHER, 0.90, (6, 7)),
        (SENTINEL, 0.995, (2, 3)),
        (MORE_VALUES, 0.92, (6, 7)),
    ):
        first, second = pair(cosine, *axes)
        vectors[texts[0]], vectors[texts[1]] = first, second
    return VectorBook(vectors)


def reviewer(prompt: str) -> str:
    """Extraction finds nothing; the near-duplicate review answers by the pair."""
    if is_extraction(prompt):
        return json.dumps({"facts": [], "entities": []})
    if "Client likes morning" in prompt or "Meet Anna" in prompt:
        return json.dumps({"action": "merge", "reason": "same preference"})
    if "Release is on Friday" in prompt:
        return json.dumps({"action": "replace", "reason": "the new one is more precise"})
    return json.dumps({"action": "keep", "reason": "different facts"})


@pytest.fixture
def start(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> Callable[..., tuple[Stack, LlmServer]]:
    def make(**overrides: Any) -> tuple[Stack, LlmServer]:
        embedder = http_servers(ollama_server(book()))
        llm = http_servers(LlmServer(reviewer))
        settings = fake_embedding_overrides(
            embedder.url,
            **{
                "dedup.enabled": True,
                "providers.llm.base_url": llm.url,
                "providers.llm.timeout_ms": 5000,
                "memory.pipelineV2.workerPollMs": 100,
                **overrides,
            },
        )
        stack = recall_stack(settings)
        stack.config = stack.config.with_overrides(
            {"clients.search_address": f"127.0.0.1:{stack.search_thread.app.port}"}
        )
        stack.remembered = {}  # type: ignore[attr-defined]
        return stack, llm

    def run(stack: Stack) -> None:
        stack.pipeline_thread, stack.pipeline = start_pipeline_server(stack.config)

    make.run = run  # type: ignore[attr-defined]
    return make


def get(stack: Stack, memory_id: str) -> Any:
    return stack.store.GetMemory(store_pb2.GetMemoryRequest(id=memory_id)).memory


def events(stack: Stack, memory_id: str) -> list[Any]:
    request = store_pb2.ListMemoryHistoryRequest(memory_id=memory_id)
    return list(stack.store.ListMemoryHistory(request).events)


def remember_all(stack: Stack, *texts: str, **fields: Any) -> dict[str, Any]:
    return {text: stack.remember(text, **fields) for text in texts}


def test_a_near_identical_memory_is_merged_into_the_older_one(start: Any) -> None:
    stack, llm = start()
    close = remember_all(stack, *CLOSE)
    older = stack.remember(SAME[0], tags=["ui"], importance=0.3)
    newer = stack.remember(SAME[1], tags=["prefs"], importance=0.9)
    start.run(stack)
    wait_for(lambda: get(stack, newer.id).deleted, what="the newer memory merged")
    survivor = get(stack, older.id)
    assert not survivor.deleted and survivor.content == SAME[0]
    assert list(survivor.tags) == ["ui", "prefs"] and survivor.importance == pytest.approx(0.9)
    merged = events(stack, newer.id)[-1]
    assert merged.event_type == store_pb2.HISTORY_EVENT_TYPE_MERGED
    assert merged.metadata["survivor_id"] == older.id
    assert merged.metadata["similarity"] == pytest.approx(0.99, abs=1e-3)
    assert merged.metadata["decided_by"] == "similarity"
    # 0.85 with the pipeline's LLM off (memory.pipelineV2.enabled false): kept, nobody asked
    assert not any(get(stack, m.id).deleted for m in close.values())
    assert llm.prompts() == []
    assert [r.memory.id for r in stack.recall(SAME[1]).results][:1] == [older.id]
    status = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
    [dedup] = [w for w in status.workers if w.name == "dedup"]
    assert dedup.completed_count >= 2 and dedup.failed_count == 0


FULL_MODE = {"memory.pipelineV2.enabled": True, "memory.pipelineV2.allowUpdateDelete": True}


def test_the_llm_decides_between_070_and_098(start: Any) -> None:
    """In full mode (`allowUpdateDelete`) the LLM's decisions are applied."""
    stack, llm = start(**FULL_MODE)
    close = remember_all(stack, *CLOSE)
    different = remember_all(stack, *DIFFERENT)
    richer = remember_all(stack, *RICHER)
    same = remember_all(stack, *SAME)
    start.run(stack)
    wait_for(lambda: get(stack, same[SAME[1]].id).deleted, what="the last pair checked")
    # merge: the newer folded into the older
    assert get(stack, close[CLOSE[1]].id).deleted and not get(stack, close[CLOSE[0]].id).deleted
    merged = events(stack, close[CLOSE[1]].id)[-1]
    assert (merged.metadata["decided_by"], merged.reason) == ("llm", "same preference")
    # replace: the newer, richer one supersedes the older (nothing tombstoned)
    old, new = richer[RICHER[0]].id, richer[RICHER[1]].id
    assert not get(stack, old).deleted and get(stack, old).HasField("valid_until")
    assert not get(stack, new).deleted and not get(stack, new).HasField("valid_until")
    reply = stack.store.GetMemory(store_pb2.GetMemoryRequest(id=old))
    assert reply.superseded_by_id == new and reply.merged_into_id == ""
    assert events(stack, old)[-1].metadata["superseded_by"] == new
    assert events(stack, new)[-1].metadata["supersedes"] == old
    # keep: both stay, the decision is in the newer one's history
    assert not any(get(stack, m.id).deleted for m in different.values())
    audit = events(stack, different[DIFFERENT[1]].id)[-1]
    assert audit.event_type == store_pb2.HISTORY_EVENT_TYPE_NONE
    assert audit.metadata["decision"] == "keep_both"
    reviews = [p for p in llm.prompts() if "Two memories are very similar" in p]
    assert len(reviews) == 3  # the 0.99 pair needed no model


def test_an_llm_merge_of_texts_with_other_values_is_an_update(start: Any) -> None:
    """Folding "... on Friday" into the memory without a day would lose the day:
    the LLM's merge becomes a supersede, the newer text stays current."""
    stack, _ = start(**FULL_MODE)
    pair = remember_all(stack, *MORE_VALUES)
    old, new = pair[MORE_VALUES[0]].id, pair[MORE_VALUES[1]].id
    start.run(stack)
    wait_for(lambda: get(stack, old).HasField("valid_until"), what="the older one superseded")
    assert not get(stack, old).deleted and not get(stack, new).deleted
    noted = events(stack, new)[-1]
    assert (noted.metadata["decision"], noted.metadata["supersedes"]) == ("supersede", old)
    assert noted.reason.startswith("same preference (values differ: date: - -> weekday fri")


def test_in_controlled_mode_the_llm_review_is_recorded_and_applied_nowhere(start: Any) -> None:
    stack, _ = start(**{"memory.pipelineV2.enabled": True})
    close = remember_all(stack, *CLOSE)
    richer = remember_all(stack, *RICHER)
    start.run(stack)
    newer = (close[CLOSE[1]].id, richer[RICHER[1]].id)
    wait_for(lambda: all(len(events(stack, m)) == 2 for m in newer), what="both recorded")
    for memory in (*close.values(), *richer.values()):
        now = get(stack, memory.id)
        assert not now.deleted and not now.HasField("valid_until") and now.version == 1
    proposals = [events(stack, m)[-1].metadata for m in newer]
    assert [(p["proposed"], p["not_applied"]) for p in proposals] == [
        ("merge", "destructive_mutations_disabled"),
        ("supersede", "destructive_mutations_disabled"),
    ]


def test_shadow_mode_records_and_changes_nothing(start: Any) -> None:
    stack, _ = start(**{"memory.pipelineV2.enabled": True, "memory.pipelineV2.shadowMode": True})
    same = remember_all(stack, *SAME)
    start.run(stack)
    newer = same[SAME[1]].id
    wait_for(lambda: len(events(stack, newer)) == 2, what="the decision recorded")
    assert not get(stack, newer).deleted
    assert events(stack, newer)[-1].reason.startswith("shadow mode, would merge")


def test_memories_with_an_expiry_never_merge(start: Any) -> None:
    stack, _ = start()
    older = stack.remember(SAME[0])
    newer = stack.remember(SAME[1], ttl={"seconds": 3600})  # short-term: never merged
    sentinel = remember_all(stack, *SENTINEL)  # checked after the pair above
    start.run(stack)
    wait_for(lambda: get(stack, sentinel[SENTINEL[1]].id).deleted, what="the queue drained")
    assert not get(stack, older.id).deleted and not get(stack, newer.id).deleted
    assert len(events(stack, newer.id)) == 1  # not even a decision recorded


def test_another_who_above_098_is_not_merged_unasked(start: Any) -> None:
    """Two speakers saying the same words are two memories: above 0.98 with
    another `who`, the LLM decides when it is on; otherwise both stay."""
    stack, llm = start()
    older = stack.remember(SAME[0], who="alice")
    newer = stack.remember(SAME[1], who="bob")
    sentinel = remember_all(stack, *SENTINEL)  # same (empty) who: merged
    start.run(stack)
    wait_for(lambda: get(stack, sentinel[SENTINEL[1]].id).deleted, what="the sentinel merged")
    wait_for(lambda: _pending_checks(stack) == 0, what="every check done")
    assert not get(stack, older.id).deleted and not get(stack, newer.id).deleted
    assert llm.prompts() == []


def test_another_who_above_098_goes_to_the_llm_when_it_is_on(start: Any) -> None:
    stack, llm = start(**{"memory.pipelineV2.enabled": True})
    older = stack.remember(SAME[0], who="alice")
    newer = stack.remember(SAME[1], who="bob")
    start.run(stack)
    wait_for(lambda: len(events(stack, newer.id)) == 2, what="the decision recorded")
    audit = events(stack, newer.id)[-1]
    assert (audit.metadata["decision"], audit.metadata["decided_by"]) == ("keep_both", "llm")
    assert not get(stack, older.id).deleted and not get(stack, newer.id).deleted
    assert len([p for p in llm.prompts() if "Two memories are very similar" in p]) == 1


def _pending_checks(stack: Stack) -> int:
    stats = stack.jobs.GetQueueStats(jq.GetQueueStatsRequest(), timeout=10)
    return sum(
        c.count
        for c in stats.counts
        if c.job_type == job_pb2.JOB_TYPE_NEAR_DUPLICATE and c.status == job_pb2.JOB_STATUS_PENDING
    )


def test_a_check_pending_when_the_pipeline_stops_is_done_after_it_restarts(
    start: Any, start_pipeline_server: Callable[..., Any]
) -> None:
    """The queue of checks is the store's: a pipeline that embedded both memories
    and stopped before checking them (here: one whose checker is off) leaves the
    checks queued, and the next pipeline does them."""
    stack, _ = start()
    older = stack.remember(SAME[0])
    newer = stack.remember(SAME[1])
    short_term = stack.remember(SENTINEL[0], ttl={"seconds": 3600})  # never checked
    embedder_only, _ = start_pipeline_server(stack.config.with_overrides({"dedup.enabled": False}))
    wait_for(lambda: _pending_checks(stack) == 2, what="both checks queued")
    embedder_only.stop()
    assert not get(stack, newer.id).deleted and _pending_checks(stack) == 2
    start.run(stack)
    wait_for(lambda: get(stack, newer.id).deleted, what="the merge after the restart")
    assert events(stack, newer.id)[-1].metadata["survivor_id"] == older.id
    wait_for(lambda: _pending_checks(stack) == 0, what="the queue drained")
    assert not get(stack, short_term.id).deleted
    stats = stack.jobs.GetQueueStats(jq.GetQueueStatsRequest(), timeout=10)
    done = {
        (c.job_type, c.status): c.count
        for c in stats.counts
        if c.job_type == job_pb2.JOB_TYPE_NEAR_DUPLICATE
    }
    assert done == {(job_pb2.JOB_TYPE_NEAR_DUPLICATE, job_pb2.JOB_STATUS_COMPLETED): 2}


LONG_PREFIX = "The migration plan, step by step. " * 60  # > 2,000 characters


def test_long_memories_are_compared_on_their_whole_text(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    """Recall sees a memory's first 2,000 characters: two long memories that share
    them are compared on their whole texts' vectors, so a different ending keeps
    both, and the same text with a different spacing is still merged."""
    first, other_end = LONG_PREFIX + "Then we ship.", LONG_PREFIX + "Then we roll back."
    same_again = LONG_PREFIX + "Then we ship it."  # the same, said a little differently
    vectors = {
        first: unit_axis(DIM, 0),
        other_end: pair(0.5, 0, 1)[1],
        same_again: pair(0.995, 0, 1)[1],
    }
    for query in (LONG_PREFIX[:2000], LONG_PREFIX[:2000].strip()):
        vectors[query] = unit_axis(DIM, 0)  # what Recall embeds for any of them
    embedder = http_servers(ollama_server(VectorBook(vectors)))
    stack = recall_stack(fake_embedding_overrides(embedder.url, **{"dedup.enabled": True}))
    stack.config = stack.config.with_overrides(
        {"clients.search_address": f"127.0.0.1:{stack.search_thread.app.port}"}
    )
    kept = stack.remember(first)
    different = stack.remember(other_end)
    twin = stack.remember(same_again)
    start_pipeline_server(stack.config)
    wait_for(lambda: get(stack, twin.id).deleted, what="the long twin merged")
    assert events(stack, twin.id)[-1].metadata["survivor_id"] == kept.id
    wait_for(lambda: _pending_checks(stack) == 0, what="every check done")
    assert not get(stack, different.id).deleted
