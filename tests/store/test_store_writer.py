"""The single writer: group commit, per-operation isolation, durability on reply."""

import asyncio
import threading
from pathlib import Path

import pytest

from services.common.db import open_read_only, open_read_write
from services.store.migrations import MIGRATIONS, apply_migrations
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
