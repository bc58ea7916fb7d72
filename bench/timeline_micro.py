"""In-process cost of the temporal next-in-session link (issue 17).

    flock /tmp/engram-bench.lock .venv/bin/python bench/timeline_micro.py [--rounds 3]

Runs `mutations.create` (the one write rule of Remember, ImportMemories and
AppendTurn) over 32-memory batches, one transaction each, into a fresh file:
without session ids, with every memory of a batch in its own session (32), and
all in one session; prints the CPU time per memory after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gen")]

from services.common import clock  # noqa: E402
from services.storage.db import open_read_write  # noqa: E402
from services.storage.sqlite_migrations import apply_migrations  # noqa: E402
from services.store import mutations, rules  # noqa: E402
from services.store.memories import prepare_drafts  # noqa: E402

BATCH = 32


def per_memory_us(sessions: int, batches: int, warmup: int) -> float:
    conn = open_read_write(Path(tempfile.mkdtemp(prefix="engram-timeline-")) / "engram.db")
    apply_migrations(conn)
    n = 0
    spent = 0.0
    for batch in range(warmup + batches):
        drafts = []
        for _ in range(BATCH):
            n += 1
            drafts.append(
                rules.draft_memory(
                    rules.MemoryFields(
                        namespace="bench",
                        content=f"memory number {n} about project {n % 97}",
                        who="bench",
                        why="timeline",
                        session_id=f"s{n % sessions}" if sessions else "",
                    )
                )
            )
        prepared = prepare_drafts(drafts, clock.now_text(), 3, extract=False)
        started = time.process_time()
        conn.execute("BEGIN IMMEDIATE")
        mutations.create(conn, prepared)
        conn.execute("COMMIT")
        if batch >= warmup:
            spent += time.process_time() - started
    conn.close()
    return spent / (batches * BATCH) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()
    print(f"CPU µs per memory, batches of {BATCH}; pid {os.getpid()}")
    for index in range(args.rounds):
        cells = {
            name: per_memory_us(sessions, args.batches, args.warmup)
            for name, sessions in (("no session", 0), ("32 sessions", 32), ("1 session", 1))
        }
        print(f"round {index}: " + ", ".join(f"{k} {v:.1f}" for k, v in cells.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
