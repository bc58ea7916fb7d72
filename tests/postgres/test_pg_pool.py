"""services/storage/pg.py's PgReadPool (db.ReadPool's interface on PostgreSQL)
and db.open_read_pool, the one place that picks a backend's pool, on a real
PostgreSQL database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import terminate

from services.common.config import load_config
from services.storage import db, pg
from services.storage.pg_migrations import apply_pg_migrations
from services.storage.sqlite_migrations import apply_migrations


@pytest.fixture
def dsn(pg_dsn: str) -> Iterator[str]:
    """The test's database with table t (k, v) holding (a, 1) and (b, 2)."""
    with pg.SqliteApi(pg.open_read_write(pg_dsn)) as conn:
        conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
        conn.execute("INSERT INTO t VALUES ('a', 1), ('b', 2)")
    yield pg_dsn


def _write(dsn: str, statement: str, *params: Any) -> None:
    with pg.SqliteApi(pg.open_read_write(dsn)) as conn:
        conn.execute(statement, params)


def test_sqlite_style_sql_and_rows_read_by_position_or_name(dsn: str) -> None:
    async def main() -> tuple[Any, ...]:
        reads = pg.PgReadPool(dsn, size=1)
        await reads.open()
        try:
            positional = await reads.fetch_all(("SELECT k, v FROM t WHERE v >= ? ORDER BY k", [1]))
            named = await reads.fetch_one(("SELECT k AS key FROM t WHERE k = :k", {"k": "b"}))
            nothing = await reads.fetch_one(("SELECT k FROM t WHERE k = ?", ["z"]))
            total = await reads.fetch_one(("SELECT sum(v) AS s, avg(v) AS a FROM t", []))
            return positional, named, nothing, total
        finally:
            await reads.close()

    positional, named, nothing, total = asyncio.run(main())
    assert [(r[0], r["v"]) for r in positional] == [("a", 1), ("b", 2)]
    assert named["key"] == "b" and nothing is None
    # numeric (sum over integers, avg) comes back as SQLite gives it: int, float
    assert (total["s"], total["a"]) == (3, 1.5)
    assert type(total["s"]) is int and type(total["a"]) is float


def test_a_snapshot_sees_one_moment_and_plain_fetches_see_the_latest(dsn: str) -> None:
    async def main() -> tuple[Any, ...]:
        reads = pg.PgReadPool(dsn, size=2)
        await reads.open()
        try:
            async with reads.snapshot() as snap:
                before = await snap.fetch_one(("SELECT count(*) FROM t", []))
                await asyncio.to_thread(_write, dsn, "INSERT INTO t VALUES ('c', 3)")
                during = await snap.fetch_one(("SELECT count(*) FROM t", []))
                outside = await reads.fetch_one(("SELECT count(*) FROM t", []))
            after = await reads.fetch_one(("SELECT count(*) FROM t", []))
            return before[0], during[0], outside[0], after[0]
        finally:
            await reads.close()

    assert asyncio.run(main()) == (2, 2, 3, 3)


def test_the_pool_cannot_write(dsn: str) -> None:
    async def main() -> None:
        reads = pg.PgReadPool(dsn, size=1)
        await reads.open()
        try:
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                await reads.fetch_all(("DELETE FROM t", []))
            async with reads.snapshot() as snap:
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    await snap.fetch_all(("UPDATE t SET v = 0", []))
            # the connection is usable again after each refusal
            assert (await reads.fetch_one(("SELECT count(*) FROM t", [])))[0] == 2
        finally:
            await reads.close()

    asyncio.run(main())
    with pg.SqliteApi(pg.open_read_only(dsn)) as conn:
        assert conn.execute("SELECT sum(v) FROM t").fetchone()[0] == 3


def test_the_pool_grows_while_every_connection_is_held(dsn: str) -> None:
    async def main() -> int:
        reads = pg.PgReadPool(dsn, size=1, max_size=3)
        await reads.open()
        try:
            async with reads.snapshot() as one, reads.snapshot() as two:
                await one.fetch_all(("SELECT 1", []))
                await two.fetch_all(("SELECT 1", []))
                return int((await reads.fetch_one(("SELECT count(*) FROM t", [])))[0])
        finally:
            await reads.close()

    assert asyncio.run(main()) == 2


def test_a_dropped_connection_fails_its_fetch_unavailable_once_and_is_replaced(dsn: str) -> None:
    async def main() -> int:
        reads = pg.PgReadPool(dsn, size=1, max_size=1, application_name="engram-pool-test")
        await reads.open()
        try:
            assert await asyncio.to_thread(terminate, dsn, "engram-pool-test") == [True]
            with pytest.raises(db.StorageUnavailable, match="connection was lost"):
                await reads.fetch_all(("SELECT count(*) FROM t", []))
            return int((await reads.fetch_one(("SELECT count(*) FROM t", [])))[0])
        finally:
            await reads.close()

    assert asyncio.run(main()) == 2


def test_a_cancelled_fetch_leaves_no_connection_mid_statement(dsn: str) -> None:
    async def main() -> int:
        reads = pg.PgReadPool(dsn, size=1, max_size=1)
        await reads.open()
        try:
            slow = asyncio.ensure_future(reads.fetch_all(("SELECT pg_sleep(30)", [])))
            while not await asyncio.to_thread(_sleeping, dsn):
                await asyncio.sleep(0.01)
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            return int((await reads.fetch_one(("SELECT count(*) FROM t", [])))[0])
        finally:
            await reads.close()

    assert asyncio.run(main()) == 2


def _sleeping(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' "
            "AND state = 'active'"
        ).fetchone()
    return bool(row and row[0])


def test_open_read_pool_picks_the_configured_backend(pg_dsn: str, tmp_path: Path) -> None:
    raw = pg.open_read_write(pg_dsn)
    apply_pg_migrations(raw)
    raw.close()
    lite = db.open_read_write(tmp_path / "x.db")
    apply_migrations(lite)
    lite.close()
    configs = [
        load_config(environ={}, overrides={"storage.path": str(tmp_path / "x.db")}),
        load_config(
            environ={},
            overrides={"storage.kind": "postgres", "storage.postgres.dsn": pg_dsn},
        ),
    ]

    async def main() -> list[tuple[str, int]]:
        seen = []
        for config in configs:
            reads = await db.open_read_pool(config.storage, service="search")
            try:
                count = await reads.fetch_one(("SELECT count(*) FROM memories", []))
                seen.append((reads.dialect.name, int(count[0])))
            finally:
                await reads.close()
        return seen

    assert asyncio.run(main()) == [("sqlite", 0), ("postgres", 0)]


def test_a_read_past_the_statement_timeout_is_storage_timed_out_and_the_pool_goes_on(
    dsn: str,
) -> None:
    """The server cancels the read (statement_timeout): DEADLINE_EXCEEDED with its
    reason, not INTERNAL; the connection and a snapshot stay usable. The read is
    held by a lock, so it can only end by the timeout."""

    async def main() -> tuple[Any, ...]:
        reads = pg.PgReadPool(dsn, size=1, statement_timeout_ms=50)
        await reads.open()
        try:
            with psycopg.connect(dsn) as locker:
                locker.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(db.StorageTimedOut) as plain:
                    await reads.fetch_all(("SELECT k FROM t", []))
                async with reads.snapshot() as snap:
                    with pytest.raises(db.StorageTimedOut):
                        await snap.fetch_all_isolated(("SELECT k FROM t", []))
                    in_snapshot = await snap.fetch_one(("SELECT 1 + 1", []))
                locker.rollback()
            after = await reads.fetch_all(("SELECT k FROM t ORDER BY k", []))
            return plain.value, in_snapshot[0], [r[0] for r in after]
        finally:
            await reads.close()

    error, in_snapshot, after = asyncio.run(main())
    assert (error.kind.name, error.reason) == ("DEADLINE_EXCEEDED", "STATEMENT_TIMEOUT")
    assert "statement timeout" in error.message
    assert (in_snapshot, after) == (2, ["a", "b"])
