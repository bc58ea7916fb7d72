"""Shared fixtures: a real store gRPC server on port 0 over a fresh SQLite file.

The server runs in its own event loop on a background thread, so tests use the
ordinary synchronous gRPC client exactly as a user would.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from server_thread import ServerThread  # re-exported: tests reach it as conftest's

from engram.store.v1 import store_pb2_grpc
from services.common.config import Config, load_config
from services.store.app import start_store


@pytest.fixture(scope="session", autouse=True)
def metrics_endpoints_off() -> Iterator[None]:
    """Every engram process a test starts inherits server.metrics_ports.* = 0: the
    default metrics ports are fixed, and suites running side by side (tests, other
    checkouts) would take them from one another. tests/deploy/test_metrics_endpoints.py
    turns them on, on free ports; tests/e2e/e2e_helpers.clean_env sets the same."""
    names = [
        f"ENGRAM_SERVER__METRICS_PORTS__{n}" for n in ("STORE", "SEARCH", "PIPELINE", "MAINTENANCE")
    ]
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(dict.fromkeys(names, "0"))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    def make(**overrides: Any) -> Config:
        return load_config(
            environ={}, overrides={"storage.path": str(tmp_path / "engram.db"), **overrides}
        )

    return make


@pytest.fixture
def start_store_server() -> Iterator[
    Callable[[Config], tuple[ServerThread, store_pb2_grpc.MemoryStoreServiceStub]]
]:
    """Start stores on demand (public port and, unless given, internal port free ones);
    each is stopped at teardown (or earlier by `.stop()`)."""
    started: list[tuple[ServerThread, grpc.Channel]] = []

    def start(
        config: Config, *, internal_port: int = 0, host: str | None = "127.0.0.1"
    ) -> tuple[ServerThread, store_pb2_grpc.MemoryStoreServiceStub]:
        """`host=None`: each listener binds its configured host."""
        server = ServerThread(
            lambda: start_store(config, host=host, port=0, internal_port=internal_port)
        )
        channel = grpc.insecure_channel(f"127.0.0.1:{server.app.port}")
        started.append((server, channel))
        return server, store_pb2_grpc.MemoryStoreServiceStub(channel)

    yield start
    for server, channel in started:
        channel.close()
        server.stop()


@pytest.fixture
def store(
    make_config: Callable[..., Config], start_store_server: Any
) -> store_pb2_grpc.MemoryStoreServiceStub:
    """A stub connected to a fresh store with default configuration."""
    _, stub = start_store_server(make_config())
    return stub


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "engram.db"


# ---- recall (issue 3): search, pipeline, scripted providers -----------------------------


@pytest.fixture
def http_servers() -> Iterator[Callable[[Any], Any]]:
    """Start scripted HTTP servers (tests/http_fakes.py); each is stopped at teardown."""
    started: list[Any] = []

    def start(server: Any) -> Any:
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def local_embedding() -> Any:
    """One loaded all-MiniLM-L6-v2 on the default runtime for the whole session
    (loading takes seconds; later instances in this process reuse the imported libraries)."""
    from services.common.config import load_config
    from services.common.providers.embedding import embedding_provider

    provider = embedding_provider(load_config(environ={}))
    asyncio.run(provider.warm_up())
    return provider


@pytest.fixture
def start_search_server(start_store_server: Any) -> Iterator[Callable[[Config], Any]]:
    """Start search services on port 0 (stopped before the stores they read)."""
    from engram.search.v1 import search_pb2_grpc
    from services.search.app import start_search

    started: list[tuple[ServerThread, grpc.Channel]] = []

    def start(config: Config) -> tuple[ServerThread, Any]:
        server = ServerThread(lambda: start_search(config, host="127.0.0.1", port=0))
        channel = grpc.insecure_channel(f"127.0.0.1:{server.app.port}")
        started.append((server, channel))
        return server, search_pb2_grpc.SearchServiceStub(channel)

    yield start
    for server, channel in started:
        channel.close()
        server.stop()


@pytest.fixture
def start_pipeline_server(start_store_server: Any) -> Iterator[Callable[[Config], Any]]:
    """Start pipelines on port 0 (stopped before the stores they lease from)."""
    from engram.pipeline.v1 import pipeline_pb2_grpc
    from services.pipeline.app import start_pipeline

    started: list[tuple[ServerThread, grpc.Channel]] = []

    def start(config: Config) -> tuple[ServerThread, Any]:
        server = ServerThread(lambda: start_pipeline(config, host="127.0.0.1", port=0))
        channel = grpc.insecure_channel(f"127.0.0.1:{server.app.port}")
        started.append((server, channel))
        return server, pipeline_pb2_grpc.PipelineServiceStub(channel)

    yield start
    for server, channel in started:
        channel.close()
        server.stop()


class _StackStarter:
    """Starts store (+ search, + pipeline) servers over one file and stops them
    all, pipeline and search before their store."""

    def __init__(self) -> None:
        self._threads: list[ServerThread] = []
        self._channels: list[grpc.Channel] = []

    def build(self, config: Config, *, search: bool, pipeline: bool) -> Any:
        from engram.pipeline.v1 import pipeline_pb2_grpc
        from engram.search.v1 import search_pb2_grpc
        from recall_helpers import Stack
        from services.pipeline.app import start_pipeline
        from services.search.app import start_search

        store_thread = self._start(
            lambda: start_store(config, host="127.0.0.1", port=0, internal_port=0)
        )
        config = config.with_overrides(
            {
                "clients.store_address": f"127.0.0.1:{store_thread.app.port}",
                "clients.store_internal_address": f"127.0.0.1:{store_thread.app.internal_port}",
            }
        )
        store_channel = self._channel(store_thread)
        stack = Stack(
            config=config,
            store=store_pb2_grpc.MemoryStoreServiceStub(store_channel),
            jobs_channel=self._channel(store_thread, internal=True),
            store_thread=store_thread,
        )
        if search:
            stack.search_thread = self._start(
                lambda: start_search(config, host="127.0.0.1", port=0)
            )
            stack.search = search_pb2_grpc.SearchServiceStub(self._channel(stack.search_thread))
        if pipeline:
            stack.pipeline_thread = self._start(
                lambda: start_pipeline(config, host="127.0.0.1", port=0)
            )
            stack.pipeline = pipeline_pb2_grpc.PipelineServiceStub(
                self._channel(stack.pipeline_thread)
            )
        return stack

    def _start(self, factory: Callable[[], Any]) -> ServerThread:
        thread = ServerThread(factory)
        self._threads.append(thread)
        return thread

    def _channel(self, thread: ServerThread, *, internal: bool = False) -> grpc.Channel:
        """A channel to the thread's server (`internal`: the store's internal listener)."""
        port = thread.app.internal_port if internal else thread.app.port
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._channels.append(channel)
        return channel

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        for thread in reversed(self._threads):
            thread.stop()


@pytest.fixture
def recall_stack(make_config: Callable[..., Config]) -> Iterator[Callable[..., Any]]:
    """`recall_stack(overrides, search=True, pipeline=False)`: a store (+ search,
    + pipeline) over this test's SQLite file (the same file on every call, so a
    second call after `stack.store_thread.stop()` is a restart); see
    tests/recall_helpers.py (Stack) for what the result offers."""
    starter = _StackStarter()

    def build(
        overrides: dict[str, Any] | None = None, *, search: bool = True, pipeline: bool = False
    ) -> Any:
        return starter.build(make_config(**(overrides or {})), search=search, pipeline=pipeline)

    yield build
    starter.close()


@pytest.fixture(scope="module")
def module_recall_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Any]]:
    """Like `recall_stack`, but lives for the whole module (one file per call)."""
    starter = _StackStarter()

    def build(
        overrides: dict[str, Any] | None = None, *, search: bool = True, pipeline: bool = False
    ) -> Any:
        path = tmp_path_factory.mktemp("recall") / "engram.db"
        config = load_config(environ={}, overrides={"storage.path": str(path), **(overrides or {})})
        return starter.build(config, search=search, pipeline=pipeline)

    yield build
    starter.close()
