"""Issue 34: a job that kills its worker every time reaches the dead letter.

A document whose ingest never finishes (the embedding server holds every call)
is leased by a real pipeline process, which is then killed with SIGKILL while
the call is in flight, and restarted: each restart ends the killed process's
lease (ReleasePriorInstanceLeases) and that lease counts as an attempt. After
`workerMaxRetries` (3) kills the document is `failed` with the reason, visible
through PipelineService.GetDocument, and no fourth attempt is made. On the old
code a restart gave the attempt back, and the job looped forever.

Real processes (`engram serve store|pipeline --config FILE`) on SQLite and on
the session's PostgreSQL, and a scripted Ollama server on a loopback port.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e_helpers import Launcher, ProcessHandle, engram_command, free_port
from engram.common.v1 import document_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.pipeline.v1 import pipeline_pb2_grpc
from http_fakes import Reply, Request, ollama_server, unit_axis
from services.storage.store.repository import WORKER_LOST

MAX_ATTEMPTS = 3  # workerMaxRetries' default
WAIT_S = 60.0


def _wait(condition: Callable[[], Any], what: str, log: Callable[[], str]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (result := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {WAIT_S}s:\n" + log()[-4000:])
        time.sleep(0.1)
    return result


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_document_that_kills_its_pipeline_every_time_fails_after_the_last_attempt(
    launcher: Launcher, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    released = threading.Event()  # the held embedding calls end with the test
    embedder = ollama_server(lambda _text: unit_axis(8, 7))

    def never_answers_in_time(_request: Request) -> Reply:
        released.wait(timeout=5 * WAIT_S)
        return Reply(503, {"error": "gave up"})

    embedder.routes[("POST", "/api/embed")] = never_answers_in_time
    embedder.start()
    try:
        ports = {name: free_port() for name in ("store", "store_internal", "pipeline")}
        storage: dict[str, Any] = {"path": str(tmp_path / "data" / "engram.db")}
        if backend == "postgres":
            storage |= {"kind": "postgres", "postgres": {"dsn": request.getfixturevalue("pg_dsn")}}
        config = tmp_path / "engram.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "storage": storage,
                    "server": {"ports": ports},
                    "clients": {
                        "store_address": f"127.0.0.1:{ports['store']}",
                        "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
                    },
                    "memory": {"pipelineV2": {"documentWorkerIntervalMs": 1000}},
                    "providers": {
                        "embedding": {
                            "kind": "ollama",
                            "base_url": embedder.url,
                            "model": "fake-embed",
                            "timeout_ms": 600_000,  # held until the kill
                        }
                    },
                }
            ),
            encoding="utf-8",
        )

        def start(service: str) -> ProcessHandle:
            handle = launcher.spawn(
                engram_command("serve", service, "--config", str(config)),
                port=ports[service],
                internal_port=ports["store_internal"] if service == "store" else None,
            )
            handle.wait_ready(timeout=WAIT_S)
            return handle

        start("store")
        pipeline = start("pipeline")

        def get(handle: ProcessHandle, document_id: str) -> document_pb2.Document:
            stub = pipeline_pb2_grpc.PipelineServiceStub(handle.channel())
            return stub.GetDocument(pb.GetDocumentRequest(id=document_id), timeout=10).document

        stub = pipeline_pb2_grpc.PipelineServiceStub(pipeline.channel())
        document = stub.CreateDocument(
            pb.CreateDocumentRequest(content="a page that no worker survives", title="Poison"),
            timeout=10,
        ).document
        for kill in range(1, MAX_ATTEMPTS + 1):
            _wait(
                lambda kill=kill: len(embedder.requests_to("POST", "/api/embed")) == kill,
                f"attempt {kill}'s embedding call in flight",
                pipeline.log,
            )
            seen = get(pipeline, document.id)
            assert (seen.status, seen.attempt) == (
                document_pb2.DOCUMENT_STATUS_EMBEDDING,
                kill,
            )
            pipeline.kill()  # SIGKILL: no release, no goodbye
            pipeline = start("pipeline")  # its start ends the killed one's lease

        failed = _wait(
            lambda: (
                (d := get(pipeline, document.id)).status == document_pb2.DOCUMENT_STATUS_FAILED
                and d
            ),
            "the document failed",
            pipeline.log,
        )
        assert (failed.error, failed.last_error, failed.attempt) == (
            WORKER_LOST,
            WORKER_LOST,
            MAX_ATTEMPTS,
        )
        time.sleep(2.5)  # two document worker ticks: nothing leases it again
        assert len(embedder.requests_to("POST", "/api/embed")) == MAX_ATTEMPTS
        pipeline.stop()
    finally:
        released.set()
        embedder.stop()
