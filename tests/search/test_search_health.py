"""Search health with a remote embedding provider: it is not waited for. Only
the in-process model is (tests/e2e/test_search_warm_start_e2e.py); a remote
provider may stay down for hours while recall from keywords still works."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from http_fakes import VectorBook, ollama_server
from recall_helpers import Stack, fake_embedding_overrides

SEARCH = "engram.search.v1.SearchService"


def test_a_remote_provider_that_is_down_does_not_keep_search_not_serving(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = http_servers(ollama_server(VectorBook()))
    server.stop()  # connection refused from the start
    stack = recall_stack(fake_embedding_overrides(server.url))
    stack.remember("keywords still find the zebra")
    with grpc.insecure_channel(f"127.0.0.1:{stack.search_thread.app.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SEARCH):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    response = stack.recall("zebra")
    assert response.degraded and response.warnings
    assert [r.memory.content for r in response.results] == ["keywords still find the zebra"]
