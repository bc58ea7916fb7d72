"""The crash-durability method both backends' tests share
(tests/e2e/test_crash_durability.py on SQLite, test_crash_durability_postgres.py on
PostgreSQL): a storm of concurrent Remember calls, SIGKILL of the store while calls
are in flight, a restart on the same data, and the checks through the API that
every acknowledged memory survived. Each test then checks its backend's rows."""

from __future__ import annotations

import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from e2e_helpers import Launcher, listed_ids, lost_memories
from engram.store.v1 import store_pb2, store_pb2_grpc

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


# Per memory of the storm: its created events, embed jobs and extract jobs; a
# committed Remember has exactly (1, 1, 1). sqlite3's `?` (pg.translate for Postgres).
PER_MEMORY_ROWS = (
    "SELECT m.id, "
    " (SELECT count(*) FROM memory_history h WHERE h.memory_id = m.id AND h.event = 'created'),"
    " (SELECT count(*) FROM memory_jobs j WHERE j.memory_id = m.id AND j.job_type = 'embed'),"
    " (SELECT count(*) FROM memory_jobs j WHERE j.memory_id = m.id AND j.job_type = 'extract')"
    " FROM memories m WHERE m.namespace = ?"
)

PIPELINE_ON = {"ENGRAM_MEMORY__PIPELINEV2__ENABLED": "true"}


def storm_kill_and_restart(
    launcher: Launcher, data_dir: Path, env: dict[str, str], *, concurrency: int = THREADS
) -> set[str]:
    """Run the storm (`concurrency` Remember calls in flight), SIGKILL the store
    mid-storm, restart it with the same `env`, check every acknowledged memory
    through the API, stop it; the ids it lists after the restart (the acknowledged
    ones and any committed but unanswered)."""
    store = launcher.start_store(data_dir, env=env)
    stub = store.stub()
    storm = Storm()
    threads = [
        threading.Thread(target=writer_thread, args=(stub, storm, n), daemon=True)
        for n in range(concurrency)
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

    # Restart on the same data: every acknowledged memory is there.
    restarted = launcher.start_store(data_dir, env=env)
    stub = restarted.stub()
    missing = lost_memories(stub, NAMESPACE, storm.acked)
    assert missing == [], f"{len(missing)} acknowledged memories lost after SIGKILL"

    listed = listed_ids(stub, NAMESPACE)
    # the figures bench/README.md records per backend (run with -s)
    print(
        f"\nstore SIGKILL: sent {storm.sent}, acknowledged {len(storm.acked)}, in flight at "
        f"the kill {in_flight_at_kill}, lost {len(missing)}, listed after restart {len(listed)}"
    )
    assert set(storm.acked) <= listed
    # Anything beyond the acknowledged set was in flight at the kill (committed,
    # but the reply never arrived) and can only come from calls we actually sent.
    assert len(listed) <= storm.sent

    # Still writable after recovery, and dedup still sees pre-crash rows.
    some_id, some_content = next(iter(storm.acked.items()))
    again = stub.Remember(
        store_pb2.RememberRequest(namespace=NAMESPACE, content=some_content), timeout=10
    )
    assert again.deduplicated and again.memory.id == some_id
    assert restarted.stop() == 0

    return listed


def check_postgres_rows(dsn: str, live_ids: set[str]) -> None:
    """With the store stopped: the rows agree with what was acknowledged, the
    text index entry of every live memory finds it and only it, and each
    memory's transaction left all of its rows or none."""
    import psycopg

    from services.storage import pg

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
        per_memory = conn.execute(pg.translate(PER_MEMORY_ROWS), (NAMESPACE,)).fetchall()
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
