"""Per-statement cost of the SQLite drivers Engram could use, side by side in one run.

Each driver gets a fresh database with the shape that matters (a content table with an
FTS5 index kept by triggers, a 384-bit sign vector per row, loaded via sqlite-vec) and
runs four representative statements:

- insert: one INSERT whose trigger also writes the FTS index (inside a transaction of
  100, as the store's group commit does)
- point:  SELECT one row by primary key
- match:  FTS5 MATCH with bm25 ranking, top 20
- hamming: vec_distance_hamming over every row, top 20 (the vector channel's scan)

DB-API drivers (sqlean.py, pysqlite3) are measured through aiosqlite (how the readers
run) and called directly; apsw has its own API, so it is measured directly only. Rounds
interleave the drivers in a rotating order so that load from other processes hits all
of them alike; the table shows the median over rounds of microseconds per statement.

    .venv/bin/python bench/sqlite_driver.py [--rounds 7] [--rows 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlite_vec

SCHEMA = (
    "CREATE TABLE memories (id INTEGER PRIMARY KEY, content TEXT NOT NULL, bits BLOB NOT NULL)",
    "CREATE VIRTUAL TABLE memories_fts USING fts5(content, content='memories', "
    "content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content); END",
)
INSERT = "INSERT INTO memories(content, bits) VALUES (?, ?)"
POINT = "SELECT id, content FROM memories WHERE id = ?"
MATCH = (
    "SELECT rowid, bm25(memories_fts) AS score FROM memories_fts "
    "WHERE memories_fts MATCH ? ORDER BY score LIMIT 20"
)
HAMMING = (
    "SELECT id, vec_distance_hamming(vec_bit(bits), vec_bit(?)) AS d "
    "FROM memories ORDER BY d LIMIT 20"
)
WORDS = [
    "user",
    "prefers",
    "dark",
    "mode",
    "editor",
    "decided",
    "postgres",
    "project",
    "deploy",
    "friday",
    "review",
    "coffee",
    "meeting",
    "budget",
    "travel",
    "berlin",
    "python",
    "rust",
    "tests",
    "release",
    "notes",
    "customer",
]
STATEMENTS = ("insert", "point", "match", "hamming")
INSERT_BATCH = 100


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(12)) + f" {rng.randrange(10**6)}"


def bits(rng: random.Random) -> bytes:
    return rng.randbytes(48)  # 384 dimensions, one bit each


class Driver:
    """One driver's connect and call conventions."""

    def __init__(self, name: str, module: Any, dbapi: bool) -> None:
        self.name = name
        self.module = module
        self.dbapi = dbapi

    def connect(self, path: Path) -> Any:
        if self.dbapi:
            conn = self.module.connect(str(path), isolation_level=None, check_same_thread=False)
        else:
            conn = self.module.Connection(str(path))
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def version(self) -> str:
        if self.dbapi:
            return str(self.module.sqlite_version)
        return str(self.module.sqlite_lib_version())


def available_drivers() -> list[Driver]:
    drivers = []
    for name, module_name, dbapi in (
        ("sqlean.py", "sqlean", True),
        ("pysqlite3", "pysqlite3.dbapi2", True),
        ("apsw", "apsw", False),
    ):
        try:
            drivers.append(Driver(name, importlib.import_module(module_name), dbapi))
        except ImportError:
            print(f"({name} not installed; skipped)")
    return drivers


def fill(conn: Any, rows: int, rng: random.Random) -> None:
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute("BEGIN")
    for _ in range(rows):
        conn.execute(INSERT, (sentence(rng), bits(rng)))
    conn.execute("COMMIT")


def time_direct(conn: Any, rows: int, rng: random.Random, repeat: int) -> dict[str, float]:
    """Microseconds per statement, called on this thread."""

    def run(statement: str, make_args: Callable[[], tuple[Any, ...]], n: int) -> float:
        args = [make_args() for _ in range(n)]
        start = time.perf_counter()
        for a in args:
            conn.execute(statement, a).fetchall()
        return (time.perf_counter() - start) / n * 1e6

    conn.execute("BEGIN")
    insert = run(INSERT, lambda: (sentence(rng), bits(rng)), INSERT_BATCH)
    conn.execute("COMMIT")
    return {
        "insert": insert,
        "point": run(POINT, lambda: (rng.randrange(1, rows),), repeat * 20),
        "match": run(MATCH, lambda: (rng.choice(WORDS),), repeat),
        "hamming": run(HAMMING, lambda: (bits(rng),), max(3, repeat // 10)),
    }


async def time_aiosqlite(
    driver: Driver, path: Path, rows: int, rng: random.Random, repeat: int
) -> dict[str, float]:
    """Microseconds per statement through aiosqlite (a thread hop per call)."""
    import aiosqlite

    conn = await aiosqlite.Connection(lambda: driver.connect(path), iter_chunk_size=256)
    try:

        async def run(statement: str, make_args: Callable[[], tuple[Any, ...]], n: int) -> float:
            args = [make_args() for _ in range(n)]
            start = time.perf_counter()
            for a in args:
                await conn.execute_fetchall(statement, a)
            return (time.perf_counter() - start) / n * 1e6

        await conn.execute("BEGIN")
        insert = await run(INSERT, lambda: (sentence(rng), bits(rng)), INSERT_BATCH)
        await conn.execute("COMMIT")
        return {
            "insert": insert,
            "point": await run(POINT, lambda: (rng.randrange(1, rows),), repeat * 20),
            "match": await run(MATCH, lambda: (rng.choice(WORDS),), repeat),
            "hamming": await run(HAMMING, lambda: (bits(rng),), max(3, repeat // 10)),
        }
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=200, help="MATCH calls per round")
    args = parser.parse_args()
    drivers = available_drivers()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for driver in drivers:
            paths[driver.name] = Path(tmp) / f"{driver.name}.db"
            conn = driver.connect(paths[driver.name])
            fill(conn, args.rows, random.Random(1))
            conn.close()
        # (driver, mode) -> statement -> per-round microseconds
        results: dict[tuple[str, str], dict[str, list[float]]] = {}
        for round_no in range(args.rounds):
            order = drivers[round_no % len(drivers) :] + drivers[: round_no % len(drivers)]
            for driver in order:
                path = paths[driver.name]
                conn = driver.connect(path)
                try:
                    direct = time_direct(conn, args.rows, rng, args.repeat)
                finally:
                    conn.close()
                for statement, us in direct.items():
                    results.setdefault((driver.name, "direct"), {}).setdefault(
                        statement, []
                    ).append(us)
                if driver.dbapi:
                    via = asyncio.run(time_aiosqlite(driver, path, args.rows, rng, args.repeat))
                    for statement, us in via.items():
                        results.setdefault((driver.name, "aiosqlite"), {}).setdefault(
                            statement, []
                        ).append(us)
    print(f"\n{args.rows} rows, {args.rounds} rounds; median µs per statement (SQLite version)")
    print(f"{'driver':<28}" + "".join(f"{s:>10}" for s in STATEMENTS))
    for (name, mode), by_statement in results.items():
        version = next(d.version() for d in drivers if d.name == name)
        label = f"{name} {version} {mode}"
        print(
            f"{label:<28}"
            + "".join(f"{statistics.median(by_statement[s]):>10.1f}" for s in STATEMENTS)
        )


if __name__ == "__main__":
    main()
