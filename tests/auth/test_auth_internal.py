"""With auth on, the store's internal listener (job queue, documents, admin, access
tracking) takes only the services' own credential: no key is UNAUTHENTICATED, any
API key (an admin for every namespace included) is PERMISSION_DENIED, reflection
too, and nothing is written. Health stays open."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from auth_suite import AuthSuite, bearer
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import access_pb2, admin_pb2, dedup_pb2, documents_pb2, job_queue_pb2
from engram.store.internal.v1 import job_queue_pb2_grpc as jq_grpc
from engram.store.v1 import store_pb2 as pb
from engram.store.v1 import store_pb2_grpc
from grpc_helpers import error_of
from store_helpers import rows

INTERNAL_MODULES = (job_queue_pb2, documents_pb2, admin_pb2, access_pb2, dedup_pb2)
UNAUTHENTICATED = (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
DENIED = (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")


def _internal_methods() -> list[tuple[str, Any, Any]]:
    """(full method name, request class, response class) of every internal RPC."""
    from google.protobuf import message_factory

    found = []
    for module in INTERNAL_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found.append(
                    (
                        f"/{service.full_name}/{method.name}",
                        message_factory.GetMessageClass(method.input_type),
                        message_factory.GetMessageClass(method.output_type),
                    )
                )
    return found


def _call(channel: grpc.Channel, method: str, request: Any, response: Any, md: Any) -> Any:
    return channel.unary_unary(
        method,
        request_serializer=request.SerializeToString,
        response_deserializer=response.FromString,
    )(request, metadata=md, timeout=10)


def _state(suite: AuthSuite) -> list[Any]:
    """Every job's state and every memory's version and access count: what an
    internal call writes (a lease, a completion, an access) shows here."""
    return [
        *map(
            tuple, rows(suite.db_path, "SELECT id, status, lease_token, attempts FROM memory_jobs")
        ),
        *map(tuple, rows(suite.db_path, "SELECT id, version, access_count FROM memories")),
    ]


def _request(request_class: Any, memory_id: str) -> Any:
    """The RPC's request, filled in where an empty one would do nothing anyway."""
    if request_class is job_queue_pb2.LeaseJobsRequest:
        return request_class(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=10)
    if request_class is access_pb2.RecordAccessRequest:
        return request_class(namespace="team-a", memory_ids=[memory_id])
    return request_class()


@pytest.fixture
def suite(auth_store: Callable[..., AuthSuite]) -> AuthSuite:
    suite = auth_store(**{"memory.pipelineV2.enabled": True})  # Remember queues an extract job
    store = store_pb2_grpc.MemoryStoreServiceStub(suite.channel("store"))
    suite.memory_id = store.Remember(
        pb.RememberRequest(namespace="team-a", content="an internal listener test memory"),
        metadata=bearer(suite.service_key),
    ).memory.id
    return suite


def test_every_internal_rpc_refuses_every_api_key_and_writes_nothing(suite: AuthSuite) -> None:
    channel = suite.channel("store_internal")
    admin = bearer(suite.key("admin", "*", name="root"))
    methods = _internal_methods()
    assert len(methods) >= 15  # job queue, documents, admin, access
    for method, request_class, response in methods:
        request = _request(request_class, suite.memory_id)
        before = _state(suite)
        for md, expected in (((), UNAUTHENTICATED), (admin, DENIED)):
            call = (method, request, response, md)
            code, reason, _ = error_of(lambda c=call: _call(channel, *c))
            assert (code, reason) == expected, method
        assert _state(suite) == before, method
    # the same lease with the service key does write: the check above could fail
    leased = _call(
        channel,
        "/engram.store.internal.v1.JobQueueService/LeaseJobs",
        _request(job_queue_pb2.LeaseJobsRequest, ""),
        job_queue_pb2.LeaseJobsResponse,
        bearer(suite.service_key),
    )
    assert len(leased.jobs) == 1 and _state(suite) != before


def test_the_service_key_is_served_on_the_internal_listener(suite: AuthSuite) -> None:
    stats = jq_grpc.JobQueueServiceStub(suite.channel("store_internal")).GetQueueStats(
        job_queue_pb2.GetQueueStatsRequest(), metadata=bearer(suite.service_key), timeout=10
    )
    assert stats.live_memory_count == 1


def test_internal_reflection_takes_only_the_service_key_and_health_is_open(
    suite: AuthSuite,
) -> None:
    channel = suite.channel("store_internal")
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    ask = reflection_pb2.ServerReflectionRequest(list_services="")
    admin = bearer(suite.key("admin", "*", name="root"))
    code, reason, _ = error_of(
        lambda: list(reflect.ServerReflectionInfo(iter([ask]), metadata=admin))
    )
    assert (code, reason) == DENIED
    answers = list(reflect.ServerReflectionInfo(iter([ask]), metadata=bearer(suite.service_key)))
    names = {s.name for s in answers[0].list_services_response.service}
    assert "engram.store.internal.v1.JobQueueService" in names


def test_internal_rpcs_are_unimplemented_on_the_public_port_even_with_the_service_key(
    suite: AuthSuite,
) -> None:
    channel = suite.channel("store")
    for md in ((), bearer(suite.service_key)):
        with pytest.raises(grpc.RpcError) as caught:
            jq_grpc.JobQueueServiceStub(channel).GetQueueStats(
                job_queue_pb2.GetQueueStatsRequest(), metadata=md, timeout=10
            )
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
