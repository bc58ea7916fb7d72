"""Extract jobs follow `memory.pipelineV2.enabled` (issue 12): while the pipeline
is off nothing would take them, so Remember and ImportMemories queue none and
the queue cannot grow; StoreAdminService.BackfillExtraction queues the memories
remembered meanwhile, once each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from admin_helpers import AdminStore, admin_store
from engram.store.internal.v1 import admin_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of

OFF = {"memory.pipelineV2.enabled": False}
ON = {"memory.pipelineV2.enabled": True}


def extract_jobs(st: AdminStore) -> list[tuple[Any, ...]]:
    return st.rows(
        "SELECT memory_id, status FROM memory_jobs WHERE job_type = 'extract' ORDER BY memory_id"
    )


def backfill(st: AdminStore, namespace: str = "") -> tuple[int, int]:
    response = st.admin.BackfillExtraction(admin_pb2.BackfillExtractionRequest(namespace=namespace))
    return response.queued, response.remaining


def test_with_the_pipeline_off_no_extract_job_is_queued_and_the_queue_stays_flat(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> None:
    """Was: an extract job per memory that nothing ever took or removed."""
    st = admin_store(start_store_server, make_config, **OFF)
    for n in range(20):
        st.remember(f"memory number {n} about the quiet pipeline")
    st.store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    items=[store_pb2.ImportItem(content=f"imported {n}") for n in range(30)]
                )
            ]
        )
    )
    assert extract_jobs(st) == []
    assert st.scalar("SELECT count(*) FROM memory_jobs WHERE job_type = 'embed'") == 50


def test_with_the_pipeline_on_each_memory_gets_one_extract_job(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> None:
    st = admin_store(start_store_server, make_config, **ON)
    memory_id = st.remember("Alice moved to Lisbon")
    assert extract_jobs(st) == [(memory_id, "pending")]


def test_backfill_queues_the_memories_remembered_while_off_once_each_in_batches(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> None:
    off = admin_store(start_store_server, make_config, **OFF, **{"retention.batch_limit": 2})
    old = [off.remember(f"remembered while off, number {n}") for n in range(3)]
    other = off.remember("another namespace's memory", namespace="team-b")
    chunk = off.remember("a document chunk is never extracted", type="document_chunk")
    deleted = off.remember("a tombstone is not extracted")
    off.delete(deleted)
    off.thread.stop()

    st = admin_store(start_store_server, make_config, **ON, **{"retention.batch_limit": 2})
    new = st.remember("remembered while on")  # has its job already
    assert backfill(st, "default") == (2, 1)
    assert backfill(st, "default") == (1, 0)
    assert backfill(st, "default") == (0, 0)
    queued = {memory_id for memory_id, _ in extract_jobs(st)}
    assert queued == {*old, new}
    assert chunk not in queued and deleted not in queued
    assert backfill(st) == (1, 0)  # every namespace: team-b's memory
    assert {memory_id for memory_id, _ in extract_jobs(st)} == {*old, new, other}
    assert len(extract_jobs(st)) == 5  # one job per memory, never two


def test_backfill_rejects_a_bad_namespace_and_is_refused_while_frozen(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> None:
    off = admin_store(start_store_server, make_config, **OFF)
    off.remember("remembered while off")
    code, _, _ = error_of(
        lambda: off.admin.BackfillExtraction(
            admin_pb2.BackfillExtractionRequest(namespace="bad namespace!")
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    off.thread.stop()
    frozen = admin_store(
        start_store_server, make_config, **ON, **{"memory.pipelineV2.mutationsFrozen": True}
    )
    code, reason, _ = error_of(lambda: backfill(frozen))
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert extract_jobs(frozen) == []
