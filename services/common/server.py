"""Server bootstrap shared by every service: interceptor, health, reflection,
graceful shutdown on SIGTERM/SIGINT.

Shutdown runs in two steps. `drain`: health goes NOT_SERVING while the listener
stays open and calls are still served, so load balancers and health watchers
see the change before connections are refused. `stop`: health watches end, the
listener closes, in-flight calls get the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

from services.common.auth import Guard
from services.common.interceptors import RequestInterceptor
from services.common.startup import StartupError

log = logging.getLogger("engram.server")


class _HealthServicer(health.aio.HealthServicer):  # type: ignore[name-defined]
    """grpc's health servicer, except that Watch streams end when the server stops:
    an open watch would otherwise hold the server for its whole grace period."""

    def __init__(self) -> None:
        super().__init__()
        self._closing = asyncio.Event()

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        watching = asyncio.ensure_future(super().Watch(request, context))
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({watching, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching  # raises the watch's own error, if it failed

    def end_watches(self) -> None:
        self._closing.set()


@dataclass
class RunningServer:
    server: grpc.aio.Server
    health: _HealthServicer
    port: int
    service_names: tuple[str, ...] = ()

    async def serve(self) -> None:
        """Health SERVING, for a server started with `serving=False` once it is
        ready; ignored once draining or stopping has begun."""
        for name in ("", *self.service_names):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def drain(self, seconds: float) -> None:
        """Health goes NOT_SERVING; the listener stays open and calls are served
        for `seconds`, so watchers and load balancers see it before refusals."""
        await self.health.enter_graceful_shutdown()
        log.info("draining", extra={"drain_ms": round(seconds * 1000)})
        await asyncio.sleep(seconds)

    async def stop(self, grace_seconds: float) -> None:
        """Health NOT_SERVING (if `drain` did not already), health watches end, the
        listener closes, and in-flight calls get `grace_seconds`."""
        await self.health.enter_graceful_shutdown()
        self.health.end_watches()
        await self.server.stop(grace_seconds)


@dataclass(frozen=True)
class Listener:
    """Where and how one listener serves; `services/common/listeners.py` builds
    it from the settings. `internal`: the store's worker/admin listener (its own
    port and host, reached only by the other services), not the public one."""

    host: str
    port: int
    max_message_bytes: int
    credentials: grpc.ServerCredentials | None = None
    internal: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class ServerGroup:
    """A service's listeners (the store has a public and an internal one),
    drained and stopped together. `port` is the first (public) listener's."""

    servers: tuple[RunningServer, ...]

    @property
    def port(self) -> int:
        return self.servers[0].port

    async def serve(self) -> None:
        for server in self.servers:
            await server.serve()

    async def drain(self, seconds: float) -> None:
        for server in self.servers:
            await server.health.enter_graceful_shutdown()
        log.info("draining", extra={"drain_ms": round(seconds * 1000)})
        await asyncio.sleep(seconds)

    async def stop(self, grace_seconds: float) -> None:
        await asyncio.gather(*(server.stop(grace_seconds) for server in self.servers))


def server_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    """The options every server gets: the message limit both ways, and no
    SO_REUSEPORT (a second server on a taken port must fail, not share it)."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]


async def start_server(
    listener: Listener,
    service_names: Sequence[str],
    register: Callable[[grpc.aio.Server], None],
    *,
    serving: bool = True,
    guard: Guard | None = None,
) -> RunningServer:
    """Listen and serve `service_names` (registered by `register`) with health
    and reflection (which lists exactly these services). With `serving=False`
    health says NOT_SERVING (calls are still answered) until the caller's
    `RunningServer.serve()`. `guard`: auth on (services/common/auth.py
    `server_guard`)."""
    server = grpc.aio.server(options=server_options(listener.max_message_bytes))
    # Every handler, ours and health/reflection alike, is registered through the
    # interceptor, which wraps it once (request id, log, error mapping).
    wrapping = RequestInterceptor(guard).server_with(server)
    register(wrapping)
    health_servicer = _HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, wrapping)
    # Not reflection.enable_server_reflection: it picks the sync servicer for
    # anything that is not a grpc.aio.Server instance, such as the wrapper.
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        ReflectionServicer(
            [
                *service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ]
        ),
        wrapping,
    )
    if listener.credentials is None:
        bound = server.add_insecure_port(listener.address)
    else:
        bound = server.add_secure_port(listener.address, listener.credentials)
    if bound == 0:
        raise StartupError(f"cannot listen on {listener.address}")
    running = RunningServer(server, health_servicer, bound, tuple(service_names))
    if not serving:  # before the listener opens: no check ever sees SERVING too early
        for name in ("", *service_names):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    if serving:
        await running.serve()
    return running


async def wait_for_shutdown_signal() -> None:
    """Returns on the first SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutdown signal received")


async def cancel_tasks(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait for them; a task that already failed
    was logged by its own loop, so its error is not raised again here."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
