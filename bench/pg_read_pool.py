"""The Postgres read pool (services/storage/pg.py PgReadPool: sync psycopg
connections handed out from a queue, queries run in threads, as db.ReadPool runs
SQLite's through aiosqlite) against the async alternatives issue 21 named:
psycopg's AsyncConnections from a queue, and psycopg_pool's AsyncConnectionPool;
SQLite's ReadPool on the same rows is the baseline, all in one run. Every pool
has 4 connections.

Data: N memories in one namespace (repository.insert_memory_rows), the same rows
in a migrated SQLite file and a migrated Postgres database. Workload, per pool:
the store's point read (repository.get_memory_query, a random id) and a listing
page (list_memories_query, 20 rows), each at concurrency 1 and 16, for
--seconds each; reported as reads/s and p50/p95 latency. Two rounds, the
second in reverse order. Every pool takes
sqlite3-style SQL; the Postgres ones translate it (pg.translate, cached).

    flock /tmp/engram-bench.lock .venv/bin/python bench/pg_read_pool.py [--memories 20000]
        [--seconds 5] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
    str(Path(__file__).resolve().parent),
]

import provenance  # noqa: E402

import pg_server  # noqa: E402
from services.common.memory_filter import MemoryFilterSpec  # noqa: E402
from services.storage import db, pg  # noqa: E402
from services.storage.dialect import POSTGRES  # noqa: E402
from services.storage.pg_migrations import apply_pg_migrations  # noqa: E402
from services.storage.sqlite_migrations import apply_migrations  # noqa: E402
from services.storage.store import repository as repo  # noqa: E402

POOL_SIZE = 4
T0 = "2026-01-01T00:00:00.000000000Z"


class AsyncQueueReads:
    """The async candidate without psycopg_pool: psycopg's AsyncConnections
    handed out from an asyncio.Queue (PgReadPool's shape, with async I/O
    instead of threads)."""

    dialect = POSTGRES

    def __init__(self, dsn: str, size: int) -> None:
        self._dsn, self._size = dsn, size
        self._idle: asyncio.Queue[Any] = asyncio.Queue()
        self._all: list[Any] = []

    async def open(self) -> None:
        import psycopg

        for _ in range(self._size):
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, row_factory=pg.row_factory, context=pg.ADAPTERS
            )
            self._all.append(conn)
            self._idle.put_nowait(conn)

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        conn = await self._idle.get()
        try:
            cursor = await conn.execute(pg.translate(query[0]), query[1])
            return list(await cursor.fetchall())
        finally:
            self._idle.put_nowait(conn)


class PsycopgPoolReads:
    """The other async candidate: psycopg_pool's AsyncConnectionPool over the
    same read-only sessions."""

    dialect = POSTGRES

    def __init__(self, dsn: str, size: int) -> None:
        from psycopg_pool import AsyncConnectionPool

        self._pool = AsyncConnectionPool(
            dsn,
            min_size=size,
            max_size=size,
            open=False,
            kwargs={"autocommit": True, "row_factory": pg.row_factory, "context": pg.ADAPTERS},
        )

    async def open(self) -> None:
        await self._pool.open(wait=True)

    async def close(self) -> None:
        await self._pool.close()

    async def fetch_all(self, query: tuple[str, list[Any]]) -> list[Any]:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(pg.translate(query[0]), query[1])
            return list(await cursor.fetchall())


def _rows(n: int) -> list[repo.MemoryRow]:
    return [
        repo.MemoryRow(
            id=f"m{i:08d}",
            namespace="ns",
            content=f"memory number {i} about topic {i % 97}",
            normalized_content=f"memory number {i} about topic {i % 97}",
            content_hash=f"h{i}",
            type="fact",
            importance=0.5,
            tags="[]",
            pinned=0,
            who="user",
            why="",
            source_type="api",
            source_id="",
            created_at=f"2026-01-01T00:00:00.{i:09d}Z",
            event_time=T0,
        )
        for i in range(n)
    ]


def _load(conn: Any, rows: list[repo.MemoryRow]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for start in range(0, len(rows), 500):
        repo.insert_memory_rows(conn, rows[start : start + 500])
    conn.execute("COMMIT")


async def _measure(
    pool: Any,
    make_query: Callable[[random.Random], tuple[str, list[Any]]],
    workers: int,
    seconds: float,
) -> dict[str, float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.perf_counter() < deadline:
            query = make_query(rng)
            started = time.perf_counter()
            await pool.fetch_all(query)
            latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in range(workers)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "reads_per_s": round(len(latencies) / elapsed),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
        "p95_ms": round(latencies[int(len(latencies) * 0.95)] * 1000, 3),
    }


@contextlib.asynccontextmanager
async def _opened(pool: Any) -> AsyncIterator[Any]:
    await pool.open()
    try:
        yield pool
    finally:
        await pool.close()


async def run(dsn: str, sqlite_path: Path, memories: int, seconds: float) -> dict[str, Any]:
    def point(rng: random.Random) -> tuple[str, list[Any]]:
        return repo.get_memory_query("ns", f"m{rng.randrange(memories):08d}")

    def page(rng: random.Random) -> tuple[str, list[Any]]:
        return repo.list_memories_query("ns", MemoryFilterSpec(), None, 20)

    pools: dict[str, Callable[[], Any]] = {
        "sqlite ReadPool (baseline)": lambda: db.ReadPool(sqlite_path, size=POOL_SIZE),
        "pg sync in threads (PgReadPool)": lambda: pg.PgReadPool(
            dsn, POOL_SIZE, max_size=POOL_SIZE
        ),
        "pg async, own queue": lambda: AsyncQueueReads(dsn, POOL_SIZE),
        "pg async, psycopg_pool": lambda: PsycopgPoolReads(dsn, POOL_SIZE),
    }
    results: dict[str, Any] = {}
    # two rounds, the second in reverse order: load that drifts during the run
    # (a shared machine) favours no pool
    for round_number, order in enumerate((list(pools), list(reversed(pools))), start=1):
        for name in order:
            async with _opened(pools[name]()) as pool:
                await _measure(pool, point, 4, 1.0)  # warm: caches, prepared statements
                for query_name, query in (("point", point), ("page", page)):
                    for workers in (1, 16):
                        key = f"round {round_number}: {name} / {query_name} x{workers}"
                        results[key] = await _measure(pool, query, workers, seconds)
                        print(key, results[key], flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    rows = _rows(args.memories)
    with tempfile.TemporaryDirectory() as work, pg_server.postgres_server(Path(work)) as server:
        sqlite_path = Path(work) / "bench.db"
        lite = db.open_read_write(sqlite_path)
        apply_migrations(lite)
        _load(lite, rows)
        lite.close()
        dsn = pg_server.create_database(server)
        raw = pg.open_read_write(dsn)
        apply_pg_migrations(raw)
        with pg.SqliteApi(raw) as conn:
            _load(conn, rows)
            conn.execute("ANALYZE")
        results = asyncio.run(run(dsn, sqlite_path, args.memories, args.seconds))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(provenance.stamped(results), indent=2))


if __name__ == "__main__":
    main()
