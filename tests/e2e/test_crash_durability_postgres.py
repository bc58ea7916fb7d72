"""SIGKILL the store on PostgreSQL in the middle of a storm of 200 concurrent
Remember calls (tests/e2e/crash_helpers.py's method, test_crash_durability.py's on SQLite).

The store is a real process (`engram serve store`) with `storage.kind=postgres`
on a fresh database of the session's real PostgreSQL, which it migrates as it
first starts. An acknowledged Remember is a committed transaction: every memory
whose Remember got a response before the kill is there after a restart, with its
content, findable through its text index entry, with exactly its one created
event and its jobs; and nothing half-written is left by the calls the kill cut
off (no history or jobs without their memory, no memory without them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crash_helpers import (
    NAMESPACE,
    PER_MEMORY_ROWS,
    PIPELINE_ON,
    TOKEN,
    storm_kill_and_restart,
)

from e2e_helpers import Launcher


def test_sigkill_on_postgres_during_concurrent_remembers_loses_no_acknowledged_memory(
    launcher: Launcher, data_dir: Path, pg_dsn: str
) -> None:
    env = {
        **PIPELINE_ON,  # each Remember queues an extract job in its transaction too
        "ENGRAM_STORAGE__KIND": "postgres",
        "ENGRAM_STORAGE__POSTGRES__DSN": pg_dsn,
    }
    # issue 21: the kill lands under 200 concurrent Remembers
    listed_ids = storm_kill_and_restart(launcher, data_dir, env, concurrency=200)
    check_database(pg_dsn, listed_ids)


def check_database(dsn: str, live_ids: set[str]) -> None:
    """With the store stopped: the rows agree with what was acknowledged, the
    text index entry of every live memory finds it and only it, and each
    memory's transaction left all of its rows or none."""
    import psycopg

    from services.common import pg

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
