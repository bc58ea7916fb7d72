"""Fixtures for the maintenance tests: a real store (with its admin RPCs), an
optional real pipeline, and the maintenance server, all on port 0. The
maintenance app runs on its own server thread (the ServerThread class of
tests/conftest.py, reached through the store's thread to avoid importing a
second module named conftest)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from admin_helpers import AdminStore, admin_store
from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from engram.maintenance.v1 import maintenance_pb2_grpc
from recall_helpers import wait_for
from services.maintenance.app import MaintenanceApp, start_maintenance

NO_PIPELINE = "127.0.0.1:1"  # nothing listens: the pipeline is unreachable


@dataclass
class Maintained:
    st: AdminStore
    maintenance: maintenance_pb2_grpc.MaintenanceServiceStub
    app: MaintenanceApp
    thread: Any


@pytest.fixture
def maintained(
    start_store_server: Callable[..., Any],
    start_pipeline_server: Callable[..., Any],
    make_config: Callable[..., Any],
) -> Iterator[Callable[..., Maintained]]:
    """`maintained(pipeline=False, prepare=None, **overrides)`: store (+ pipeline)
    + maintenance over one configuration; without a pipeline its address is
    unreachable. `prepare(st)` runs before maintenance starts. The retention
    sweep that maintenance runs at start has finished (done or failed) when
    this returns, so it never races a test."""
    started: list[tuple[Any, grpc.Channel]] = []

    def build(
        pipeline: bool = False,
        prepare: Callable[[AdminStore], Any] | None = None,
        **overrides: Any,
    ) -> Maintained:
        st = admin_store(start_store_server, make_config, **overrides)
        if prepare is not None:
            prepare(st)
        config = make_config(
            **{
                "providers.embedding.kind": "none",
                "clients.store_address": f"127.0.0.1:{st.port}",
                "clients.store_internal_address": f"127.0.0.1:{st.internal_port}",
                "clients.pipeline_address": NO_PIPELINE,
                **overrides,
            }
        )
        if pipeline:
            server, _ = start_pipeline_server(config)
            config = config.with_overrides(
                {"clients.pipeline_address": f"127.0.0.1:{server.app.port}"}
            )
        thread = type(st.thread)(lambda: start_maintenance(config, host="127.0.0.1", port=0))
        channel = grpc.insecure_channel(f"127.0.0.1:{thread.app.port}")
        started.append((thread, channel))
        stub = maintenance_pb2_grpc.MaintenanceServiceStub(channel)
        if thread.app.background:
            wait_for(lambda: thread.app.worker.retention_runs, what="the start-up retention sweep")
        return Maintained(st, stub, thread.app, thread)

    yield build
    for thread, channel in started:
        channel.close()
        thread.stop()
