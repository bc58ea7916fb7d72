"""The store's two listeners (issue 14): the public one serves MemoryStoreService;
the worker and admin APIs (engram.store.internal.v1) are only on the internal
one, bound to `server.internal_host`; SuiteService (the suite's id and ports,
issue 34) is on both. Through real servers on real ports."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import (
    access_pb2,
    admin_pb2,
    dedup_pb2,
    documents_pb2,
    job_queue_pb2,
    job_queue_pb2_grpc,
)
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from store_helpers import remember, table_counts

INTERNAL_SERVICES = [
    module.DESCRIPTOR.services_by_name[name]
    for module, name in (
        (job_queue_pb2, "JobQueueService"),
        (documents_pb2, "DocumentStoreService"),
        (admin_pb2, "StoreAdminService"),
        (access_pb2, "AccessService"),
        (dedup_pb2, "DedupService"),
    )
]
INTERNAL_METHODS = [
    f"/{service.full_name}/{method.name}"
    for service in INTERNAL_SERVICES
    for method in service.methods
]
PUBLIC = store_pb2.DESCRIPTOR.services_by_name["MemoryStoreService"].full_name
SUITE = store_pb2.DESCRIPTOR.services_by_name["SuiteService"].full_name
HEALTH = "grpc.health.v1.Health"
REFLECTION = "grpc.reflection.v1alpha.ServerReflection"


def listed(address: str) -> set[str]:
    """The services reflection lists at `address`."""
    with grpc.insecure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    return {service.name for service in reply.list_services_response.service}


@pytest.fixture
def started(make_config: Callable[..., Any], start_store_server: Callable[..., Any]) -> Any:
    server, store = start_store_server(make_config(**{"memory.pipelineV2.enabled": True}))
    remember(store, "a memory with an extract job")
    return server


def test_reflection_on_the_public_port_lists_no_internal_service(started: Any) -> None:
    assert listed(f"127.0.0.1:{started.app.port}") == {PUBLIC, SUITE, HEALTH, REFLECTION}


def test_reflection_on_the_internal_port_lists_the_internal_services(started: Any) -> None:
    internal = {service.full_name for service in INTERNAL_SERVICES}
    assert listed(f"127.0.0.1:{started.app.internal_port}") == {
        *internal,
        SUITE,
        HEALTH,
        REFLECTION,
    }


@pytest.mark.parametrize("method", INTERNAL_METHODS)
def test_an_internal_rpc_on_the_public_port_is_unimplemented_and_writes_nothing(
    started: Any, db_path: Any, method: str
) -> None:
    before = table_counts(db_path)
    with (
        grpc.insecure_channel(f"127.0.0.1:{started.app.port}") as channel,
        pytest.raises(grpc.RpcError) as caught,
    ):
        channel.unary_unary(method)(b"", timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    assert table_counts(db_path) == before


def test_the_job_queue_answers_on_the_internal_port(started: Any, db_path: Any) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{started.app.internal_port}") as channel:
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)
        leased = jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=5), timeout=10
        )
        # and the public API is not served there
        with pytest.raises(grpc.RpcError) as caught:
            channel.unary_unary(f"/{PUBLIC}/Remember")(b"", timeout=10)
    assert len(leased.jobs) == 1
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def test_the_internal_listener_binds_the_internal_host(
    make_config: Callable[..., Any], start_store_server: Callable[..., Any]
) -> None:
    """Bound to server.internal_host only: not reachable on another local address."""
    config = make_config(**{"server.host": "127.0.0.1", "server.internal_host": "127.0.0.2"})
    server, _ = start_store_server(config, host=None)
    port = server.app.internal_port
    socket.create_connection(("127.0.0.2", port), timeout=10).close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10)
