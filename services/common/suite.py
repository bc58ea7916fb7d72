"""Suite identity: a suite's services only ever work with that suite's store.

Every database holds a random suite id (the store's migration `suite_identity`), and the
store answers gRPC health checks for the service name `engram.suite/<id>`: SERVING for
its own id, NOT_FOUND for any other. `engram up` reads the id and gives it to the other
services as `clients.suite_id`; each of them checks its store before doing any work and
refuses to start against another suite's store (say, one left on the default ports when
this suite was moved). Plain health protocol: nothing is revealed to a caller that does
not already know the id.

Clients check the other way round (issue 34): the store's SuiteService.GetSuite tells a
client holding a key the suite id and its services' ports, and search, the pipeline and
maintenance each answer `engram.suite/<id>` for the suite of the store they work with
(`clients.suite_id`, or when unset the id their store's GetSuite gives), so a client
checks a service before it sends that service its API key (engram.client).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram.store.v1 import store_pb2, store_pb2_grpc

HEALTH_PREFIX = "engram.suite/"
ANSWER_WAIT_S = 30.0  # how long a starting service waits for its store to answer
CHECK_TIMEOUT_S = 2.0
RETRY_S = 0.5
LEARN_RETRY_MAX_S = 5.0  # a service asking a store that is not up yet, at most this often


class WrongSuite(Exception):
    """The store reached is not this suite's store (or never confirmed it)."""


def health_name(suite_id: str) -> str:
    return HEALTH_PREFIX + suite_id


async def announce_suite(health: Any, suite_id: str) -> None:
    """The store's side: SERVING for its own suite id (NOT_FOUND for any other)."""
    await health.set(health_name(suite_id), health_pb2.HealthCheckResponse.SERVING)


async def verify_store(channel: grpc.aio.Channel, suite_id: str, address: str) -> None:
    """Return once the store at `address` confirms `suite_id`; raise WrongSuite if it
    belongs to another suite or does not answer within ANSWER_WAIT_S. An empty
    `suite_id` (a service started on its own) checks nothing."""
    if not suite_id:
        return
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service=health_name(suite_id))
    deadline = time.monotonic() + ANSWER_WAIT_S
    while True:
        try:
            reply = await stub.Check(request, timeout=CHECK_TIMEOUT_S)
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                raise WrongSuite(
                    f"the store at {address} belongs to another suite (expected suite "
                    f"{suite_id}); refusing to work with it"
                ) from None
        if time.monotonic() > deadline:
            raise WrongSuite(
                f"the store at {address} did not confirm suite {suite_id} "
                f"within {ANSWER_WAIT_S:.0f} s"
            )
        await asyncio.sleep(RETRY_S)


async def _ask_suite_id(channel: grpc.aio.Channel) -> str:
    reply = await store_pb2_grpc.SuiteServiceStub(channel).GetSuite(
        store_pb2.GetSuiteRequest(), timeout=CHECK_TIMEOUT_S
    )
    return reply.suite_id


async def own_suite_id(channel: grpc.aio.Channel, configured: str, address: str) -> str:
    """The suite this service answers for: `configured` once the store at `address`
    confirms it (verify_store), else what the store's GetSuite says at a first try
    ("" when it does not answer yet: `announce_own_suite` keeps asking)."""
    if configured:
        await verify_store(channel, configured, address)
        return configured
    try:
        return await _ask_suite_id(channel)
    except grpc.aio.AioRpcError:
        return ""


async def announce_own_suite(
    health: Any, channel: grpc.aio.Channel, suite_id: str
) -> asyncio.Task[None] | None:
    """This service's health says SERVING for `engram.suite/<suite_id>`; when the id is
    not known yet, a task (for the caller to cancel at shutdown) asks the store until
    it answers, then says so."""
    if suite_id:
        await announce_suite(health, suite_id)
        return None

    async def learn() -> None:
        wait = RETRY_S
        while True:
            await asyncio.sleep(wait)
            try:
                await announce_suite(health, await _ask_suite_id(channel))
                return
            except grpc.aio.AioRpcError:
                wait = min(wait * 2, LEARN_RETRY_MAX_S)

    return asyncio.create_task(learn())
