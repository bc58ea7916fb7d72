"""Every service of `engram up` serves Prometheus metrics on its
`server.metrics_ports.<service>` (real processes, scripted embedding and LLM
servers): an HTTP GET returns the named metrics, and their counts move with the
calls made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from free_ports import free_port
from prometheus_client.parser import text_string_to_metric_families

from engram.maintenance.v1 import maintenance_pb2 as mpb
from engram.maintenance.v1 import maintenance_pb2_grpc
from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc
from http_fakes import VectorBook, ollama_server
from llm_fakes import LlmServer, scripted

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 60.0
SERVICES = ("store", "search", "pipeline", "maintenance")
NAMESPACE = "metrics"
STORE = "/engram.store.v1.MemoryStoreService"
SEARCH = "/engram.search.v1.SearchService"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name` over the samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def serving(address: str) -> bool:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[tuple[dict[str, int], dict[str, int]]]:
    """`engram up` on free gRPC and metrics ports; (ports, metrics ports)."""
    embeddings = ollama_server(VectorBook()).start()
    llm = LlmServer(scripted(lambda memory: [])).start()
    ports = {name: free_port() for name in (*SERVICES, "store_internal")}
    metrics = {name: free_port() for name in SERVICES}
    config = tmp_path / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"ports": ports, "metrics_ports": metrics},
                "memory": {"pipelineV2": {"enabled": True}},
                # the counts below are the test's own calls: no near-duplicate
                # checks (each a Recall, each a job)
                "dedup": {"enabled": False},
                "providers": {
                    "embedding": {
                        "kind": "ollama",
                        "base_url": embeddings.url,
                        "model": "fake-embed",
                    },
                    "llm": {"kind": "ollama", "base_url": llm.url, "model": "fake-llm"},
                },
            }
        ),
        encoding="utf-8",
    )
    up = subprocess.Popen(
        [
            *(sys.executable, "-m", "services.cli.main", "up"),
            *("--config", str(config), "--data-dir", str(tmp_path / "data")),
        ],
        cwd=ROOT,
        # no ENGRAM_* from the test run (tests/conftest.py turns metrics off there)
        env={k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        eventually(
            lambda: all(serving(f"127.0.0.1:{ports[name]}") for name in SERVICES),
            "services did not all become SERVING",
            STARTUP_S,
        )
        yield ports, metrics
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
        embeddings.stop()
        llm.stop()
    assert up.returncode == 0, output


def test_every_service_serves_its_metrics_and_they_move(
    suite: tuple[dict[str, int], dict[str, int]],
) -> None:
    ports, metrics = suite
    with (
        grpc.insecure_channel(f"127.0.0.1:{ports['store']}") as store_channel,
        grpc.insecure_channel(f"127.0.0.1:{ports['search']}") as search_channel,
        grpc.insecure_channel(f"127.0.0.1:{ports['pipeline']}") as pipeline_channel,
        grpc.insecure_channel(f"127.0.0.1:{ports['maintenance']}") as maintenance_channel,
    ):
        store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
        for text in ("Alice surfs on weekends", "Bob climbs in winter"):
            store.Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content=text), timeout=10)
        # the pipeline embeds and extracts both: its provider calls are counted
        eventually(
            lambda: (
                value(scrape(metrics["pipeline"]), "engram_llm_request_duration_seconds_count") >= 2
                and value(
                    scrape(metrics["store"]), "engram_queue_jobs", type="embed", state="completed"
                )
                >= 2
            ),
            "the pipeline did not embed and extract both memories",
        )
        search = search_pb2_grpc.SearchServiceStub(search_channel)
        search.Recall(
            search_pb2.RecallRequest(namespace=NAMESPACE, query="Alice surfs"), timeout=30
        )
        pipeline_pb2_grpc.PipelineServiceStub(pipeline_channel).GetStatus(
            pipeline_pb2.GetStatusRequest(), timeout=10
        )
        maintenance_pb2_grpc.MaintenanceServiceStub(maintenance_channel).GetDiagnostics(
            mpb.GetDiagnosticsRequest(), timeout=30
        )
        with pytest.raises(grpc.RpcError) as missing:
            store.GetMemory(store_pb2.GetMemoryRequest(namespace=NAMESPACE, id="nope"), timeout=10)
        failed_code = missing.value.code().name

        scraped = {name: scrape(metrics[name]) for name in SERVICES}
        for name in SERVICES:  # every service counts and times its own RPCs
            assert {"engram_rpc_requests_total", "engram_rpc_duration_seconds_bucket"} <= names(
                scraped[name]
            ), name

        s = scraped["store"]
        assert value(s, "engram_rpc_requests_total", method=f"{STORE}/Remember", code="OK") == 2
        assert (
            value(s, "engram_rpc_requests_total", method=f"{STORE}/GetMemory", code=failed_code)
            == 1
        )
        assert value(s, "engram_rpc_duration_seconds_count", method=f"{STORE}/Remember") == 2
        assert value(s, "engram_writer_group_size_count") >= 2
        assert value(s, "engram_writer_commit_duration_seconds_count") >= 2
        assert value(s, "engram_queue_jobs", type="embed", state="completed") == 2

        q = scraped["search"]
        assert value(q, "engram_rpc_requests_total", method=f"{SEARCH}/Recall", code="OK") == 1
        for channel in ("keyword", "vector"):
            assert value(q, "engram_recall_channel_duration_seconds_count", channel=channel) == 1
        assert value(q, "engram_embedding_request_duration_seconds_count", kind="ollama") >= 1
        assert value(q, "engram_vector_cache_rows") == 2

        p = scraped["pipeline"]
        assert value(p, "engram_embedding_request_duration_seconds_count", outcome="ok") >= 1
        assert value(p, "engram_llm_request_duration_seconds_count", kind="ollama") >= 2
        assert "# TYPE engram_llm_errors_total counter" in _raw(metrics["pipeline"])
        assert (
            value(
                scraped["maintenance"],
                "engram_rpc_requests_total",
                method="/engram.maintenance.v1.MaintenanceService/GetDiagnostics",
                code="OK",
            )
            == 1
        )

        # counts move: one more Remember is one more count
        store.Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content="Carol"), timeout=10)
        after = scrape(metrics["store"])
        assert value(after, "engram_rpc_requests_total", method=f"{STORE}/Remember") == 3


def _raw(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())
