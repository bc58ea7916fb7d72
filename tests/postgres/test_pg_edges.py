"""The Postgres backend's edges, through real gRPC servers on a real PostgreSQL
database: a read the server cancels (statement_timeout), the collation that
orders text, connect timeouts and the reader role's grant."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pg_server
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from services.common.config import Config
from services.common.server import StartupError
from services.storage.db import PostgresBackend, StorageUnavailable, open_read_pool
from services.store.app import start_store
from store_helpers import remember


@pytest.fixture(scope="module")
def storage_backend() -> str:
    """Every test here on Postgres (make_config puts the store on this test's database)."""
    return "postgres"


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
        PostgresBackend(config.storage).reconnect_writer()  # the writer's, after a lost connection

    async def pool() -> None:
        await open_read_pool(config.storage, service="search")

    with pytest.raises(StorageUnavailable):
        asyncio.run(pool())


# ---- text orders by code point, whatever the database's collation -----------------------


@pytest.fixture
def language_ordered_dsn(
    postgres_server: tuple[str, bool], pgvector_problem: str | None, dsn: str
) -> Iterator[tuple[str, bool]]:
    """A database whose default collation is ICU's en-US (a managed server's usual
    default is a language collation: é sorts beside e, not after z), and True; on a
    server built without ICU (the bundled one), the test's own database and False."""
    server, _ = postgres_server
    name = f"engram_icu_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        try:
            admin.execute(
                sql.SQL(
                    "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' "
                    "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
                ).format(sql.Identifier(name))
            )
        except psycopg.errors.FeatureNotSupported:  # "ICU is not supported in this build"
            yield dsn, False
            return
    icu = pg_server.with_database(server, name)
    yield icu, True
    pg_server.drop_database(server, icu)


def test_every_text_column_orders_by_code_point_like_sqlite(
    make_config: Callable[..., Config],
    start_store_server: Any,
    language_ordered_dsn: tuple[str, bool],
) -> None:
    """ListEntities' order and its prefix range (prefix .. prefix + U+10FFFF) are
    SQLite's BINARY order whatever the database's default collation: every text
    column is COLLATE "C" (services/storage/pg_migrations.py)."""
    database, language_ordered = language_ordered_dsn
    _, stub = start_store_server(make_config(**{"storage.postgres.dsn": database}))
    with psycopg.connect(database) as conn:
        # the database's own order, which the columns' must not follow
        assert conn.execute("SELECT 'é' < 'f'").fetchone()[0] == language_ordered
        loose = conn.execute(
            "SELECT table_name, column_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type = 'text' "
            "AND collation_name IS DISTINCT FROM 'C' "
            "AND table_name <> 'schema_migrations'"  # migrations.py's, shared; never ordered
        ).fetchall()
        for number, canonical in enumerate(["f", "é", "e", "éclair", "ez"]):
            conn.execute(
                "INSERT INTO entities (id, namespace, name, canonical_name, entity_type, "
                "mentions, created_at, updated_at) VALUES (%s, 'default', %s, %s, 'thing', 1, "
                "'2026-01-01T00:00:00.000000000Z', '2026-01-01T00:00:00.000000000Z')",
                (f"entity-{number}", canonical, canonical),
            )
    assert loose == []

    def names(prefix: str) -> list[str]:
        listed = stub.ListEntities(store_pb2.ListEntitiesRequest(name_prefix=prefix))
        return [e.name for e in listed.entities]

    assert names("") == ["e", "ez", "f", "é", "éclair"]  # Python's (code point) order
    assert names("e") == ["e", "ez"]
    assert names("é") == ["é", "éclair"]


# ---- the reader role's grant -----------------------------------------------------------


def _without_user(dsn: str) -> str:
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    params.pop("user", None)
    return make_conninfo(**params)


def test_a_reader_dsn_without_a_user_is_granted_as_the_role_it_logs_in_as(
    recall_stack: Callable[..., Any],
    dsn: str,
    reader_role: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Was: granted only when reader_dsn named a user, so search waited for ever on
    a reader role given by PGUSER (or a service file)."""
    monkeypatch.setenv("PGUSER", reader_role)  # libpq's, for a DSN that names no user
    reader = _without_user(dsn)
    stack = recall_stack(
        {"storage.postgres.reader_dsn": reader, "providers.embedding.kind": "none"}
    )
    kept = remember(stack.store, "Kafka retention is seven days").memory
    found = stack.search.Recall(search_pb2.RecallRequest(query="Kafka retention")).results
    assert [r.memory.id for r in found] == [kept.id]
    with psycopg.connect(dsn) as conn:
        rights = conn.execute(
            "SELECT has_table_privilege(%s, 'memories', 'SELECT'), "
            "has_table_privilege(%s, 'memories', 'INSERT')",
            (reader_role, reader_role),
        ).fetchone()
    assert rights == (True, False)


def test_a_reader_the_store_cannot_connect_as_is_logged_and_the_store_starts(
    make_config: Callable[..., Config],
    start_store_server: Any,
    silent_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger="engram.store")
    config = make_config(
        **{
            "storage.postgres.reader_dsn": _without_user(silent_dsn),
            "storage.postgres.connect_timeout_s": 2,
        }
    )
    _, stub = start_store_server(config)
    assert remember(stub, "The build uses Bazel.").memory.id
    said = [r.getMessage() for r in caplog.records if r.name == "engram.store"]
    assert any("reader_dsn" in message for message in said)
