"""Shared fixtures: a real store gRPC server on port 0 over a fresh database.

The server runs in its own event loop on a background thread, so tests use the
ordinary synchronous gRPC client exactly as a user would.

The database is a SQLite file unless the test's `storage_backend` is
"postgres" (tests/store, tests/search, tests/pipeline and tests/maintenance run
every such test on both: their conftest.py parametrises it; ids end in
`[sqlite]` / `[postgres]`): then it is a fresh database on the session's real
PostgreSQL (tests/pg_server.py), named by the same `storage.path` for the test
helpers (tests/backend_db.py). `@pytest.mark.sqlite_only("why")` skips a test's
Postgres half: only for a test about SQLite itself (its file, WAL, FTS5,
sqlite-vec), never for one that merely fails on Postgres.
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

import backend_db
import pg_server
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


# ---- the backend: a SQLite file, or a database on the session's PostgreSQL ---------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`sqlite_only(reason)` skips the test's `[postgres]` id, with the reason."""
    for item in items:
        marker = item.get_closest_marker("sqlite_only")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None:
            continue
        if callspec.params.get("storage_backend") == "postgres":
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"about SQLite itself: {reason}"))


@pytest.fixture(scope="session")
def storage_backend() -> str:
    """The backend of this test's database: SQLite unless the directory's
    conftest.py imports backend_db.storage_backend, which runs both)."""
    return "sqlite"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[tuple[str, bool]]:
    """The maintenance DSN of the session's server (database `postgres`), and
    whether it is the bundled one (ours to crash-probe, see pgvector_problem)."""
    yield from pg_server.serve()


@pytest.fixture(scope="session")
def pgvector_problem(postgres_server: tuple[str, bool]) -> str | None:
    """None when pgvector's distances and HNSW run on this server; else why not
    (probed once, before the first test database: pg_dsn depends on it)."""
    return pg_server.probe_pgvector(postgres_server)


@pytest.fixture
def needs_pgvector(pgvector_problem: str | None) -> None:
    """Skip a test that computes vector distances or writes an HNSW index where
    the server's pgvector cannot (even under ENGRAM_STRICT_TESTS: the package's
    build, not the setup, is at fault, and the probe says so in the reason)."""
    if pgvector_problem is not None:
        pytest.skip(pgvector_problem)


@pytest.fixture
def pg_dsn(postgres_server: tuple[str, bool], pgvector_problem: str | None) -> Iterator[str]:
    """A DSN for a database of this test's own, dropped afterwards."""
    server, _ = postgres_server
    dsn = pg_server.create_database(server)
    try:
        yield dsn
    finally:
        pg_server.drop_database(server, dsn)


@pytest.fixture(scope="session")
def pg_databases(
    postgres_server: tuple[str, bool], pgvector_problem: str | None
) -> Iterator[pg_server.DatabaseSupply]:
    """Fresh databases for the suites' tests: copies of one migrated, empty
    database (migrating each would cost more than the test), made ahead."""
    server = postgres_server[0]
    supply = pg_server.DatabaseSupply(server, pg_server.migrated_template(server))
    yield supply
    supply.close()


def storage_overrides(path: str | Path) -> dict[str, Any]:
    """The configuration keys that put a store on the test database at `path`."""
    dsn = backend_db.dsn_of(path)
    if dsn is None:
        return {"storage.path": str(path)}
    return {"storage.path": str(path), "storage.kind": "postgres", "storage.postgres.dsn": dsn}


@pytest.fixture
def db_path(tmp_path: Path, storage_backend: str, request: pytest.FixtureRequest) -> Iterator[Path]:
    """This test's database, by its `storage.path` (on Postgres a fresh database
    registered under it: tests/backend_db.py)."""
    path = tmp_path / "engram.db"
    if storage_backend != "postgres":
        yield path
        return
    databases: pg_server.DatabaseSupply = request.getfixturevalue("pg_databases")
    dsn = databases.take()
    backend_db.register(path, dsn)
    try:
        yield path
    finally:
        backend_db.forget(path)
        pg_server.drop_database(databases.server, dsn)


@pytest.fixture
def make_config(db_path: Path) -> Callable[..., Config]:
    """Configurations over this test's database (the same one on every call)."""

    def make(**overrides: Any) -> Config:
        return load_config(environ={}, overrides={**storage_overrides(db_path), **overrides})

    return make


@pytest.fixture
def start_store_server(
    db_path: Path,
) -> Iterator[Callable[[Config], tuple[ServerThread, store_pb2_grpc.MemoryStoreServiceStub]]]:
    """Start stores on demand (public port and, unless given, internal port free ones);
    each is stopped at teardown (or earlier by `.stop()`), before the test's
    database goes (hence `db_path`)."""
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


# ---- recall (issue 3): search, pipeline, scripted providers -----------------------------


@pytest.fixture
def http_servers() -> Iterator[Callable[[Any], Any]]:
    """Start scripted HTTP servers (tests/http_fakes.py); each is closed at teardown."""
    started: list[Any] = []

    def start(server: Any) -> Any:
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


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
    storage_backend: str,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Any]]:
    """Like `recall_stack`, but lives for the whole module (one database per call)."""
    starter = _StackStarter()
    databases: list[tuple[Path, str]] = []
    supply: pg_server.DatabaseSupply | None = None
    if storage_backend == "postgres":
        supply = request.getfixturevalue("pg_databases")

    def build(
        overrides: dict[str, Any] | None = None, *, search: bool = True, pipeline: bool = False
    ) -> Any:
        path = tmp_path_factory.mktemp("recall") / "engram.db"
        if supply is not None:
            databases.append((path, supply.take()))
            backend_db.register(*databases[-1])
        config = load_config(environ={}, overrides={**storage_overrides(path), **(overrides or {})})
        return starter.build(config, search=search, pipeline=pipeline)

    yield build
    starter.close()
    for path, dsn in databases:  # (only ever taken from the supply)
        backend_db.forget(path)
        pg_server.drop_database(supply.server if supply else dsn, dsn)
