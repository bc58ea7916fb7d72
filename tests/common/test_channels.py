"""The channel helper every service-to-service call goes through
(services/common/channels.py), against real gRPC servers: a scripted one that
records what each call carried, and a real store for the message limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.channels import call_kind, channel
from services.common.config import Config, load_config
from services.common.logs import request_id_var
from services.common.server import Listener, start_server

LEASE = "/engram.store.internal.v1.JobQueueService/LeaseJobs"
ADMIN = "/engram.store.internal.v1.StoreAdminService/SweepRetention"
OTHER = "/engram.pipeline.v1.PipelineService/GetStatus"


@dataclass
class Seen:
    metadata: dict[str, str]
    time_remaining: float | None


@dataclass
class ScriptedServer:
    """Answers every unary method with empty bytes after `fail_first` UNAVAILABLE
    answers, and records each call's metadata and remaining deadline."""

    fail_first: int = 0
    calls: list[Seen] = field(default_factory=list)

    def handler(self) -> grpc.GenericRpcHandler:
        server = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details: grpc.HandlerCallDetails) -> Any:
                async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                    server.calls.append(
                        Seen(
                            {k: str(v) for k, v in context.invocation_metadata() or ()},
                            context.time_remaining(),
                        )
                    )
                    if len(server.calls) <= server.fail_first:
                        await context.abort(grpc.StatusCode.UNAVAILABLE, "not yet")
                    return b""

                return grpc.unary_unary_rpc_method_handler(answer)

        return Handler()


@pytest.fixture
def scripted() -> Iterator[Callable[[ScriptedServer], int]]:
    """Run ScriptedServers on free ports, on a loop of their own in a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[grpc.aio.Server] = []

    def start(script: ScriptedServer) -> int:
        async def run() -> int:
            server = grpc.aio.server()
            server.add_generic_rpc_handlers((script.handler(),))
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            servers.append(server)
            return port

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=30)

    yield start
    for server in servers:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(timeout=30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def call(config: Config, port: int, method: str, **kwargs: Any) -> None:
    """One call through the helper's channel, on a fresh event loop."""

    async def go() -> None:
        ch = channel(config, f"127.0.0.1:{port}")
        try:
            await ch.unary_unary(method)(b"", **kwargs)
        finally:
            await ch.close()

    asyncio.run(go())


def config_of(**overrides: Any) -> Config:
    return load_config(environ={}, overrides=overrides)


def test_call_kinds() -> None:
    assert call_kind(LEASE) == "lease"
    assert call_kind("/engram.store.internal.v1.JobQueueService/GetQueueStats") == "lease"
    assert call_kind(ADMIN) == "admin"
    assert call_kind("/engram.store.internal.v1.DocumentStoreService/WriteDocumentChunk") == (
        "write"
    )
    assert call_kind("/engram.search.v1.SearchService/Recall") == "recall"
    assert call_kind(OTHER) == "default"


def test_each_call_gets_the_deadline_of_its_kind_unless_the_caller_set_one(
    scripted: Callable[[ScriptedServer], int],
) -> None:
    script = ScriptedServer()
    port = scripted(script)
    config = config_of(**{"clients.deadlines.lease_ms": 3000, "clients.deadlines.admin_ms": 900000})
    call(config, port, LEASE)
    call(config, port, ADMIN)
    call(config, port, ADMIN, timeout=2.0)
    lease, admin, explicit = (seen.time_remaining for seen in script.calls)
    # gRPC carries a timeout rounded up to its wire unit, so the server may see a little
    # more than was set (2.0095 s for 2 s, 900.999 s for 900 s); the kinds stay apart
    assert lease is not None and 0 < lease <= 3.05
    assert admin is not None and 3.05 < admin <= 901.0
    assert explicit is not None and 0 < explicit <= 2.05


def test_request_id_is_forwarded_or_made_and_the_service_key_is_carried(
    scripted: Callable[[ScriptedServer], int],
) -> None:
    script = ScriptedServer()
    port = scripted(script)
    keyed = config_of(**{"auth.service_key": "svc-key-0123456789abcdef0123456789abcdef"})

    def with_request_id() -> None:
        token = request_id_var.set("req-abc")
        try:
            call(keyed, port, OTHER)
        finally:
            request_id_var.reset(token)

    with_request_id()
    call(config_of(), port, OTHER)
    forwarded, made = (seen.metadata for seen in script.calls)
    assert forwarded["x-request-id"] == "req-abc"
    assert forwarded["authorization"] == "Bearer svc-key-0123456789abcdef0123456789abcdef"
    assert made["x-request-id"] not in ("", "-", "req-abc")
    assert "authorization" not in made


def test_a_call_made_for_an_rpc_ends_by_that_rpcs_deadline(
    scripted: Callable[[ScriptedServer], int],
) -> None:
    """A relay served through start_server calls on through the helper: the onward
    call carries the caller's request id and no later deadline than the caller's."""
    script = ScriptedServer()
    port = scripted(script)
    config = config_of(**{"clients.deadlines.default_ms": 600000})

    class Relay(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> Any:
            async def relay(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                ch = channel(config, f"127.0.0.1:{port}")
                try:
                    await ch.unary_unary(OTHER)(b"")
                finally:
                    await ch.close()
                return b""

            return grpc.unary_unary_rpc_method_handler(relay)

    async def go() -> None:
        relay = await start_server(
            Listener("127.0.0.1", 0, max_message_bytes=LIMIT),
            [],
            lambda s: s.add_generic_rpc_handlers((Relay(),)),
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{relay.port}") as ch:
                await ch.unary_unary("/t.Relay/Call")(
                    b"", timeout=5.0, metadata=(("x-request-id", "relayed-1"),)
                )
        finally:
            await relay.stop(0)

    asyncio.run(go())
    (onward,) = script.calls
    assert onward.metadata["x-request-id"] == "relayed-1"
    # within the caller's 5 s, give or take gRPC's rounding up of a timeout to its
    # wire unit on each of the two hops (5.0086 s seen); the 600 s default is far off
    assert onward.time_remaining is not None and 0 < onward.time_remaining <= 5.05


def test_unavailable_is_retried_by_the_channels_retry_policy(
    scripted: Callable[[ScriptedServer], int],
) -> None:
    script = ScriptedServer(fail_first=2)
    port = scripted(script)
    call(config_of(), port, OTHER)  # succeeds on the third attempt
    assert len(script.calls) == 3
    assert script.calls[2].metadata.get("grpc-previous-rpc-attempts") == "2"


def test_unavailable_past_the_attempts_reaches_the_caller(
    scripted: Callable[[ScriptedServer], int],
) -> None:
    script = ScriptedServer(fail_first=100)
    port = scripted(script)
    config = config_of(**{"clients.retry.max_attempts": 3})
    errors: list[grpc.aio.AioRpcError] = []

    def run() -> None:
        try:
            call(config, port, OTHER)
        except grpc.aio.AioRpcError as exc:
            errors.append(exc)

    run()
    assert [e.code() for e in errors] == [grpc.StatusCode.UNAVAILABLE]
    assert len(script.calls) == 3


# ---- message-size limits on every server and channel --------------------------------

LIMIT = 4096


def test_a_request_over_the_servers_limit_fails_naming_the_limit(
    make_config: Callable[..., Config], start_store_server: Callable[..., Any], db_path: Any
) -> None:
    from store_helpers import remember, table_counts

    _, store = start_store_server(make_config(**{"server.max_message_bytes": LIMIT}))
    remember(store, "a small memory fits")
    before = table_counts(db_path)
    with pytest.raises(grpc.RpcError) as caught:
        store.Remember(store_pb2.RememberRequest(content="x" * (LIMIT + 100)), timeout=10)
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(LIMIT) in error.details()
    assert table_counts(db_path) == before


def test_a_request_over_the_channels_limit_fails_naming_the_limit(
    make_config: Callable[..., Config], start_store_server: Callable[..., Any], db_path: Any
) -> None:
    """The channel helper's own limit: the request never leaves the caller."""
    from store_helpers import table_counts

    server, _ = start_store_server(make_config())
    before = table_counts(db_path)
    config = config_of(**{"server.max_message_bytes": LIMIT})
    errors: list[grpc.aio.AioRpcError] = []

    async def go() -> None:
        ch = channel(config, f"127.0.0.1:{server.app.port}")
        try:
            await store_pb2_grpc.MemoryStoreServiceStub(ch).Remember(
                store_pb2.RememberRequest(content="x" * (LIMIT + 100))
            )
        except grpc.aio.AioRpcError as exc:
            errors.append(exc)
        finally:
            await ch.close()

    asyncio.run(go())
    assert [e.code() for e in errors] == [grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert str(LIMIT) in (errors[0].details() or "")
    assert table_counts(db_path) == before
