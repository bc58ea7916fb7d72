"""The store's single writer on PostgreSQL (services/store/writer.py over
services/storage/pg.py's SqliteApi): group commit, one failing operation rolled
back alone (savepoints), a full disk refused as StorageFull, and a lost
connection failing its group (nothing acknowledged) and reopened for the next."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from pg_cluster import terminate

from services.storage import pg
from services.store.writer import StorageFull, StorageUnavailable, Writer, is_storage_full


def _connect(dsn: str) -> pg.SqliteApi:
    return pg.SqliteApi(pg.open_read_write(dsn))


@pytest.fixture
def make_writer(pg_dsn: str) -> Iterator[Callable[..., Writer]]:
    """Writers over this test's database, with table t (v unique, the
    transaction that wrote it); closed at teardown."""
    with _connect(pg_dsn) as conn:
        conn.execute("CREATE TABLE t (v INTEGER UNIQUE, xact BIGINT NOT NULL)")
    writers: list[Writer] = []

    def make(**options: Any) -> Writer:
        writer = Writer(_connect(pg_dsn), reconnect=lambda: _connect(pg_dsn), **options)
        writers.append(writer)
        return writer

    yield make
    for writer in writers:
        writer.close()


class _Hold:
    """An operation that keeps the writer busy until released, so what is
    submitted meanwhile queues up into the next group."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self, conn: Any) -> None:
        self.running.set()
        self.release.wait(30)

    async def start(self, writer: Writer) -> asyncio.Future[Any]:
        held = asyncio.ensure_future(writer.submit(self))
        await asyncio.get_running_loop().run_in_executor(None, self.running.wait, 30)
        return held


async def _one_group(writer: Writer, ops: list[Callable[[Any], Any]]) -> list[Any]:
    """Submit `ops` while the writer is held, so they commit as one group."""
    hold = _Hold()
    held = await hold.start(writer)
    futures = [asyncio.ensure_future(writer.submit(op)) for op in ops]
    await asyncio.sleep(0)  # each submit is queued before the writer is let go
    hold.release.set()
    await held
    return await asyncio.gather(*futures, return_exceptions=True)


def _insert(v: int) -> Callable[[Any], Any]:
    return lambda conn: conn.execute("INSERT INTO t VALUES (?, txid_current())", (v,))


def _values(dsn: str) -> list[int]:
    with _connect(dsn) as conn:
        return [row[0] for row in conn.execute("SELECT v FROM t ORDER BY v")]


def test_concurrent_operations_share_transactions(
    make_writer: Callable[..., Writer], pg_dsn: str
) -> None:
    writer = make_writer()
    results = asyncio.run(_one_group(writer, [_insert(v) for v in range(100)]))
    assert not any(isinstance(result, BaseException) for result in results)
    assert _values(pg_dsn) == list(range(100))
    with _connect(pg_dsn) as conn:
        transactions = conn.execute("SELECT count(DISTINCT xact) FROM t").fetchone()[0]
    assert transactions == 1  # one group for 100 operations


def test_a_failing_operation_rolls_back_only_itself(
    make_writer: Callable[..., Writer], pg_dsn: str
) -> None:
    writer = make_writer()

    def failing(conn: Any) -> None:
        conn.execute("INSERT INTO t VALUES (1000, txid_current())")
        raise ValueError("boom")

    # the second 1: a unique violation, in the server's aborted-transaction state
    results = asyncio.run(_one_group(writer, [_insert(1), failing, _insert(1), _insert(2)]))
    assert isinstance(results[1], ValueError)
    assert isinstance(results[2], psycopg.errors.UniqueViolation)
    assert not isinstance(results[0], BaseException) and not isinstance(results[3], BaseException)
    assert _values(pg_dsn) == [1, 2]  # 1000 rolled back with its operation
    with _connect(pg_dsn) as conn:  # and the others committed together, in one group
        assert conn.execute("SELECT count(DISTINCT xact) FROM t").fetchone()[0] == 1


_DISK_FULL = (
    "DO $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' "
    "USING ERRCODE = 'disk_full'; END $$"
)


def test_a_full_disk_fails_the_whole_group_as_storage_full(
    make_writer: Callable[..., Writer], pg_dsn: str
) -> None:
    """The server's own disk_full error (SQLSTATE 53100, raised by the server as
    a full disk raises it; a real full disk needs a tablespace on a tiny
    filesystem, which takes root)."""
    writer = make_writer()

    def fills_the_disk(conn: Any) -> None:
        conn.execute(_DISK_FULL)

    results = asyncio.run(_one_group(writer, [_insert(1), fills_the_disk, _insert(2)]))
    assert all(isinstance(result, StorageFull) for result in results)
    assert _values(pg_dsn) == []  # nothing of the group committed
    assert writer.storage_full.count == 1
    asyncio.run(writer.submit(_insert(3)))  # and the next write goes through
    assert _values(pg_dsn) == [3]


def test_the_disk_full_sqlstate_is_storage_full_and_others_are_not(pg_dsn: str) -> None:
    with _connect(pg_dsn) as conn:
        with pytest.raises(psycopg.errors.DiskFull) as full:
            conn.execute(_DISK_FULL)
        with pytest.raises(psycopg.errors.DivisionByZero) as other:
            conn.execute("SELECT 1 / 0")
    assert full.value.sqlstate == "53100" and is_storage_full(full.value)
    assert not is_storage_full(other.value)


def test_a_lost_connection_fails_its_group_and_the_next_reconnects(
    make_writer: Callable[..., Writer], pg_dsn: str
) -> None:
    writer = make_writer()
    asyncio.run(writer.submit(_insert(1)))
    assert terminate(pg_dsn, "engram-store") == [True]  # a server restart, a failover, a cut

    with pytest.raises(StorageUnavailable):
        asyncio.run(writer.submit(_insert(2)))
    asyncio.run(writer.submit(_insert(3)))  # a new connection
    assert _values(pg_dsn) == [1, 3]


def test_without_a_way_to_reconnect_every_write_fails_unavailable(pg_dsn: str) -> None:
    with _connect(pg_dsn) as conn:
        conn.execute("CREATE TABLE t (v INTEGER UNIQUE, xact BIGINT NOT NULL)")
    writer = Writer(_connect(pg_dsn))
    try:
        assert terminate(pg_dsn, "engram-store") == [True]
        for v in (2, 3):
            with pytest.raises(StorageUnavailable):
                asyncio.run(writer.submit(_insert(v)))
    finally:
        writer.close()
    assert _values(pg_dsn) == []
