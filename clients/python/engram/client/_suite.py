"""How a client finds and checks the services of its store's suite (issue 34).

The store is the one address a client must be given: its SuiteService.GetSuite
gives the suite id and each service's port, so search, the pipeline and
maintenance are on the store's host at those ports unless given explicitly.
Before the client sends a service anything (its API key included), the service
must answer the gRPC health check for `engram.suite/<id>` (SERVING, or
NOT_SERVING while it drains); NOT_FOUND means it belongs to another suite:
`WrongSuite`. The health check carries no metadata. What the synchronous and the
asyncio client share; each caches the answer per channel."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2

from engram.client.errors import EngramError, WrongSuite, from_rpc_error
from engram.store.v1 import store_pb2

SERVICES = ("search", "pipeline", "maintenance")
HEALTH_PREFIX = "engram.suite/"
_CONFIRMING = (health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING)


@dataclass(frozen=True)
class Suite:
    """The store's answer: its suite id and where each service is."""

    id: str
    addresses: dict[str, str]


def suite_of(
    reply: store_pb2.GetSuiteResponse, store_host: str, explicit: dict[str, str | None]
) -> Suite:
    """The suite a GetSuite reply describes; an explicit address wins over the
    store's host and the port it reports."""
    ports = {
        "search": reply.search_port,
        "pipeline": reply.pipeline_port,
        "maintenance": reply.maintenance_port,
    }
    return Suite(
        reply.suite_id,
        {name: explicit.get(name) or f"{store_host}:{ports[name]}" for name in SERVICES},
    )


def health_request(suite: Suite) -> health_pb2.HealthCheckRequest:
    return health_pb2.HealthCheckRequest(service=HEALTH_PREFIX + suite.id)


def check_answer(service: str, address: str, suite: Suite, store_address: str, status: int) -> None:
    """Returns when the service's health confirms the suite; else WrongSuite."""
    if status not in _CONFIRMING:
        raise WrongSuite(
            service=service,
            address=address,
            suite_id=suite.id,
            store_address=store_address,
            why=f"its health check for the suite says {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}",
        )


def check_error(
    service: str, address: str, suite: Suite, store_address: str, error: grpc.RpcError
) -> EngramError:
    """The exception for a failed health check: WrongSuite when the service does
    not know the suite (NOT_FOUND) or has no health service; else the call's own
    error (UNAVAILABLE: nothing answers there)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    if code == grpc.StatusCode.NOT_FOUND:
        why = "it does not know that suite: another suite's, or one that has not reached its store"
    elif code == grpc.StatusCode.UNIMPLEMENTED:
        why = "it answers no health checks"
    else:
        return from_rpc_error(error)
    return WrongSuite(
        service=service, address=address, suite_id=suite.id, store_address=store_address, why=why
    )
