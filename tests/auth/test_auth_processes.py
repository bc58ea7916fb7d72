"""The whole suite with auth on, as `engram up` starts it (real processes): a key made
with `engram keys create` remembers, the pipeline (its own service credential, which
`up` made) leases the extract job from the store's internal listener, asks the
scripted LLM, gets decision candidates from search and writes the fact; a reader key
recalls it. The key's name is the actor of the Remember, the pipeline's of the fact."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from auth_suite import bearer
from free_ports import free_port
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.pipeline.v1 import pipeline_pb2 as ppb
from engram.pipeline.v1 import pipeline_pb2_grpc
from engram.search.v1 import search_pb2 as spb
from engram.search.v1 import search_pb2_grpc
from engram.store.v1 import store_pb2 as pb
from engram.store.v1 import store_pb2_grpc
from llm_fakes import LlmServer, fact, scripted

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("store", "search", "pipeline", "maintenance")
STARTUP_S = 90.0


def _serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def llm() -> Iterator[LlmServer]:
    server = LlmServer(scripted(lambda memory: [fact("Alice lives in Lisbon")]))
    server.start()
    yield server
    server.stop()


def test_engram_up_with_auth_remember_extract_recall(tmp_path: Path, llm: LlmServer) -> None:
    ports = {name: free_port() for name in (*SERVICES, "store_internal")}
    config = tmp_path / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"ports": ports},
                "auth": {"enabled": True},
                "memory": {"pipelineV2": {"enabled": True, "workerPollMs": 100}},
                "providers": {
                    "embedding": {"kind": "none"},
                    "llm": {"kind": "ollama", "base_url": llm.url, "model": "fake-llm"},
                },
            }
        ),
        encoding="utf-8",
    )
    where = ("--config", str(config), "--data-dir", str(tmp_path / "data"))
    up = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "up", *where],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_S
        while not all(_serving(f"127.0.0.1:{ports[name]}") for name in SERVICES):
            assert up.poll() is None, "engram up exited early"
            assert time.monotonic() < deadline, "services did not all become SERVING"
            time.sleep(0.2)
        writer = (
            _cli(
                "keys",
                "create",
                *where,
                "--role",
                "writer",
                "--namespace",
                "team-*",
                "--name",
                "agent-7",
            )
            .strip()
            .splitlines()[-1]
        )
        reader = (
            _cli(
                "keys",
                "create",
                *where,
                "--role",
                "reader",
                "--namespace",
                "team-a",
                "--name",
                "dashboard",
            )
            .strip()
            .splitlines()[-1]
        )
        with (
            grpc.insecure_channel(f"127.0.0.1:{ports['store']}") as store_channel,
            grpc.insecure_channel(f"127.0.0.1:{ports['search']}") as search_channel,
            grpc.insecure_channel(f"127.0.0.1:{ports['pipeline']}") as pipeline_channel,
        ):
            store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
            search = search_pb2_grpc.SearchServiceStub(search_channel)
            remembered = store.Remember(
                pb.RememberRequest(namespace="team-a", content="Alice moved to Lisbon in May"),
                metadata=bearer(writer),
                timeout=10,
            ).memory
            deadline = time.monotonic() + 60
            while True:
                found = search.Recall(
                    spb.RecallRequest(namespace="team-a", query="Alice Lisbon lives"),
                    metadata=bearer(reader),
                    timeout=10,
                ).results
                facts = [r.memory for r in found if r.memory.content == "Alice lives in Lisbon"]
                if facts:
                    break
                assert time.monotonic() < deadline, "the extracted fact never arrived"
                time.sleep(0.3)
            history = {
                memory_id: [
                    e.actor
                    for e in store.ListMemoryHistory(
                        pb.ListMemoryHistoryRequest(namespace="team-a", memory_id=memory_id),
                        metadata=bearer(reader),
                        timeout=10,
                    ).events
                ]
                for memory_id in (remembered.id, facts[0].id)
            }
            assert history[remembered.id][0] == "agent-7"
            assert history[facts[0].id] == ["pipeline-v2"]
            status = pipeline_pb2_grpc.PipelineServiceStub(pipeline_channel).GetStatus(
                ppb.GetStatusRequest(), metadata=bearer(reader), timeout=10
            )
            assert status.store_available
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
    assert up.returncode == 0, output
    assert "holds no key yet" in output  # `up` started before any key existed, and said so
