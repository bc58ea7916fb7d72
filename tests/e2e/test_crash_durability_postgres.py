"""SIGKILL the store on PostgreSQL in the middle of a storm of concurrent
Remember calls (tests/e2e/test_crash_durability.py's method, on the other backend).

The store is a real process (`engram serve store`) with `storage.kind=postgres`
on a fresh database of the session's real PostgreSQL, which it migrates as it
first starts. An acknowledged Remember is a committed transaction: every memory
whose Remember got a response before the kill is there after a restart, with its
content, findable through its text index entry, with exactly its one created
event and its jobs; and nothing half-written is left by the calls the kill cut
off (no history or jobs without their memory, no memory without them).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import grpc
from test_crash_durability import (
    KILL_AFTER_ACKS,
    NAMESPACE,
    PIPELINE_ON,
    THREADS,
    TOKEN,
    Storm,
    writer_thread,
)

from e2e_helpers import Launcher
from engram.store.v1 import store_pb2


def test_sigkill_on_postgres_during_concurrent_remembers_loses_no_acknowledged_memory(
    launcher: Launcher, data_dir: Path, pg_dsn: str
) -> None:
    env = {
        **PIPELINE_ON,  # each Remember queues an extract job in its transaction too
        "ENGRAM_STORAGE__KIND": "postgres",
        "ENGRAM_STORAGE__POSTGRES__DSN": pg_dsn,
    }
    store = launcher.start_store(data_dir, env=env)
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

    # Restart on the same database: every acknowledged memory is there.
    restarted = launcher.start_store(data_dir, env=env)
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

    check_database(pg_dsn, listed_ids)


def check_database(dsn: str, live_ids: set[str]) -> None:
    """With the store stopped: the rows agree with what was acknowledged, the
    text index entry of every live memory finds it and only it, and each
    memory's transaction left all of its rows or none."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT rowid, id, content FROM memories WHERE namespace = %s AND is_deleted = 0",
            (NAMESPACE,),
        ).fetchall()
        assert {r[1] for r in rows} == live_ids
        assert _one(conn, "SELECT count(*) FROM memories") == len(rows)
        assert _one(conn, "SELECT count(*) FROM memories WHERE content_tsv IS NOT NULL") == len(
            rows
        )
        unfindable: list[str] = []
        for rowid, memory_id, content in rows:
            match = TOKEN.search(content)
            assert match is not None, content
            hits = conn.execute(
                "SELECT rowid FROM memories"
                " WHERE content_tsv @@ phraseto_tsquery('engram_english', %s)",
                (match.group(0),),
            ).fetchall()
            if [h[0] for h in hits] != [rowid]:
                unfindable.append(memory_id)
        assert unfindable == []

        # Exactly one created event and one embed and extract job per memory ...
        per_memory = conn.execute(
            "SELECT m.id, "
            " (SELECT count(*) FROM memory_history h WHERE h.memory_id = m.id AND h.event = 'created'),"
            " (SELECT count(*) FROM memory_jobs j WHERE j.memory_id = m.id AND j.job_type = 'embed'),"
            " (SELECT count(*) FROM memory_jobs j WHERE j.memory_id = m.id AND j.job_type = 'extract')"
            " FROM memories m WHERE m.namespace = %s",
            (NAMESPACE,),
        ).fetchall()
        assert [tuple(r)[1:] for r in per_memory if tuple(r)[1:] != (1, 1, 1)] == []
        # ... and nothing of a Remember the kill cut off: no history or job rows
        # whose memory was never committed.
        assert (
            _one(
                conn,
                "SELECT count(*) FROM memory_history"
                " WHERE memory_id NOT IN (SELECT id FROM memories)",
            )
            == 0
        )
        assert (
            _one(
                conn,
                "SELECT count(*) FROM memory_jobs"
                " WHERE memory_id IS NOT NULL AND memory_id NOT IN (SELECT id FROM memories)",
            )
            == 0
        )
        # Every index survived the kill usable (none left invalid by a torn build).
        assert _one(conn, "SELECT count(*) FROM pg_index WHERE NOT indisvalid") == 0


def _one(conn: Any, sql: str) -> Any:
    return conn.execute(sql).fetchone()[0]
