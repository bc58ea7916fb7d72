"""Recall across three real processes (store, search, pipeline), each started as
`python -m services.cli.main serve SERVICE --config FILE` with its port taken
from the YAML file, the local embedding model, and grpcurl over reflection.

remember -> the pipeline embeds it within a bounded wait -> recall finds it by
meaning, with no keyword in common.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from e2e_helpers import GRPCURL, Launcher, ProcessHandle, engram_command, free_port, needs_grpcurl
from engram.common.v1 import provider_pb2
from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2, job_queue_pb2_grpc
from engram.store.v1 import store_pb2

EMBED_TIMEOUT_S = 180.0  # two processes load the model on a small machine
SEARCH = "engram.search.v1.SearchService"
PIPELINE = "engram.pipeline.v1.PipelineService"
NAMESPACE = "e2e-recall"
MEMORIES = [
    "Alice adopted a golden retriever puppy last spring",
    "The quarterly budget meeting moved to Thursday",
    "Bob prefers green tea over coffee",
    "The database server runs PostgreSQL 16",
]


@dataclass
class Suite:
    store: ProcessHandle
    search: ProcessHandle
    pipeline: ProcessHandle
    memory_ids: list[str]


def _wait_indexed(store: ProcessHandle, wanted: int, others: list[ProcessHandle]) -> None:
    jobs = job_queue_pb2_grpc.JobQueueServiceStub(store.internal_channel())
    deadline = time.monotonic() + EMBED_TIMEOUT_S
    indexed = -1
    while time.monotonic() < deadline:
        for handle in (store, *others):
            if handle.process.poll() is not None:
                pytest.fail(f"a service exited with {handle.process.returncode}:\n{handle.log()}")
        indexed = jobs.GetQueueStats(
            job_queue_pb2.GetQueueStatsRequest(), timeout=10
        ).indexed_memory_count
        if indexed >= wanted:
            return
        time.sleep(0.2)
    pytest.fail(
        f"only {indexed}/{wanted} memories embedded within {EMBED_TIMEOUT_S}s:\n"
        + "\n".join(h.log()[-3000:] for h in others)
    )


@pytest.fixture(scope="module")
def suite(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    root = tmp_path_factory.mktemp("recall-e2e")
    ports = {name: free_port() for name in ("store", "store_internal", "search", "pipeline")}
    config = root / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"path": str(root / "data" / "engram.db")},
                "server": {"ports": ports},
                "clients": {
                    "store_address": f"127.0.0.1:{ports['store']}",
                    "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
                },
                "providers": {"embedding": {"kind": "local", "model": "all-MiniLM-L6-v2"}},
                "workers": {"embed": {"poll_ms": 100}},
            }
        ),
        encoding="utf-8",
    )
    handles: dict[str, ProcessHandle] = {}
    for name in ("store", "search", "pipeline"):
        handle = module_launcher.spawn(
            engram_command("serve", name, "--config", str(config)),
            port=ports[name],
            internal_port=ports["store_internal"] if name == "store" else None,
        )
        handles[name] = handle
        handle.wait_ready(timeout=60)
    store = handles["store"]
    ids = [
        store.stub()
        .Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content=text), timeout=10)
        .memory.id
        for text in MEMORIES
    ]
    _wait_indexed(store, len(MEMORIES), [handles["search"], handles["pipeline"]])
    yield Suite(handles["store"], handles["search"], handles["pipeline"], ids)
    for handle in handles.values():
        handle.kill()


def _recall(search: ProcessHandle, query: str) -> search_pb2.RecallResponse:
    stub = search_pb2_grpc.SearchServiceStub(search.channel())
    deadline = time.monotonic() + 60
    while True:  # the search process may still be loading its model: then it is degraded
        response = stub.Recall(
            search_pb2.RecallRequest(namespace=NAMESPACE, query=query), timeout=30
        )
        if not response.degraded or time.monotonic() > deadline:
            return response
        time.sleep(0.5)


def test_remembered_memory_is_embedded_and_recalled_by_meaning(suite: Suite) -> None:
    response = _recall(suite.search, "Which animal does she own?")
    assert not response.degraded, list(response.warnings)
    best = response.results[0]
    assert best.memory.id == suite.memory_ids[0]
    assert best.keyword.rank == 0, "no keyword in common"
    assert best.vector.rank == 1

    status = pipeline_pb2_grpc.PipelineServiceStub(suite.pipeline.channel()).GetStatus(
        pipeline_pb2.GetStatusRequest(), timeout=10
    )
    assert status.indexed_memory_count == len(MEMORIES)
    assert status.index_model == "all-MiniLM-L6-v2"
    assert status.providers[0].state == provider_pb2.PROVIDER_STATE_AVAILABLE


def _grpcurl(
    handle: ProcessHandle, *command: str, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    assert GRPCURL is not None
    return subprocess.run(
        [GRPCURL, "-plaintext", "-max-time", "30", *flags, handle.address, *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _call(handle: ProcessHandle, method: str, body: dict[str, Any]) -> dict[str, Any]:
    result = _grpcurl(handle, method, flags=("-d", json.dumps(body)))
    assert result.returncode == 0, f"{method} failed: {result.stderr}"
    return json.loads(result.stdout)


@needs_grpcurl()
def test_grpcurl_lists_and_calls_recall_and_get_status_over_reflection(suite: Suite) -> None:
    _recall(suite.search, "Which animal does she own?")  # the search model is loaded
    listed = _grpcurl(suite.search, "list")
    assert listed.returncode == 0, listed.stderr
    assert {SEARCH, "grpc.health.v1.Health"} <= set(listed.stdout.split())
    listed = _grpcurl(suite.pipeline, "list")
    assert listed.returncode == 0, listed.stderr
    assert PIPELINE in listed.stdout.split()

    recalled = _call(
        suite.search,
        f"{SEARCH}/Recall",
        {"namespace": NAMESPACE, "query": "Which animal does she own?", "limit": 2},
    )
    assert 1 <= len(recalled["results"]) <= 2
    best = recalled["results"][0]
    assert best["memory"]["id"] == suite.memory_ids[0]
    assert best["memory"]["content"] == MEMORIES[0]
    assert best["vector"]["rank"] == 1
    assert best["vector"]["score"] > 0

    status = _call(suite.pipeline, f"{PIPELINE}/GetStatus", {})
    assert status["providers"][0]["role"] == "embedding"
    assert status["providers"][0]["state"] == "PROVIDER_STATE_AVAILABLE"
    assert status["workers"][0]["name"] == "embed"
    depths = {(q["job_type"], q["status"]): int(q["count"]) for q in status["queue"]}
    assert depths[("JOB_TYPE_EMBED", "JOB_STATUS_COMPLETED")] == len(MEMORIES)

    bad = _grpcurl(suite.search, f"{SEARCH}/Recall", flags=("-d", json.dumps({"query": ""})))
    assert bad.returncode != 0
    assert "InvalidArgument" in bad.stderr or "INVALID_ARGUMENT" in bad.stderr


def test_services_stop_cleanly_on_sigterm_after_serving_recall(suite: Suite) -> None:
    """Run last in the module: the pipeline and search drain and exit 0."""
    assert suite.pipeline.stop() == 0, suite.pipeline.log()[-3000:]
    assert suite.search.stop() == 0, suite.search.log()[-3000:]
    assert suite.store.stop() == 0, suite.store.log()[-3000:]
