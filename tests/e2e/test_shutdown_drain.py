"""SIGTERM: health goes NOT_SERVING while the listener is still open, the server
keeps answering for `server.shutdown_drain_ms`, then the listener closes and the
process exits without waiting on open health watches."""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from e2e_helpers import Launcher
from engram.store.v1 import store_pb2, store_pb2_grpc

SERVICE = "engram.store.v1.MemoryStoreService"
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVING = health_pb2.HealthCheckResponse.SERVING


def test_sigterm_reports_not_serving_on_a_live_listener_then_closes_after_the_drain(
    launcher: Launcher, data_dir: Path
) -> None:
    store = launcher.start_store(
        data_dir,
        env={
            "ENGRAM_SERVER__SHUTDOWN_DRAIN_MS": "3000",
            # A grace period far beyond the exit wait below: if an open health
            # watch held the server until the grace ran out, the test would fail.
            "ENGRAM_SERVER__SHUTDOWN_GRACE_MS": "600000",
        },
    )
    watch = health_pb2_grpc.HealthStub(store.channel()).Watch(
        health_pb2.HealthCheckRequest(service=SERVICE), timeout=120
    )
    assert next(watch).status == SERVING
    store.signal(signal.SIGTERM)
    assert next(watch).status == NOT_SERVING

    # The drain: the listener still accepts new connections, health answers
    # NOT_SERVING (not UNAVAILABLE), and calls are still served.
    fresh = grpc.insecure_channel(store.address)
    try:
        health = health_pb2_grpc.HealthStub(fresh)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == NOT_SERVING
        assert (
            health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5).status
            == NOT_SERVING
        )
        stub = store_pb2_grpc.MemoryStoreServiceStub(fresh)
        written = stub.Remember(store_pb2.RememberRequest(content="during the drain"), timeout=5)
        assert written.memory.id
    finally:
        fresh.close()

    # After the drain the watch ends on its own and the process exits, although
    # the watch was never cancelled by the client and the grace is 10 minutes.
    with pytest.raises((StopIteration, grpc.RpcError)):
        next(watch)
    assert store.wait_exit(timeout=30) == 0, store.log()

    # Then nobody answers on that port.
    probe = grpc.insecure_channel(store.address)
    try:
        with pytest.raises(grpc.RpcError) as excinfo:
            health_pb2_grpc.HealthStub(probe).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert excinfo.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        probe.close()

    restarted = launcher.start_store(data_dir)
    got = restarted.stub().GetMemory(store_pb2.GetMemoryRequest(id=written.memory.id), timeout=10)
    assert got.memory.content == "during the drain"
