"""Tracing across processes: `engram up` with `tracing.otlp_endpoint` set exports
its spans over OTLP/gRPC to a collector this test runs (a real gRPC server
implementing the OTLP TraceService). One trace follows a Remember from the caller
into the store, the pipeline's embed span links to it, and a Recall continues the
caller's trace in search, with a span per channel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from free_ports import free_port
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc
from http_fakes import VectorBook, ollama_server

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("store", "search", "pipeline", "maintenance")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
REMEMBER_PARENT = "00f067aa0ba902b7"
RECALL_PARENT = "00f067aa0ba902b8"


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span exported to it, with its service's name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self._lock:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource_spans.scope_spans:
                    self.spans += [(service, span) for span in scope.spans]
        return trace_service_pb2.ExportTraceServiceResponse()

    def find(self, check: Callable[[str, Any], bool]) -> list[tuple[str, Any]]:
        with self._lock:
            return [(service, span) for service, span in self.spans if check(service, span)]


def eventually(find: Callable[[], list[Any]], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := find()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return found[0]


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
def traced_suite(tmp_path: Path) -> Iterator[tuple[dict[str, int], Collector]]:
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    otlp_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    embeddings = ollama_server(VectorBook(default=[1.0] + [0.0] * 7)).start()
    ports = {name: free_port() for name in (*SERVICES, "store_internal")}
    config = tmp_path / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"ports": ports},
                "tracing": {"otlp_endpoint": f"http://127.0.0.1:{otlp_port}"},
                "search": {"min_score": 0.0},
                "providers": {
                    "embedding": {
                        "kind": "ollama",
                        "base_url": embeddings.url,
                        "model": "fake-embed",
                    }
                },
            }
        ),
        encoding="utf-8",
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    environment.update({f"ENGRAM_SERVER__METRICS_PORTS__{n.upper()}": "0" for n in SERVICES})
    environment["OTEL_BSP_SCHEDULE_DELAY"] = "200"  # export batches every 0.2 s, not 5 s
    up = subprocess.Popen(
        [
            *(sys.executable, "-m", "services.cli.main", "up"),
            *("--config", str(config), "--data-dir", str(tmp_path / "data")),
        ],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not all(serving(f"127.0.0.1:{ports[name]}") for name in SERVICES):
            assert up.poll() is None, up.communicate()[0]
            assert time.monotonic() < deadline, "services did not all become SERVING"
            time.sleep(0.2)
        yield ports, collector
    finally:
        up.send_signal(signal.SIGINT)
        output, _ = up.communicate(timeout=60)
        embeddings.stop()
        server.stop(0)
    assert up.returncode == 0, output


def test_one_trace_crosses_the_processes(traced_suite: tuple[dict[str, int], Collector]) -> None:
    ports, collector = traced_suite
    trace_id = bytes.fromhex(TRACE_ID)
    with (
        grpc.insecure_channel(f"127.0.0.1:{ports['store']}") as store_channel,
        grpc.insecure_channel(f"127.0.0.1:{ports['search']}") as search_channel,
    ):
        memory = (
            store_pb2_grpc.MemoryStoreServiceStub(store_channel)
            .Remember(
                store_pb2.RememberRequest(namespace="t", content="Alice surfs on weekends"),
                metadata=[("traceparent", f"00-{TRACE_ID}-{REMEMBER_PARENT}-01")],
                timeout=10,
            )
            .memory
        )
        service, remember = eventually(
            lambda: collector.find(
                lambda _s, span: (
                    span.name == "engram.store.v1.MemoryStoreService/Remember"
                    and span.trace_id == trace_id
                )
            ),
            "the store exported no Remember span in the caller's trace",
        )
        assert service == "engram-store"
        assert remember.parent_span_id == bytes.fromhex(REMEMBER_PARENT)

        service, embed = eventually(
            lambda: collector.find(
                lambda _s, span: (
                    span.name == "pipeline.embed"
                    and any(link.span_id == remember.span_id for link in span.links)
                )
            ),
            "the pipeline exported no embed span linked to the Remember",
        )
        assert service == "engram-pipeline"
        service, _complete = eventually(
            lambda: collector.find(
                lambda _s, span: (
                    span.name.endswith("JobQueueService/CompleteEmbedJobs")
                    and span.parent_span_id == embed.span_id
                )
            ),
            "the store's CompleteEmbedJobs is not a child of the embed span",
        )
        assert service == "engram-store"

        search = search_pb2_grpc.SearchServiceStub(search_channel)
        deadline = time.monotonic() + 30
        while True:  # the vector is in once a Recall is no longer degraded
            response = search.Recall(
                search_pb2.RecallRequest(namespace="t", query="Alice surfs"),
                metadata=[("traceparent", f"00-{TRACE_ID}-{RECALL_PARENT}-01")],
                timeout=30,
            )
            if not response.degraded:
                break
            assert time.monotonic() < deadline, "the memory was never embedded"
            time.sleep(0.2)
        assert [r.memory.id for r in response.results] == [memory.id]

        def recall_spans() -> list[Any]:
            return collector.find(
                lambda _s, span: (
                    span.name == "engram.search.v1.SearchService/Recall"
                    and span.trace_id == trace_id
                    and span.parent_span_id == bytes.fromhex(RECALL_PARENT)
                )
            )

        eventually(recall_spans, "search exported no Recall span in the caller's trace")

        def last_recall_with_channels() -> list[Any]:
            service, recall = max(recall_spans(), key=lambda found: found[1].start_time_unix_nano)
            names = {
                span.name
                for _s, span in collector.find(
                    lambda _s, span: span.parent_span_id == recall.span_id
                )
            }
            ok = service == "engram-search" and {"recall.keyword", "recall.vector"} <= names
            return [names] if ok else []

        eventually(
            last_recall_with_channels, "the last Recall's channel spans are not its children"
        )
