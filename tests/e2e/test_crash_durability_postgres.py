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

from crash_helpers import PIPELINE_ON, check_postgres_rows, storm_kill_and_restart

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
    check_postgres_rows(pg_dsn, listed_ids)
