"""SIGKILL the store in the middle of a storm of concurrent Remember calls.

An acknowledged Remember is a committed write: every memory whose Remember got a
response before the kill must be there after a restart, with its content, and
the full-text index must still agree with the memories table.
"""

from __future__ import annotations

from pathlib import Path

from crash_helpers import (
    NAMESPACE,
    PER_MEMORY_ROWS,
    PIPELINE_ON,
    TOKEN,
    storm_kill_and_restart,
)

from e2e_helpers import Launcher
from services.storage.db import open_read_only, open_read_write


def test_sigkill_during_concurrent_remembers_loses_no_acknowledged_memory(
    launcher: Launcher, data_dir: Path
) -> None:
    # The pipeline on: each Remember then queues an extract job in its transaction too.
    listed_ids = storm_kill_and_restart(launcher, data_dir, PIPELINE_ON)
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
        per_memory = conn.execute(PER_MEMORY_ROWS, (NAMESPACE,)).fetchall()
        assert [tuple(r)[1:] for r in per_memory if tuple(r)[1:] != (1, 1, 1)] == []
    finally:
        conn.close()
