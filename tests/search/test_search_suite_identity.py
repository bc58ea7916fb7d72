"""A search service started on its own (no `clients.suite_id`) learns its suite's id
from its store (SuiteService.GetSuite on the internal listener) and answers the
health check `engram.suite/<id>` for it, and for no other; a client given the
store's address checks it before sending it anything (services/common/suite.py,
engram.client)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.client import Engram
from engram.store.v1 import store_pb2, store_pb2_grpc
from recall_helpers import Stack


def _health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            return -1
        return int(reply.status)


def test_search_answers_for_its_stores_suite(recall_stack: Callable[..., Stack]) -> None:
    stack = recall_stack()
    store = f"127.0.0.1:{stack.store_thread.app.port}"
    search = f"127.0.0.1:{stack.search_thread.app.port}"
    reply = store_pb2_grpc.SuiteServiceStub(stack.jobs_channel).GetSuite(
        store_pb2.GetSuiteRequest(), timeout=5
    )
    with grpc.insecure_channel(store) as channel:
        public = store_pb2_grpc.SuiteServiceStub(channel).GetSuite(
            store_pb2.GetSuiteRequest(), timeout=5
        )
    assert public == reply and len(reply.suite_id) >= 16
    assert reply.store_port == stack.store_thread.app.port
    ports = stack.config.server.ports
    assert (reply.search_port, reply.pipeline_port, reply.maintenance_port) == (
        ports.search,
        ports.pipeline,
        ports.maintenance,
    )
    serving = health_pb2.HealthCheckResponse.SERVING
    assert _health(search, f"engram.suite/{reply.suite_id}") == serving
    assert _health(search, "engram.suite/another-suite") == -1
    stack.remember("the zebra crossing")
    with Engram(store, search_address=search) as engram:
        assert engram.suite_id() == reply.suite_id
        hits = engram.recall("zebra").results
        assert [hit.memory.content for hit in hits] == ["the zebra crossing"]


def test_a_configured_suite_id_is_announced_once_the_store_confirms_it(
    recall_stack: Callable[..., Stack],
) -> None:
    first = recall_stack(search=False)
    suite_id = (
        store_pb2_grpc.SuiteServiceStub(first.jobs_channel)
        .GetSuite(store_pb2.GetSuiteRequest(), timeout=5)
        .suite_id
    )
    first.store_thread.stop()
    stack = recall_stack({"clients.suite_id": suite_id})
    search = f"127.0.0.1:{stack.search_thread.app.port}"
    serving = health_pb2.HealthCheckResponse.SERVING
    assert _health(search, f"engram.suite/{suite_id}") == serving
