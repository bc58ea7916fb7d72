"""ImportMemories commits as the stream arrives: the store's memory does not grow
with the number of items imported (measured from /proc on a real store process)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e_helpers import Launcher, ProcessHandle
from engram.store.v1 import store_pb2
from services.store.memories import MAX_IMPORT_STREAM_ITEMS

MESSAGE_ITEMS = 500
# Growth allowed on top of the store's RSS after one warm-up stream. One stream
# of MAX_IMPORT_STREAM_ITEMS holds its results (a few MiB) and a few chunks in
# flight; the rest is allocator and SQLite cache slack. Buffering the whole
# stream, as the store once did, cost about 5.5 KiB per item (40,000 items:
# +221 MiB).
RSS_GROWTH_BOUND_MIB = 48

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the store's RSS from /proc"
)


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of a process, in KiB."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def stream(start: int, count: int) -> Iterator[store_pb2.ImportMemoriesRequest]:
    for first in range(start, start + count, MESSAGE_ITEMS):
        yield store_pb2.ImportMemoriesRequest(
            namespace="bulk",
            items=[
                store_pb2.ImportItem(content=f"imported memory number {n} about topic {n % 97}")
                for n in range(first, min(first + MESSAGE_ITEMS, start + count))
            ],
        )


def import_items(store: ProcessHandle, total: int) -> tuple[dict[str, int], list[dict[str, int]]]:
    """Import `total` items in streams of the per-stream maximum, after a small
    warm-up import; the store's memory after the warm-up and after each stream."""
    stub = store.stub()
    warm_up = stub.ImportMemories(stream(-MESSAGE_ITEMS, MESSAGE_ITEMS), timeout=60)
    assert warm_up.created_count == MESSAGE_ITEMS
    baseline = memory_kib(store.pid)
    samples: list[dict[str, int]] = []
    for start in range(0, total, MAX_IMPORT_STREAM_ITEMS):
        count = min(MAX_IMPORT_STREAM_ITEMS, total - start)
        response = stub.ImportMemories(stream(start, count), timeout=300)
        assert response.created_count == count
        assert len(response.results) == count
        samples.append(memory_kib(store.pid))
    return baseline, samples


def assert_bounded(baseline: dict[str, int], samples: list[dict[str, int]]) -> None:
    """Neither the store's RSS after any stream nor its peak RSS (VmHWM) rose
    more than the bound above its RSS after the warm-up."""
    growth_mib = [round((s["VmRSS"] - baseline["VmRSS"]) / 1024, 1) for s in samples]
    peak_mib = round((samples[-1]["VmHWM"] - baseline["VmRSS"]) / 1024, 1)
    print(
        f"RSS after warm-up {baseline['VmRSS'] / 1024:.0f} MiB; growth after each stream "
        f"{growth_mib} MiB; peak +{peak_mib} MiB"
    )
    assert max(growth_mib) < RSS_GROWTH_BOUND_MIB, (baseline, samples)
    assert peak_mib < RSS_GROWTH_BOUND_MIB, (baseline, samples)


def test_importing_200000_items_keeps_the_store_memory_bounded(
    launcher: Launcher, data_dir: Path
) -> None:
    store = launcher.start_store(data_dir)
    assert_bounded(*import_items(store, 200_000))
