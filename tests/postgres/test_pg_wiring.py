"""The store and search on PostgreSQL (`storage.kind: postgres`): configuration,
start-up through start_store (migrations, the reader role, restart), and the core
RPCs through real gRPC servers on a real PostgreSQL database."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from engram.store.v1 import store_pb2
from services.common.config import Config, ConfigError, load_config
from store_helpers import remember


@pytest.fixture
def pg_config(tmp_path: Path, pg_dsn: str) -> Callable[..., Config]:
    """A store configuration on this test's PostgreSQL database."""

    def make(**overrides: Any) -> Config:
        return load_config(
            environ={},
            overrides={
                "storage.path": str(tmp_path / "unused.db"),
                "storage.kind": "postgres",
                "storage.postgres.dsn": pg_dsn,
                **overrides,
            },
        )

    return make


# ---- configuration ---------------------------------------------------------------------


def test_postgres_needs_a_dsn_that_parses() -> None:
    with pytest.raises(ConfigError, match=r"storage\.postgres\.dsn: required"):
        load_config(environ={}, overrides={"storage.kind": "postgres"})
    with pytest.raises(ConfigError, match=r"storage\.postgres\.reader_dsn: not a connection"):
        load_config(
            environ={},
            overrides={
                "storage.kind": "postgres",
                "storage.postgres.dsn": "host=db dbname=engram",
                "storage.postgres.reader_dsn": "nonsense",
            },
        )
    with pytest.raises(ConfigError, match=r"storage\.kind"):
        load_config(environ={}, overrides={"storage.kind": "mysql"})


def test_the_environment_selects_postgres_and_the_reader_defaults_to_the_store() -> None:
    config = load_config(
        environ={
            "ENGRAM_STORAGE__KIND": "postgres",
            "ENGRAM_STORAGE__POSTGRES__DSN": "postgresql://engram@db/engram",
            "ENGRAM_STORAGE__POSTGRES__POOL_SIZE": "8",
        }
    )
    assert config.storage.kind == "postgres"
    assert config.storage.postgres.pool_size == 8
    assert config.storage.reader_dsn == "postgresql://engram@db/engram"
    assert load_config(environ={}).storage.kind == "sqlite"


# ---- the store on Postgres -------------------------------------------------------------


def test_the_store_serves_remember_get_and_list(
    pg_config: Callable[..., Config], start_store_server: Any, pg_dsn: str
) -> None:
    server, stub = start_store_server(pg_config())
    first = remember(stub, "Kafka retention is seven days").memory
    second = remember(stub, "The build uses Bazel.", importance=0.4).memory
    again = remember(stub, "  kafka RETENTION is seven days!! ")
    assert again.deduplicated and again.memory.id == first.id
    got = stub.GetMemory(store_pb2.GetMemoryRequest(id=first.id)).memory
    assert got == first
    listed = stub.ListMemories(store_pb2.ListMemoriesRequest(page_size=10)).memories
    assert [m.id for m in listed] == [second.id, first.id]
    assert server.app.reads.dialect == "postgres"
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 2
        jobs = conn.execute("SELECT job_type, status FROM memory_jobs").fetchall()
    assert sorted(jobs) == [("embed", "pending"), ("embed", "pending")]
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetMemory(store_pb2.GetMemoryRequest(id="00000000-0000-7000-8000-000000000000"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
