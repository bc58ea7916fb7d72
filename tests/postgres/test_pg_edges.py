"""The Postgres backend's edges, through real gRPC servers on a real PostgreSQL
database: a read the server cancels (statement_timeout), the collation that
orders text, connect timeouts and the reader role's grant."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

import backend_db
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
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
