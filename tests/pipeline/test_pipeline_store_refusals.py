"""The store refusing a job's result ends the same way for every job kind
(services/pipeline/job_outcomes.py): a full disk hands the job back without
using an attempt, and the job completes once space returns. Real servers on
a real, small filesystem (tests/small_disk.py: a tmpfs under the SQLite file).

Was: extraction and document ingest let the refused job's lease lapse, so a
full disk used up their attempts (and buried them in the dead letter) while
summaries and consolidations were released: four hand-written comparisons of
reason strings, each a little different."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from small_disk import fill, small_disk_at

from engram.common.v1 import document_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from http_fakes import Reply, ScriptedHttpServer
from llm_fakes import LlmServer, fact, scripted
from recall_helpers import Stack, wait_for
from store_helpers import rows

pytestmark = pytest.mark.sqlite_only(
    "a tmpfs filling under the SQLite file (PostgreSQL's full disk: tests/e2e)"
)
DISK_BYTES = 8 * 1024 * 1024
# What is left free once the disk is full: room for the small writes of the
# job queue (a lease, a release), not for a job's result.
ROOM_BYTES = 96 * 1024
WORKER = {
    "memory.pipelineV2.enabled": True,
    "memory.pipelineV2.workerPollMs": 100,
    "memory.pipelineV2.workerMaxRetries": 2,
    "providers.embedding.kind": "none",
    "providers.llm.timeout_ms": 60000,
    "search.min_score": 0.0,
}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk_at(tmp_path / "small-disk", DISK_BYTES) as path:
        yield path


def full_but_for_room(disk: Path) -> Path:
    """Fill `disk`, then give back ROOM_BYTES; the filler, to delete when space returns."""
    filler = disk / "filler"
    fill(filler)
    os.truncate(filler, max(0, filler.stat().st_size - ROOM_BYTES))
    return filler


def long_facts(memory: str) -> list[dict[str, Any]]:
    """As many facts as extraction keeps, each near the 2,000-character limit:
    a result far bigger than the room left."""
    return [
        fact(f"Fact {i} of {memory[:20]}: " + " ".join(f"w{i}x{j:04d}" for j in range(260)))
        for i in range(20)
    ]


class Gate:
    """Holds every answer of a fake server until opened."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def wrap(self, inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def held(request: Any) -> Any:
            self.event.wait(60)
            return inner(request)

        return held


def jobs_of(stack: Stack, job_type: str) -> list[dict[str, Any]]:
    names = ("status", "attempts", "error")
    found = rows(
        Path(stack.config.storage.path),
        f"SELECT {', '.join(names)} FROM memory_jobs WHERE job_type = ? ORDER BY created_at",
        job_type,
    )
    return [dict(zip(names, row, strict=True)) for row in found]


def worker_status(stack: Stack, name: str) -> Any:
    status = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
    [worker] = [w for w in status.workers if w.name == name]
    return worker


def refused_twice(stack: Stack, name: str) -> Any:
    """Wait for two refusals, each handed back; no failed attempt."""
    try:
        worker = wait_for(
            lambda: (w := worker_status(stack, name)).released_count >= 2 and w,
            what=f"the {name} worker to hand a refused job back twice",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; worker {worker_status(stack, name)}") from exc
    # (its last error may already be a later lease the full disk refused)
    assert worker.failed_count == 0
    return worker


def test_a_full_disk_hands_an_extract_job_back_without_using_its_attempts(
    small_disk: Path,
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    gate = Gate()
    llm: LlmServer = http_servers(LlmServer(scripted(long_facts)))
    llm.script = gate.wrap(llm.script)
    stack = recall_stack(
        {**WORKER, "providers.llm.base_url": llm.url, "storage.path": str(small_disk / "e.db")}
    )
    stack.config = stack.config.with_overrides(
        {"clients.search_address": f"127.0.0.1:{stack.search_thread.app.port}"}
    )
    stack.pipeline_thread, stack.pipeline = start_pipeline_server(stack.config)
    stack.remember("Grace restores old sailing boats on the coast")
    wait_for(lambda: llm.in_flight.now == 1, what="the extract job leased, its LLM call held")

    filler = full_but_for_room(small_disk)
    gate.event.set()
    refused_twice(stack, "extract")
    [job] = jobs_of(stack, "extract")
    assert job["attempts"] <= 1 and job["error"] is None, job

    filler.unlink()  # space returns: the job completes, on its first counted attempt
    done = wait_for(
        lambda: (j := jobs_of(stack, "extract")[0])["status"] == "completed" and j,
        what="the extract job completed",
    )
    assert done["attempts"] == 1


def test_a_full_disk_hands_a_document_job_back_without_using_its_attempts(
    small_disk: Path,
    recall_stack: Callable[..., Stack],
    http_servers: Callable[[Any], Any],
) -> None:
    gate = Gate()
    # chunks as long as allowed, of distinct words: each chunk write is far
    # bigger than the room left
    text = " ".join(f"d{i:05d}" for i in range(3 * 50_000 // 7))
    page: ScriptedHttpServer = http_servers(
        ScriptedHttpServer(
            {
                ("GET", "/page"): gate.wrap(
                    lambda _request: Reply(200, text, content_type="text/plain")
                )
            }
        )
    )
    stack = recall_stack(
        {
            **WORKER,
            "storage.path": str(small_disk / "d.db"),
            "memory.pipelineV2.documentWorkerIntervalMs": 1000,
            "memory.pipelineV2.documentChunkSize": 50_000,
            "memory.pipelineV2.documentChunkOverlap": 0,
            "documents.fetch_allow": ["127.0.0.1"],
        },
        search=False,
        pipeline=True,
    )
    document = stack.pipeline.CreateDocument(
        pb.CreateDocumentRequest(url=f"{page.url}/page"), timeout=30
    ).document
    wait_for(lambda: page.requests_to("GET", "/page"), what="the document leased, its fetch held")

    filler = full_but_for_room(small_disk)
    gate.event.set()
    refused_twice(stack, "document")
    [job] = jobs_of(stack, "document_ingest")
    assert job["attempts"] <= 1 and job["error"] is None, job

    filler.unlink()
    done = wait_for(
        lambda: (
            (
                d := stack.pipeline.GetDocument(pb.GetDocumentRequest(id=document.id), timeout=10)
            ).document.status
            == document_pb2.DOCUMENT_STATUS_DONE
            and d.document
        ),
        what="the document ingested",
    )
    assert done.chunk_count == 3
    [job] = jobs_of(stack, "document_ingest")
    assert (job["status"], job["attempts"]) == ("completed", 1)
