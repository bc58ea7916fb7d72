"""Recall never returns another namespace's memories and never fails, however the
store's writes interleave with its reads (issue 11, items 1 and 5).

The race: tenant B is alone in the database, so its Recalls take the whole-index
path (FTS5's own ranking over every document), while tenant A remembers and
deletes memories with the same words in a loop. Before each Recall read one
snapshot, a memory of A committed between the "B holds every live memory" check
and the keyword query came back in B's results, and counts read from two
snapshots made `bm25_idf` take the log of a negative number (INTERNAL).

The race runs for a bounded time and bounded counts; it asserts on what it saw,
never on timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc

from engram.store.v1 import store_pb2
from recall_helpers import Stack

RACE_SECONDS = 5.0
MAX_RECALLS = 4000
MAX_WRITES = 4000
RECALLERS = 2


def test_recall_never_returns_another_namespace_while_it_writes(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({"providers.embedding.kind": "none"})
    own = {
        stack.remember(f"apple pie recipe number {i}", namespace="tenant-b").id for i in range(3)
    }
    stop = threading.Event()
    foreign: list[str] = []
    errors: list[str] = []
    recalls = [0] * RECALLERS
    writes = [0]

    def write_and_delete() -> None:
        while not stop.is_set() and writes[0] < MAX_WRITES:
            memory = stack.remember(f"apple pie from tenant a {writes[0]}", namespace="tenant-a")
            stack.store.DeleteMemory(
                store_pb2.DeleteMemoryRequest(namespace="tenant-a", id=memory.id, reason="race")
            )
            writes[0] += 1

    def recall(slot: int) -> None:
        while not stop.is_set() and recalls[slot] < MAX_RECALLS:
            try:
                response = stack.recall("apple pie", namespace="tenant-b", limit=10)
            except grpc.RpcError as error:
                errors.append(f"{error.code()}: {error.details()}")
                continue
            finally:
                recalls[slot] += 1
            foreign.extend(
                r.memory.id
                for r in response.results
                if r.memory.namespace != "tenant-b" or r.memory.id not in own
            )

    threads = [threading.Thread(target=write_and_delete)]
    threads += [threading.Thread(target=recall, args=(slot,)) for slot in range(RECALLERS)]
    for thread in threads:
        thread.start()
    time.sleep(RACE_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)

    assert writes[0] > 0 and sum(recalls) > 0, "the race ran"
    summary = f"{sum(recalls)} recalls, {writes[0]} remember+delete pairs"
    assert not errors and not foreign, (
        f"{len(foreign)} foreign results and {len(errors)} failed Recalls in {summary}"
        f"{'; e.g. ' + errors[0] if errors else ''}"
    )
