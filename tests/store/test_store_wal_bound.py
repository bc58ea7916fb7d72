"""The store keeps its SQLite WAL bounded while Recalls overlap without a gap
(storage.wal_restart_mb). SQLite restarts a WAL only once a checkpoint has
copied every frame while no reader holds an older snapshot; search's Recalls,
several always in flight, each hold one, so the writer's passive checkpoints
never get there and the WAL grew without bound (2,780 MB for a 139 MB database
in 15 minutes, bench/README.md "Search memory under load"). Past the limit the
writer forces a RESTART checkpoint between groups, and the file is reused.

Real store and search servers on one SQLite file, keywords only (no embedding
work, to keep the CPU for the load): Remembers from a few threads while more
threads keep Recalls in flight, the WAL file's size sampled all along."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from services.common.config import Config, StorageSettings
from services.storage.db import MIB

pytestmark = pytest.mark.sqlite_only("the WAL file is SQLite's; PostgreSQL manages its own")

WRITES = 400  # Remembers of 2 KB: 20-30 MB of WAL when nothing restarts it
WRITER_THREADS = 4
RECALL_THREADS = 6
LIMIT_MB = 1
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]


def _restarts(outcome: str) -> float:
    value = REGISTRY.get_sample_value("engram_writer_wal_restarts_total", {"outcome": outcome})
    return value or 0.0


def _load(stack: Any) -> int:
    """Run the mixed load to its end; the largest WAL file size seen (bytes)."""
    wal = Path(stack.config.storage.path + "-wal")
    done = threading.Event()
    errors: list[BaseException] = []
    peak = 0
    recalls = 0
    next_write = iter(range(WRITES))
    lock = threading.Lock()

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:
                errors.append(exc)
                done.set()

        return run

    def remember() -> None:
        while not done.is_set():
            with lock:
                i = next(next_write, None)
            if i is None:
                return
            words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7))
            stack.remember(f"note {i}: {words} " + "context " * 250)

    def recall() -> None:
        nonlocal recalls
        i = 0
        while not done.is_set():
            stack.recall(WORDS[i % len(WORDS)], limit=5)
            i += 1
            recalls += 1

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            with contextlib.suppress(FileNotFoundError):
                peak = max(peak, os.stat(wal).st_size)

    stack.remember("first note: alpha bravo")  # the WAL exists before the readers start
    readers = [threading.Thread(target=guarded(recall)) for _ in range(RECALL_THREADS)]
    writers = [threading.Thread(target=guarded(remember)) for _ in range(WRITER_THREADS)]
    sampler = threading.Thread(target=sample)
    for thread in [sampler, *readers, *writers]:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    for thread in [sampler, *readers]:
        thread.join()
    assert not errors, errors
    assert recalls > 0
    return max(peak, os.stat(wal).st_size)


def test_the_wal_stays_bounded_under_overlapping_recalls(
    recall_stack: Callable[..., Any],
) -> None:
    before = {outcome: _restarts(outcome) for outcome in ("restarted", "gave_up", "failed")}
    stack = recall_stack({"providers.embedding.kind": "none", "storage.wal_restart_mb": LIMIT_MB})
    peak = _load(stack)
    restarted, gave_up, failed = (_restarts(o) - before[o] for o in before)
    # Each try given up (a snapshot outlasting the wait) lets the WAL grow by one
    # more limit before the next; 1 MiB more covers the group in flight.
    assert peak <= (2 + gave_up) * LIMIT_MB * MIB + MIB, (peak, restarted, gave_up)
    assert restarted >= 1
    assert failed == 0
    assert REGISTRY.get_sample_value("engram_writer_wal_bytes") is not None


def test_without_the_limit_the_same_load_grows_the_wal_past_that_bound(
    recall_stack: Callable[..., Any],
) -> None:
    """The load above does starve SQLite's own checkpoints: off (0), the WAL
    grows well past the bound the limit keeps it in."""
    stack = recall_stack({"providers.embedding.kind": "none", "storage.wal_restart_mb": 0})
    peak = _load(stack)
    assert peak > 4 * LIMIT_MB * MIB, peak


def test_the_setting_default_and_its_limits() -> None:
    assert Config().storage.wal_restart_mb == 64
    assert StorageSettings(wal_restart_mb=0).wal_restart_mb == 0  # off
    with pytest.raises(ValueError, match="wal_restart_mb"):
        StorageSettings(wal_restart_mb=-1)
