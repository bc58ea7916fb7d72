"""Search waits for the schema version the code is written for (issue 36, item 2):
services/storage/schema.py's SCHEMA_VERSION, not an older one. It used to wait
for version 12 while selecting columns migrations 14, 15 and 19 add, so a search
started on a database at 12-18 went on to serve and failed every Recall with
"no such column". Started on such a database it now waits, as it does for a
database the store has not created yet, and serves once the store has migrated it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from free_ports import free_port
from server_thread import ServerThread

from backend_db import migrate_to
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc
from http_fakes import VectorBook, ollama_server
from recall_helpers import fake_embedding_overrides
from services.common.config import load_config
from services.search.app import start_search
from services.storage.schema import SCHEMA_VERSION
from services.storage.sqlite_migrations import MIGRATIONS
from services.store.app import start_store

# memory_categories_and_class and memory_decay (columns search selects) not applied yet
OLDER = [name for name, _ in MIGRATIONS].index("memory_categories_and_class")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def older_database(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The storage keys of a database a store of an older Engram migrated to OLDER."""
    path = tmp_path / "engram.db"
    if request.param == "sqlite":
        migrate_to(OLDER, path=path)
        return {"storage.path": str(path)}
    dsn = request.getfixturevalue("pg_dsn")
    migrate_to(OLDER, dsn=dsn)
    return {"storage.path": str(path), "storage.kind": "postgres", "storage.postgres.dsn": dsn}


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a thread of its own, for a search whose start does not return yet."""
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=10)
    running.close()


def until(condition: Callable[[], bool]) -> None:
    """Poll until `condition` holds (the deadline only keeps a broken start from hanging)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_search_started_on_an_older_schema_waits_for_the_store_to_migrate_it(
    older_database: dict[str, Any],
    loop: asyncio.AbstractEventLoop,
    http_servers: Callable[[Any], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert OLDER < SCHEMA_VERSION
    embedder = http_servers(ollama_server(VectorBook()))
    internal = free_port()  # the store's internal listener, which search is told before it runs
    config = load_config(
        environ={},
        overrides={
            **older_database,
            **fake_embedding_overrides(embedder.url),
            "clients.store_internal_address": f"127.0.0.1:{internal}",
        },
    )
    caplog.set_level("INFO", logger="engram.search")

    def waiting() -> bool:
        return any(r.getMessage().startswith("waiting for the store") for r in caplog.records)

    starting = asyncio.run_coroutine_threadsafe(
        start_search(config, host="127.0.0.1", port=0), loop
    )
    store = None
    try:
        until(lambda: starting.done() or waiting())
        # neither serving on the older schema nor failing: waiting, as for no database at all
        assert not starting.done()
        store = ServerThread(
            lambda: start_store(config, host="127.0.0.1", port=0, internal_port=internal)
        )  # migrates the database to SCHEMA_VERSION
        app = starting.result(timeout=60)
        with (
            grpc.insecure_channel(f"127.0.0.1:{store.app.port}") as store_channel,
            grpc.insecure_channel(f"127.0.0.1:{app.port}") as search_channel,
        ):
            store_pb2_grpc.MemoryStoreServiceStub(store_channel).Remember(
                store_pb2.RememberRequest(namespace="default", content="the zebra sleeps standing")
            )
            reply = search_pb2_grpc.SearchServiceStub(search_channel).Recall(
                search_pb2.RecallRequest(namespace="default", query="zebra", limit=5), timeout=30
            )
        assert [r.memory.content for r in reply.results] == ["the zebra sleeps standing"]
    finally:
        if starting.done() and not starting.cancelled() and starting.exception() is None:
            asyncio.run_coroutine_threadsafe(starting.result().stop(1.0), loop).result(timeout=30)
        else:
            starting.cancel()
        if store is not None:
            store.stop()
