"""SIGKILL the store in the middle of a storm of concurrent Remember calls.

An acknowledged Remember is a committed write: every memory whose Remember got a
response before the kill must be there after a restart, with its content, and
the full-text index must still agree with the memories table.
"""

from __future__ import annotations

import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from e2e_helpers import Launcher
from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.db import open_read_only, open_read_write

THREADS = 32
KILL_AFTER_ACKS = 300
NAMESPACE = "crash"
TOKEN = re.compile(r"\bzq(\d+)x(\d+)\b")


def content_for(thread: int, seq: int) -> str:
    # One unique FTS token per memory ("zq<thread>x<seq>") plus shared words.
    return f"crash durability memory zq{thread}x{seq} written under load"


@dataclass
class Storm:
    """Shared state of the writer threads."""

    killed: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)  # id -> content
    enough: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    sent: int = 0
    errors: list[str] = field(default_factory=list)


def writer_thread(stub: store_pb2_grpc.MemoryStoreServiceStub, storm: Storm, thread: int) -> None:
    seq = 0
    while not storm.killed.is_set():
        content = content_for(thread, seq)
        seq += 1
        with storm.lock:
            storm.in_flight += 1
            storm.sent += 1
        try:
            response = stub.Remember(
                store_pb2.RememberRequest(namespace=NAMESPACE, content=content), timeout=30
            )
        except grpc.RpcError as exc:
            with storm.lock:
                storm.in_flight -= 1
                if not storm.killed.is_set():
                    storm.errors.append(f"{exc.code()}: {exc.details()}")
            return
        with storm.lock:
            storm.in_flight -= 1
            # A response that arrives after the kill was still acknowledged by the
            # server before it died, so it must be durable too.
            storm.acked[response.memory.id] = content
            if response.deduplicated or response.memory.content != content:
                storm.errors.append(f"unexpected reply for {content!r}: {response}")
            if len(storm.acked) >= KILL_AFTER_ACKS:
                storm.enough.set()


PIPELINE_ON = {"ENGRAM_MEMORY__PIPELINEV2__ENABLED": "true"}


def test_sigkill_during_concurrent_remembers_loses_no_acknowledged_memory(
    launcher: Launcher, data_dir: Path
) -> None:
    # The pipeline on: each Remember then queues an extract job in its transaction too.
    store = launcher.start_store(data_dir, env=PIPELINE_ON)
    stub = store.stub()
    storm = Storm()
    threads = [
        threading.Thread(target=writer_thread, args=(stub, storm, n), daemon=True)
        for n in range(THREADS)
    ]
    for thread in threads:
        thread.start()

    assert storm.enough.wait(timeout=120), f"only {len(storm.acked)} acks; log:\n{store.log()}"
    with storm.lock:
        # Snapshot under the lock, then kill: any ack recorded after this point
        # was also produced by the server before it died.
        in_flight_at_kill = storm.in_flight
        storm.killed.set()
        store.signal(signal.SIGKILL)
    assert store.wait_exit() == -signal.SIGKILL
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    store.close_channels()

    assert storm.errors == []
    assert len(storm.acked) >= KILL_AFTER_ACKS
    assert storm.sent >= 200
    assert in_flight_at_kill > 0, "the kill must land while Remember calls are in flight"

    # Restart on the same data directory: every acknowledged memory is there.
    restarted = launcher.start_store(data_dir, env=PIPELINE_ON)
    stub = restarted.stub()
    missing: list[str] = []
    for memory_id, content in storm.acked.items():
        try:
            got = stub.GetMemory(
                store_pb2.GetMemoryRequest(namespace=NAMESPACE, id=memory_id), timeout=10
            )
        except grpc.RpcError as exc:
            missing.append(f"{memory_id}: {exc.code()}")
            continue
        assert got.memory.content == content
        assert got.memory.deleted is False
        assert got.memory.version == 1
    assert missing == [], f"{len(missing)} acknowledged memories lost after SIGKILL"

    listed_ids: set[str] = set()
    token = ""
    while True:
        page = stub.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=NAMESPACE, page_size=500, page_token=token),
            timeout=10,
        )
        listed_ids.update(m.id for m in page.memories)
        token = page.next_page_token
        if not token:
            break
    assert set(storm.acked) <= listed_ids
    # Anything beyond the acknowledged set was in flight at the kill (committed,
    # but the reply never arrived) and can only come from calls we actually sent.
    assert len(listed_ids) <= storm.sent

    # Still writable after recovery, and dedup still sees pre-crash rows.
    some_id, some_content = next(iter(storm.acked.items()))
    again = stub.Remember(
        store_pb2.RememberRequest(namespace=NAMESPACE, content=some_content), timeout=10
    )
    assert again.deduplicated and again.memory.id == some_id
    assert restarted.stop() == 0

    check_database(data_dir / "engram.db", listed_ids)


def check_database(db_path: Path, live_ids: set[str]) -> None:
    """With the store stopped: SQLite and FTS5 integrity, and FTS agrees with the table."""
    reader = open_read_only(db_path)
    try:
        # A read-only connection cannot even run the FTS5 integrity-check command.
        try:
            reader.execute("INSERT INTO memories_fts(memories_fts) VALUES('integrity-check')")
        except Exception as exc:
            assert "readonly" in str(exc).lower() or "read-only" in str(exc).lower(), exc
        else:
            raise AssertionError("a read-only connection ran an FTS5 write command")
    finally:
        reader.close()

    conn = open_read_write(db_path)
    try:
        assert [tuple(r) for r in conn.execute("PRAGMA integrity_check")] == [("ok",)]
        # rank=1: also compare the index against the external content table.
        conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES('integrity-check', 1)")

        rows = conn.execute(
            "SELECT rowid, id, content FROM memories WHERE namespace = ? AND is_deleted = 0",
            (NAMESPACE,),
        ).fetchall()
        assert {r["id"] for r in rows} == live_ids
        live_total = conn.execute("SELECT count(*) FROM memories WHERE is_deleted = 0").fetchone()[
            0
        ]
        fts_total = conn.execute("SELECT count(*) FROM memories_fts").fetchone()[0]
        assert fts_total == live_total == len(rows)

        unfindable: list[str] = []
        for row in rows:
            match = TOKEN.search(row["content"])
            assert match is not None, row["content"]
            hits = conn.execute(
                "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?",
                (f'"{match.group(0)}"',),
            ).fetchall()
            if [h[0] for h in hits] != [row["rowid"]]:
                unfindable.append(row["id"])
        assert unfindable == []

        # Exactly one created event and one embed and extract job per memory.
        per_memory = conn.execute(
            "SELECT m.id, "
            " (SELECT count(*) FROM memory_history h WHERE h.memory_id = m.id AND h.event = 'created'),"
            " (SELECT count(*) FROM memory_jobs j WHERE j.memory_id = m.id AND j.job_type = 'embed'),"
            " (SELECT count(*) FROM memory_jobs j WHERE j.memory_id = m.id AND j.job_type = 'extract')"
            " FROM memories m WHERE m.namespace = ?",
            (NAMESPACE,),
        ).fetchall()
        assert [tuple(r)[1:] for r in per_memory if tuple(r)[1:] != (1, 1, 1)] == []
    finally:
        conn.close()
