"""What bounds search's memory on SQLite (issue 34 item 6): its read pool opens
at most storage.read_connections connections however many callers hold
snapshots at once (each is a thread, two fds and a map of the file), reports
how many in engram_read_pool_connections, and each connection maps at most
storage.read_mmap_mb of the file. Unbounded (32 connections, the whole file
mapped), search's RSS grew with the database times its connections under load
(bench/README.md "Search memory under load")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlean
from prometheus_client import REGISTRY

from services.common.config import Config, StorageSettings
from services.storage.db import MIB, ReadPool, open_read_pool


def _database(path: Path) -> Path:
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()
    return path


def _gauge() -> float | None:
    return REGISTRY.get_sample_value("engram_read_pool_connections")


def test_snapshots_beyond_read_connections_wait_instead_of_opening_more(tmp_path: Path) -> None:
    storage = StorageSettings(path=str(_database(tmp_path / "bounded.db")), read_connections=5)

    async def scenario() -> None:
        reads = await open_read_pool(storage, service="search")
        assert isinstance(reads, ReadPool)
        holding = 0
        most = 0
        release = asyncio.Event()
        all_in = asyncio.Event()
        callers = 12

        async def caller() -> None:
            nonlocal holding, most
            async with reads.snapshot() as snap:
                await snap.fetch_one(("SELECT count(*) FROM t", []))
                holding += 1
                most = max(most, holding)
                if holding == storage.read_connections:
                    all_in.set()
                await release.wait()
                holding -= 1

        try:
            tasks = [asyncio.create_task(caller()) for _ in range(callers)]
            await asyncio.wait_for(all_in.wait(), timeout=30)
            for _ in range(50):  # let the others get as far as they can
                await asyncio.sleep(0)
            assert reads.connections == 5
            assert _gauge() == 5
            assert holding == 5, "the other callers wait for a connection"
            release.set()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
            assert most == 5
            assert reads.connections == 5
        finally:
            await reads.close()
        assert _gauge() == 0

    asyncio.run(scenario())


def test_each_read_connection_maps_at_most_read_mmap_mb(tmp_path: Path) -> None:
    storage = StorageSettings(path=str(_database(tmp_path / "mapped.db")), read_mmap_mb=3)

    async def scenario() -> list[int]:
        reads = await open_read_pool(storage, service="search")
        try:
            async with reads.snapshot() as a, reads.snapshot() as b:
                return [(await snap.fetch_one(("PRAGMA mmap_size", [])))[0] for snap in (a, b)]
        finally:
            await reads.close()

    assert asyncio.run(scenario()) == [3 * MIB, 3 * MIB]


def test_the_defaults_and_their_limits() -> None:
    storage = Config().storage
    assert (storage.read_connections, storage.read_mmap_mb) == (8, 32)
    assert StorageSettings(read_mmap_mb=0).read_mmap_mb == 0  # no map at all
    for bad in ({"read_connections": 3}, {"read_connections": 257}, {"read_mmap_mb": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            StorageSettings(**bad)
