"""The single writer: group commit, per-operation isolation, durability on reply."""

import asyncio
import threading
from pathlib import Path

import pytest

from services.storage.db import open_read_only, open_read_write
from services.storage.sqlite_migrations import MIGRATIONS, apply_migrations
from services.store.writer import Writer, WriterClosed


def _writer(path: Path) -> Writer:
    conn = open_read_write(path)
    conn.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER UNIQUE)")
    return Writer(conn)


def test_concurrent_operations_share_transactions(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "w.db")
    gate = threading.Event()
    commits: list[int] = []
    writer._conn.set_trace_callback(lambda sql: commits.append(1) if sql == "COMMIT" else None)

    async def main() -> None:
        # Hold the writer busy so the next 100 operations queue up behind it.
        blocker = asyncio.ensure_future(writer.submit(lambda conn: gate.wait(5)))
        await asyncio.sleep(0.05)
        ops = [
            asyncio.ensure_future(
                writer.submit(lambda conn, v=v: conn.execute("INSERT INTO t VALUES (?)", (v,)))
            )
            for v in range(100)
        ]
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(blocker, *ops)

    asyncio.run(main())
    writer.close()
    assert len(commits) <= 3  # the blocker's group plus one or two groups for 100 operations
    assert open_read_only(tmp_path / "w.db").execute("SELECT count(*) FROM t").fetchone()[0] == 100


def test_a_failing_operation_rolls_back_only_itself(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "w.db")

    def failing(conn):
        conn.execute("INSERT INTO t VALUES (1000)")
        raise ValueError("boom")

    async def main() -> list:
        return await asyncio.gather(
            writer.submit(lambda conn: conn.execute("INSERT INTO t VALUES (1)")),
            writer.submit(failing),
            writer.submit(
                lambda conn: conn.execute("INSERT INTO t VALUES (1)")
            ),  # unique violation
            writer.submit(lambda conn: conn.execute("INSERT INTO t VALUES (2)")),
            return_exceptions=True,
        )

    results = asyncio.run(main())
    writer.close()
    assert isinstance(results[1], ValueError) and isinstance(results[2], Exception)
    values = [r[0] for r in open_read_only(tmp_path / "w.db").execute("SELECT v FROM t ORDER BY v")]
    assert values == [1, 2]


def test_result_arrives_only_after_commit(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    writer = _writer(path)
    reader = open_read_only(path)

    async def main() -> int:
        await writer.submit(lambda conn: conn.execute("INSERT INTO t VALUES (7)"))
        return reader.execute("SELECT count(*) FROM t").fetchone()[0]

    assert asyncio.run(main()) == 1  # another connection sees it the moment we are told
    writer.close()


def test_closed_writer_refuses_work(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "w.db")
    writer.close()
    with pytest.raises(WriterClosed):
        asyncio.run(writer.submit(lambda conn: None))


def test_migrations_apply_once_and_are_recorded(tmp_path: Path) -> None:
    conn = open_read_write(tmp_path / "m.db")
    assert len(apply_migrations(conn)) == len(MIGRATIONS)
    assert apply_migrations(conn) == []
    recorded = [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY version")]
    assert recorded == [name for name, _ in MIGRATIONS]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_read_only_connections_cannot_write(tmp_path: Path) -> None:
    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn)
    reader = open_read_only(tmp_path / "m.db")
    with pytest.raises(Exception, match=r"readonly|read-only|query_only"):
        reader.execute("DELETE FROM memories")


def _insert_each(conn, values: list[int]) -> list[int]:
    """A batch operation: inserts every value, returns each one's rowid."""
    rowids = []
    for v in values:
        rowids.append(conn.execute("INSERT INTO t VALUES (?)", (v,)).lastrowid)
    return rowids


def test_batched_items_of_one_group_run_as_one_call(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "w.db")
    gate = threading.Event()
    calls: list[int] = []

    def counting(conn, values):
        calls.append(len(values))
        return _insert_each(conn, values)

    async def main() -> list[int]:
        blocker = asyncio.ensure_future(writer.submit(lambda conn: gate.wait(5)))
        await asyncio.sleep(0.05)
        items = [asyncio.ensure_future(writer.submit_batched(counting, v)) for v in range(20)]
        await asyncio.sleep(0.05)
        gate.set()
        await blocker
        return list(await asyncio.gather(*items))

    rowids = asyncio.run(main())
    writer.close()
    assert calls == [20]  # all twenty queued behind the blocker: one call
    assert len(set(rowids)) == 20  # each caller got its own item's result
    values = [r[0] for r in open_read_only(tmp_path / "w.db").execute("SELECT v FROM t ORDER BY v")]
    assert values == list(range(20))


def _batch_with_one_bad_item(path: Path, with_plain_operation: bool) -> list:
    writer = _writer(path)
    gate = threading.Event()

    async def main() -> list:
        blocker = asyncio.ensure_future(writer.submit(lambda conn: gate.wait(5)))
        await asyncio.sleep(0.05)
        futures = [
            asyncio.ensure_future(writer.submit_batched(_insert_each, v))
            for v in (1, 2, 1, 3)  # the second 1 violates UNIQUE
        ]
        if with_plain_operation:
            futures.append(
                asyncio.ensure_future(
                    writer.submit(lambda conn: conn.execute("INSERT INTO t VALUES (9)"))
                )
            )
        await asyncio.sleep(0.05)
        gate.set()
        await blocker
        return list(await asyncio.gather(*futures, return_exceptions=True))

    results = asyncio.run(main())
    writer.close()
    return results


@pytest.mark.parametrize("with_plain_operation", [False, True])
def test_a_failing_batch_item_fails_alone(tmp_path: Path, with_plain_operation: bool) -> None:
    """The batch call raises (a unique violation); its items run again one by one:
    only the culprit gets the error, the rest are committed. With a plain,
    non-retryable operation in the group this goes through the savepoint path."""
    path = tmp_path / "w.db"
    results = _batch_with_one_bad_item(path, with_plain_operation)
    errors = [i for i, r in enumerate(results) if isinstance(r, Exception)]
    assert errors == [2], results
    values = [r[0] for r in open_read_only(path).execute("SELECT v FROM t ORDER BY v")]
    assert values == ([1, 2, 3, 9] if with_plain_operation else [1, 2, 3])


def test_dedup_lookup_searches_the_live_hash_index(tmp_path: Path) -> None:
    """Without statistics SQLite picked the (namespace, is_deleted) index for IN lists
    of eight or more hashes: a scan of the whole namespace on every group commit."""
    from services.storage.store import repository

    conn = open_read_write(tmp_path / "m.db")
    apply_migrations(conn)
    plans: list[str] = []
    conn.set_trace_callback(plans.append)
    for count in (1, 8, 500):
        hashes = [f"{i:064x}" for i in range(count)]
        repository.live_ids_by_hash(conn, "ns", hashes)
    conn.set_trace_callback(None)
    for sql in plans:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
        assert "memories_live_hash" in " ".join(str(row[3]) for row in plan), plan
