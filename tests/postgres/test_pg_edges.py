"""The Postgres backend's edges, through real gRPC servers on a real PostgreSQL
database: a read the server cancels (statement_timeout), the collation that
orders text, connect timeouts and the reader role's grant."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

import backend_db
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from services.common.config import Config
from services.common.db import StorageUnavailable, open_read_pool
from services.common.server import StartupError
from services.store.app import _reconnect_postgres, start_store
from store_helpers import remember


@pytest.fixture(scope="module")
def storage_backend() -> str:
    """Every test here on Postgres (make_config puts the store on this test's database)."""
    return "postgres"


@pytest.fixture
def dsn(db_path: Path) -> str:
    found = backend_db.dsn_of(db_path)
    assert found is not None
    return found


# ---- a read the server cancels ---------------------------------------------------------


def test_a_read_past_the_statement_timeout_is_deadline_exceeded_with_its_reason(
    recall_stack: Callable[..., Any], dsn: str
) -> None:
    """Was INTERNAL. The reads are held by a lock on memories, so they can only end
    by storage.postgres.statement_timeout_ms; once it is released they succeed."""
    stack = recall_stack(
        {"storage.postgres.statement_timeout_ms": 1000, "providers.embedding.kind": "none"}
    )
    kept = remember(stack.store, "Kafka retention is seven days").memory
    expected = (grpc.StatusCode.DEADLINE_EXCEEDED, "STATEMENT_TIMEOUT", [])
    with psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        listed = error_of(
            lambda: stack.store.ListMemories(store_pb2.ListMemoriesRequest(page_size=10))
        )
        got = error_of(lambda: stack.store.GetMemory(store_pb2.GetMemoryRequest(id=kept.id)))
        recalled = error_of(
            lambda: stack.search.Recall(search_pb2.RecallRequest(query="Kafka retention"))
        )
        locker.rollback()
    assert (listed, got, recalled) == (expected, expected, expected)
    listed_after = stack.store.ListMemories(store_pb2.ListMemoriesRequest(page_size=10))
    assert [m.id for m in listed_after.memories] == [kept.id]


# ---- a server that does not answer -----------------------------------------------------


@pytest.fixture
def silent_dsn() -> Iterator[str]:
    """A DSN whose server takes the TCP connection and never answers (the kernel
    completes the handshake of a socket that listens but never accepts): without a
    connect timeout, libpq would wait for it for ever."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        yield f"host=127.0.0.1 port={port} dbname=engram user=engram password=hunter2"


def test_a_server_that_does_not_answer_fails_every_connect_after_connect_timeout(
    make_config: Callable[..., Config], silent_dsn: str
) -> None:
    config = make_config(
        **{"storage.postgres.dsn": silent_dsn, "storage.postgres.connect_timeout_s": 2}
    )
    with pytest.raises(StartupError, match=r"engram@127\.0\.0\.1:\d+/engram: .*timeout") as bad:
        asyncio.run(start_store(config, host="127.0.0.1", port=0, internal_port=0))
    assert "hunter2" not in str(bad.value)
    with pytest.raises(psycopg.OperationalError, match="timeout"):
        _reconnect_postgres(config)  # the writer's, after a lost connection

    async def pool() -> None:
        await open_read_pool(config.storage, service="search")

    with pytest.raises(StorageUnavailable):
        asyncio.run(pool())
