"""A stalled store (issue 14): a process that accepts TCP connections on the
store's internal port and never answers. The pipeline's workers must not wait
on it forever: each call ends at its deadline (clients.deadlines.*), the worker
reports it and backs off, and once a real store listens on that port again the
work gets done. Real processes and servers throughout; nothing is patched."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from engram.store.v1 import store_pb2
from http_fakes import VectorBook, ollama_server
from recall_helpers import fake_embedding_overrides, vec, wait_for

# Listens, accepts every connection, keeps it open and never writes a byte.
STALL = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 0))
server.listen(64)
print(server.getsockname()[1], flush=True)
held = []
while True:
    held.append(server.accept()[0])
"""

# workers that do not run in this configuration (memory.pipelineV2 off)
OFF_BY_DEFAULT = ("extract", "consolidate")


@pytest.fixture
def stalled_port() -> Iterator[tuple[int, subprocess.Popen[str]]]:
    process = subprocess.Popen([sys.executable, "-c", STALL], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline()), process
    finally:
        process.kill()
        process.wait(timeout=10)


def status(pipeline: Any) -> pb.GetStatusResponse:
    return pipeline.GetStatus(pb.GetStatusRequest(), timeout=30)


def test_a_stalled_store_holds_no_worker_past_the_deadline_and_work_resumes_when_it_returns(
    stalled_port: tuple[int, subprocess.Popen[str]],
    make_config: Callable[..., Any],
    start_store_server: Callable[..., Any],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    port, stall = stalled_port
    embedder = http_servers(ollama_server(VectorBook({"stalled": vec(0.9)})))
    config = make_config(
        **fake_embedding_overrides(
            embedder.url,
            **{
                "clients.store_internal_address": f"127.0.0.1:{port}",
                "clients.deadlines.lease_ms": 500,
                "clients.deadlines.write_ms": 500,
                "clients.deadlines.default_ms": 500,
                "workers.embed.poll_ms": 50,
                "memory.pipelineV2.documentWorkerIntervalMs": 1000,
            },
        )
    )
    _, pipeline = start_pipeline_server(config)

    # Every worker's store call ended at its deadline (a call still waiting on the
    # stalled store would leave no error), and the worker is backing off.
    stalled = wait_for(
        lambda: (
            (s := status(pipeline))
            and all(
                "DEADLINE_EXCEEDED" in w.last_error
                for w in s.workers
                if w.name not in OFF_BY_DEFAULT
            )
            and s
        ),
        what="the embed and document workers' calls ending at their deadline",
    )
    assert not stalled.store_available  # GetStatus itself answers, within its deadline
    assert {w.name for w in stalled.workers} >= {"embed", "document"}

    # The store comes back on the same port: the work gets done.
    stall.kill()
    stall.wait(timeout=10)
    _, store = start_store_server(config, internal_port=port)
    store.Remember(store_pb2.RememberRequest(content="stalled zebra"), timeout=10)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
        wait_for(
            lambda: (
                jobs.GetQueueStats(jq.GetQueueStatsRequest(), timeout=10).indexed_memory_count == 1
            ),
            what="the memory embedded once the store is back",
        )
    # the store indexes the memory inside CompleteEmbedJobs; the worker counts it once
    # that call has answered, a moment later (a one-shot read raced it under load in CI)
    recovered = wait_for(
        lambda: (
            (s := status(pipeline))
            and s.store_available
            and next(w for w in s.workers if w.name == "embed").completed_count >= 1
            and s
        ),
        what="the pipeline seeing the store again and counting the embed job",
    )
    embed = next(w for w in recovered.workers if w.name == "embed")
    assert embed.completed_count == 1
