"""A pipeline killed with SIGKILL while its embed jobs are in flight, then
restarted: the new process takes the jobs back at once and finishes them, long
before the lease timeout (300 s here) that the stale-lease reaper waits for.

Real processes (`python -m services.cli.main serve store|pipeline --config
FILE`) and a scripted Ollama embedding server on a loopback port that holds the
first pipeline's batch until the test lets it go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from e2e_helpers import Launcher, ProcessHandle, engram_command, free_port
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from engram.store.v1 import store_pb2
from http_fakes import Reply, Request, ollama_server, unit_axis

NAMESPACE = "restart"
MEMORIES = 64
LEASE_TIMEOUT_MS = 300_000
IN_FLIGHT_WAIT_S = 60.0
# Far below the lease timeout: on the old code the jobs stay leased for 300 s
# (plus up to 60 s for the reaper), so this bound fails it within a minute.
RECOVERY_WAIT_S = 60.0


def _counts(store: ProcessHandle) -> tuple[int, int, int]:
    """(embed jobs leased, embed jobs completed, indexed memories)."""
    stats = job_queue_pb2_grpc.JobQueueServiceStub(store.internal_channel()).GetQueueStats(
        jq.GetQueueStatsRequest(), timeout=10
    )
    by_status = {c.status: c.count for c in stats.counts if c.job_type == job_pb2.JOB_TYPE_EMBED}
    return (
        by_status.get(job_pb2.JOB_STATUS_LEASED, 0),
        by_status.get(job_pb2.JOB_STATUS_COMPLETED, 0),
        stats.indexed_memory_count,
    )


def _wait(condition: Callable[[], bool], timeout: float, what: str, log: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout}s:\n" + log()[-4000:])
        time.sleep(0.1)


def test_a_restarted_pipeline_finishes_the_killed_ones_jobs_at_once(
    launcher: Launcher, tmp_path: Path
) -> None:
    gate = threading.Event()  # the first pipeline's batch hangs until the gate opens
    embedder = ollama_server(lambda _text: unit_axis(8, 7))
    answer = embedder.routes[("POST", "/api/embed")]

    def held_until_the_gate_opens(request: Request) -> Reply:
        gate.wait(timeout=IN_FLIGHT_WAIT_S + RECOVERY_WAIT_S)
        return answer(request)

    embedder.routes[("POST", "/api/embed")] = held_until_the_gate_opens
    embedder.start()
    try:
        ports = {name: free_port() for name in ("store", "store_internal", "pipeline")}
        config = tmp_path / "engram.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "storage": {"path": str(tmp_path / "data" / "engram.db")},
                    "server": {"ports": ports},
                    "clients": {
                        "store_address": f"127.0.0.1:{ports['store']}",
                        "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
                    },
                    "memory": {"pipelineV2": {"leaseTimeoutMs": LEASE_TIMEOUT_MS}},
                    "providers": {
                        "embedding": {
                            "kind": "ollama",
                            "base_url": embedder.url,
                            "model": "fake-embed",
                            "batch_size": MEMORIES,
                        }
                    },
                    "workers": {"embed": {"poll_ms": 50}},
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
            handle.wait_ready(timeout=60)
            return handle

        store = start("store")
        for i in range(MEMORIES):
            store.stub().Remember(
                store_pb2.RememberRequest(namespace=NAMESPACE, content=f"memory number {i}"),
                timeout=10,
            )

        first = start("pipeline")
        _wait(
            lambda: (
                bool(embedder.requests_to("POST", "/api/embed")) and _counts(store)[0] == MEMORIES
            ),
            IN_FLIGHT_WAIT_S,
            "all embed jobs leased and in flight",
            first.log,
        )
        first.kill()  # SIGKILL: no release, no goodbye
        assert first.process.returncode is not None
        assert _counts(store)[0] == MEMORIES, "the killed pipeline's leases are still held"
        gate.set()

        restarted_at = time.monotonic()
        second = start("pipeline")
        _wait(
            lambda: _counts(store) == (0, MEMORIES, MEMORIES),
            RECOVERY_WAIT_S,
            "every embed job completed by the restarted pipeline",
            second.log,
        )
        elapsed = time.monotonic() - restarted_at
        assert elapsed < LEASE_TIMEOUT_MS / 1000
        second.stop()
    finally:
        gate.set()
        embedder.stop()
