"""SIGKILL of the PostgreSQL server itself (the postmaster and every backend at
once) under a storm of concurrent Remember calls, twice, on a server of the
test's own with fsync on (tests/e2e/pg_private.py); the store keeps running.

While the server is down every Remember is refused UNAVAILABLE, never INTERNAL;
once it is back (crash recovery replays its WAL) the same store process takes
writes again by itself; every Remember acknowledged before, during or after a
kill is there with its content, and the rows are whole (each memory with its
created event and jobs, nothing half-written). bench/README.md ("Crash and
probe rounds on PostgreSQL") records the figures beside SQLite's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from crash_helpers import NAMESPACE, PIPELINE_ON, check_postgres_rows, content_for
from pg_private import PrivateServer, private_postgres

from e2e_helpers import Launcher, listed_ids, lost_memories
from engram.store.v1 import store_pb2, store_pb2_grpc

__all__ = ["private_postgres"]  # the fixture, for pytest

pytestmark = pytest.mark.postgres

THREADS = 16
ROUNDS = 2
ACKS_PER_PHASE = 150
DOWN_S = 2.0
RECOVERY_TIMEOUT_S = 60.0
READ_RETRIES = 3


@dataclass
class Storm:
    """Writer threads that go on through errors, counting them by status code."""

    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)  # id -> content
    codes: Counter[str] = field(default_factory=Counter)
    internal: list[str] = field(default_factory=list)
    sent: int = 0

    def acks(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for_acks(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.acks() < count:
            assert time.monotonic() < deadline, (
                f"{self.acks()} of {count} acks; codes so far {dict(self.codes)}"
            )
            time.sleep(0.05)


def writer(stub: store_pb2_grpc.MemoryStoreServiceStub, storm: Storm, thread: int) -> None:
    seq = 0
    while not storm.stop.is_set():
        content = content_for(thread, seq)
        seq += 1
        with storm.lock:
            storm.sent += 1
        try:
            reply = stub.Remember(
                store_pb2.RememberRequest(namespace=NAMESPACE, content=content), timeout=30
            )
        except grpc.RpcError as exc:
            with storm.lock:
                storm.codes[exc.code().name] += 1
                if exc.code() is not grpc.StatusCode.UNAVAILABLE:
                    storm.internal.append(f"{exc.code().name}: {exc.details()}")
            time.sleep(0.05)  # a client's pause before its retry
            continue
        with storm.lock:
            storm.codes["OK"] += 1
            storm.acked[reply.memory.id] = content


def read_back(
    stub: store_pb2_grpc.MemoryStoreServiceStub, expected: dict[str, str]
) -> tuple[list[str], int]:
    """lost_memories, with a client's retry: a read pool connection the crash
    dropped fails its next read UNAVAILABLE once and is replaced (services/storage/pg.py
    PgReadPool). (ids still missing, reads refused UNAVAILABLE on the way)."""
    refused = 0
    missing = lost_memories(stub, NAMESPACE, expected)
    for _ in range(READ_RETRIES):
        if not missing or any("UNAVAILABLE" not in m for m in missing):
            break
        refused += len(missing)
        missing = lost_memories(
            stub, NAMESPACE, {m.split(":")[0]: expected[m.split(":")[0]] for m in missing}
        )
    return missing, refused


def test_sigkill_of_the_postgres_server_under_load_loses_nothing_acknowledged(
    launcher: Launcher, data_dir: Path, private_postgres: PrivateServer
) -> None:
    dsn = private_postgres.create_database("engram")
    env = {**PIPELINE_ON, "ENGRAM_STORAGE__KIND": "postgres", "ENGRAM_STORAGE__POSTGRES__DSN": dsn}
    store = launcher.start_store(data_dir, env=env)
    stub = store.stub()
    storm = Storm()
    threads = [
        threading.Thread(target=writer, args=(stub, storm, n), daemon=True) for n in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    rounds: list[dict[str, float]] = []
    try:
        for _ in range(ROUNDS):
            storm.wait_for_acks(storm.acks() + ACKS_PER_PHASE, timeout_s=120)
            with storm.lock:
                before = storm.codes["UNAVAILABLE"]
            killed = private_postgres.kill9()
            time.sleep(DOWN_S)  # the storm runs on against no server
            with storm.lock:
                refused_down = storm.codes["UNAVAILABLE"] - before
            restart_s = private_postgres.restart()
            back = time.monotonic()
            storm.wait_for_acks(storm.acks() + ACKS_PER_PHASE, timeout_s=RECOVERY_TIMEOUT_S)
            rounds.append(
                {
                    "killed_processes": killed,
                    "unavailable_while_down": refused_down,
                    "restart_s": round(restart_s, 2),
                    "writes_again_after_s": round(time.monotonic() - back, 2),
                }
            )
    finally:
        storm.stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert store.process.poll() is None, "the store must outlive its database server"
    assert storm.internal == [], storm.internal[:5]
    assert all(r["unavailable_while_down"] > 0 for r in rounds), rounds

    missing, stale_reads = read_back(stub, storm.acked)
    listed = listed_ids(stub, NAMESPACE)
    print(
        f"\npostgres server SIGKILL x{ROUNDS}: sent {storm.sent}, acknowledged "
        f"{len(storm.acked)}, lost {len(missing)}, Remember codes {dict(storm.codes)}, "
        f"reads refused UNAVAILABLE after recovery {stale_reads}, listed {len(listed)}, "
        f"rounds {rounds}"
    )
    assert missing == [], f"{len(missing)} acknowledged memories lost"
    assert set(storm.acked) <= listed
    # beyond the acknowledged: committed, then refused as the connection dropped
    assert len(listed) <= storm.sent
    assert store.stop() == 0
    check_postgres_rows(dsn, listed)
