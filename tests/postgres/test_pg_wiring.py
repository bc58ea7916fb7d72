"""The store and search on PostgreSQL (`storage.kind: postgres`): configuration,
start-up through start_store (migrations, the reader role, restart), and the core
RPCs through real gRPC servers on a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from pg_cluster import terminate
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from engram.store.v1 import store_pb2
from services.cli import main as cli
from services.common.config import Config, ConfigError, load_config
from services.common.metrics import queue_depth_source
from services.common.server import StartupError
from services.storage import pg
from services.storage.db import backend_for
from services.storage.dialect import POSTGRES
from services.storage.pg_migrations import PG_MIGRATIONS, apply_pg_migrations
from services.storage.schema import SCHEMA_VERSION
from services.store.app import start_store
from store_helpers import remember


@pytest.fixture(scope="module")
def storage_backend() -> str:
    """Every test here on Postgres: make_config, db_path and the stacks of
    tests/conftest.py put the store on this test's own database."""
    return "postgres"


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
    make_config: Callable[..., Config], start_store_server: Any, dsn: str
) -> None:
    server, stub = start_store_server(make_config())
    first = remember(stub, "Kafka retention is seven days").memory
    second = remember(stub, "The build uses Bazel.", importance=0.4).memory
    again = remember(stub, "  kafka RETENTION is seven days!! ")
    assert again.deduplicated and again.memory.id == first.id
    got = stub.GetMemory(store_pb2.GetMemoryRequest(id=first.id)).memory
    assert got == first
    listed = stub.ListMemories(store_pb2.ListMemoriesRequest(page_size=10)).memories
    assert [m.id for m in listed] == [second.id, first.id]
    assert server.app.reads.dialect is POSTGRES
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 2
        jobs = conn.execute("SELECT job_type, status FROM memory_jobs").fetchall()
    assert sorted(jobs) == [("embed", "pending"), ("embed", "pending")]
    with pytest.raises(grpc.RpcError) as missing:
        stub.GetMemory(store_pb2.GetMemoryRequest(id="00000000-0000-7000-8000-000000000000"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_restart_finds_the_data_and_checks_the_migrations(
    make_config: Callable[..., Config], start_store_server: Any, dsn: str
) -> None:
    config = make_config()
    first, stub = start_store_server(config)
    kept = remember(stub, "Kafka retention is seven days").memory
    first.stop()
    _, stub = start_store_server(config)  # the same database: nothing to apply
    assert stub.GetMemory(store_pb2.GetMemoryRequest(id=kept.id)).memory == kept
    with psycopg.connect(dsn) as conn:
        recorded = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
        assert recorded == len(PG_MIGRATIONS)
        conn.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 3")
    with pytest.raises(StartupError, match=r"refusing to start on the database .*/engram_test_"):
        asyncio.run(start_store(config, host="127.0.0.1", port=0, internal_port=0))


def test_a_database_that_does_not_answer_is_a_startup_error_without_the_password(
    make_config: Callable[..., Config], tmp_path: Path
) -> None:
    nowhere = f"host={tmp_path} port=1 dbname=engram user=engram password=hunter2"
    config = make_config(**{"storage.postgres.dsn": nowhere})
    with pytest.raises(StartupError, match=r"cannot open the PostgreSQL database engram@") as bad:
        asyncio.run(start_store(config, host="127.0.0.1", port=0, internal_port=0))
    assert "hunter2" not in str(bad.value)


def test_a_frozen_store_on_postgres_refuses_writes_and_serves_reads(
    make_config: Callable[..., Config], start_store_server: Any
) -> None:
    config = make_config()
    running, stub = start_store_server(config)
    kept = remember(stub, "The build uses Bazel.").memory
    running.stop()
    _, frozen = start_store_server(
        config.with_overrides({"memory.pipelineV2.mutationsFrozen": True})
    )
    with pytest.raises(grpc.RpcError) as refused:
        remember(frozen, "Something new")
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert frozen.GetMemory(store_pb2.GetMemoryRequest(id=kept.id)).memory == kept


# ---- search on Postgres, through its own read-only role -----------------------------------


def _as(dsn: str, role: str) -> str:
    params = conninfo_to_dict(dsn)
    params["user"] = role
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


def test_search_reads_through_its_role_which_the_store_granted_select_only(
    make_config: Callable[..., Config], recall_stack: Callable[..., Any], dsn: str, reader_role: str
) -> None:
    reader = _as(dsn, reader_role)
    stack = recall_stack(
        {"storage.postgres.reader_dsn": reader, "providers.embedding.kind": "none"}
    )
    remember(stack.store, "Kafka retention is seven days")
    app = stack.search_thread.app
    assert app.reads.dialect is POSTGRES and app.vector_cache is None
    counted = asyncio.run_coroutine_threadsafe(
        app.reads.fetch_one(
            ("SELECT count(*) AS n FROM memories WHERE namespace = ?", ["default"])
        ),
        stack.search_thread.loop,
    ).result(30)
    assert counted["n"] == 1
    # the keyword channel reads the store's kept statistics through this role too
    assert [h.memory.content for h in stack.recall("kafka retention").results] == [
        "Kafka retention is seven days"
    ]
    with psycopg.connect(reader, autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")  # the guard off: the role holds
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM memories")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 1


# ---- backup and restore: PostgreSQL's own tools ----------------------------------------


@pytest.mark.parametrize(
    ("command", "tool"), [(["backup", "--to"], "pg_dump"), (["restore", "--from"], "pg_restore")]
)
def test_backup_and_restore_refuse_a_postgres_store_and_name_its_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], tool: str
) -> None:
    config = tmp_path / "engram.yaml"
    config.write_text(
        "storage:\n  kind: postgres\n  postgres:\n    dsn: postgresql://engram@db.invalid/engram\n"
    )
    dump = tmp_path / "engram.dump"
    dump.write_bytes(b"")  # restore's source exists: the refusal is about the backend
    assert cli.main([*command[:1], command[1], str(dump), "--config", str(config)]) == 1
    said = capsys.readouterr().err
    assert f"storage.kind is postgres: engram {command[0]} copies SQLite files" in said
    assert tool in said
    assert dump.read_bytes() == b""


def test_a_lost_database_connection_is_unavailable_once_then_the_store_reconnects(
    make_config: Callable[..., Config], start_store_server: Any, dsn: str
) -> None:
    _, stub = start_store_server(make_config())
    kept = remember(stub, "Kafka retention is seven days").memory
    assert terminate(dsn, "engram-store") == [True]  # a restart, a failover, a cut
    with pytest.raises(grpc.RpcError) as lost:
        remember(stub, "The build uses Bazel.")
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "lost its database connection" in (lost.value.details() or "")
    again = remember(stub, "The build uses Bazel.").memory  # the retry, on a new connection
    listed = stub.ListMemories(store_pb2.ListMemoriesRequest(page_size=10)).memories
    assert [m.id for m in listed] == [again.id, kept.id]


def test_the_queue_metrics_and_engram_ups_suite_id_read_postgres(
    make_config: Callable[..., Config], start_store_server: Any, dsn: str
) -> None:
    config = make_config()
    _, stub = start_store_server(config)
    remember(stub, "Kafka retention is seven days")
    (family,) = queue_depth_source.collect()
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"type": "embed", "state": "pending"}, 1.0)
    ]
    with psycopg.connect(dsn) as conn:
        suite_id = conn.execute("SELECT id FROM suite").fetchone()[0]
    assert cli._suite_environment(config) == {"ENGRAM_CLIENTS__SUITE_ID": suite_id}


def test_search_waits_until_its_role_can_read_the_migrated_schema(
    make_config: Callable[..., Config], dsn: str, reader_role: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Search may start first: it waits while the schema is missing, then while
    its role has no SELECT, and goes on once the store has granted it."""
    storage = make_config(**{"storage.postgres.reader_dsn": _as(dsn, reader_role)}).storage
    caplog.set_level("INFO", logger="engram.search")

    def reasons() -> list[str]:
        return [getattr(r, "reason", "") for r in caplog.records if hasattr(r, "reason")]

    async def until(condition: Callable[[], bool]) -> None:
        while not condition():
            await asyncio.sleep(0.01)

    async def main() -> None:
        waiting = asyncio.ensure_future(
            backend_for(storage, logging.getLogger("engram.search")).wait_for_schema(
                SCHEMA_VERSION, poll_s=0.01
            )
        )
        await until(lambda: any("schema_migrations" in r for r in reasons()))
        raw = pg.open_read_write(dsn)
        await asyncio.to_thread(apply_pg_migrations, raw)  # the store, without the grant yet
        await until(lambda: any("permission denied" in r for r in reasons()))
        assert not waiting.done()
        with raw.transaction():
            pg.grant_reader(raw, reader_role)
        raw.close()
        await asyncio.wait_for(waiting, 60)

    asyncio.run(main())


def test_the_read_pool_carries_the_statement_timeout_and_the_writer_none(
    make_config: Callable[..., Config], start_store_server: Any
) -> None:
    server, _ = start_store_server(make_config(**{"storage.postgres.statement_timeout_ms": 1500}))

    def on_the_store(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, server.loop).result(30)

    read = on_the_store(server.app.reads.fetch_one(("SHOW statement_timeout", [])))
    written = on_the_store(
        server.app.writer.submit(lambda conn: conn.execute("SHOW statement_timeout").fetchone())
    )
    assert (read[0], written[0]) == ("1500ms", "0")
