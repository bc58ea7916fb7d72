"""Recall never returns another namespace's memories and never fails, however the
store's writes interleave with its reads (issue 11, items 1 and 5).

The race: tenant B is alone in the database, so its Recalls take the whole-index
path (FTS5's own ranking over every document), while tenant A remembers and
deletes memories with the same words in a loop. Before each Recall read one
snapshot, a memory of A committed between the "B holds every live memory" check
and the keyword query came back in B's results, and counts read from two
snapshots made `bm25_idf` take the log of a negative number (INTERNAL).

The race runs for a bounded time and bounded counts; it asserts on what it saw,
never on timing. The deterministic tests below pin each part of the fix: the read
pool's snapshots, every row read checked against the namespace, and a total IDF.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import backend_db
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from extract_write_helpers import write_directly
from http_fakes import VectorBook
from recall_helpers import MODEL, QUERY_VECTOR, Stack, vec
from services.common import clock
from services.common.memory_filter import MemoryFilterSpec
from services.common.vectors import normalized_f32
from services.search.recall import bm25_idf
from services.storage.db import ReadPool, open_read_write
from services.storage.search import pg_vectors, queries

RACE_SECONDS = 5.0
MAX_RECALLS = 4000
MAX_WRITES = 4000
RECALLERS = 2


@pytest.mark.parametrize(
    ("namespaces", "rpc"),
    [
        (("tenant-b",), "Recall"),
        (("tenant-b", "tenant-c"), "Recall"),
        (("tenant-b", "tenant-c"), "AssembleContext"),
    ],
)
def test_recall_never_returns_another_namespace_while_it_writes(
    recall_stack: Callable[..., Stack], namespaces: tuple[str, ...], rpc: str
) -> None:
    """Also for a Recall over several namespaces, and AssembleContext's (issue 16):
    tenant-c holds nothing, so tenant-b still takes the whole-index path inside the
    multi-namespace read."""
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
                if rpc == "AssembleContext":
                    assembled = stack.search.AssembleContext(
                        search_pb2.AssembleContextRequest(
                            namespaces=list(namespaces), query="apple pie"
                        ),
                        timeout=30,
                    )
                    got = [m for section in assembled.sections for m in section.memories]
                else:
                    response = stack.search.Recall(
                        search_pb2.RecallRequest(
                            namespace="tenant-b" if len(namespaces) == 1 else "",
                            namespaces=list(namespaces) if len(namespaces) > 1 else [],
                            query="apple pie",
                            limit=10,
                        ),
                        timeout=30,
                    )
                    got = [r.memory for r in response.results]
            except grpc.RpcError as error:
                errors.append(f"{error.code()}: {error.details()}")
                continue
            finally:
                recalls[slot] += 1
            foreign.extend(m.id for m in got if m.namespace != "tenant-b" or m.id not in own)

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
    # the figures bench/README.md records per backend (run with -s)
    print(f"\n{rpc} {namespaces}: {summary}, {len(foreign)} foreign, {len(errors)} failed")
    assert not errors and not foreign, (
        f"{len(foreign)} foreign results and {len(errors)} failed Recalls in {summary}"
        f"{'; e.g. ' + errors[0] if errors else ''}"
    )


# ---- every row read names the namespace ---------------------------------------------


def _rowids(path: Path) -> dict[str, int]:
    return {row[0]: row[1] for row in backend_db.rows(path, "SELECT id, rowid FROM memories")}


def _read(path: Path, query: queries.Query) -> list[Any]:
    return backend_db.rows(path, query[0], *query[1])


def test_memory_rows_are_read_only_under_their_own_namespace(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """Whatever rowids a channel (or the vector cache) proposes, the rows that
    scoring and the response use come back only for the caller's namespace."""
    stack, _book = vector_stack()
    mine = stack.remember("apple pie recipe", namespace="tenant-b")
    theirs = stack.remember("apple pie secret", namespace="tenant-a")
    stack.embed_pending(lambda _text: vec(0.9))
    path = Path(stack.config.storage.path)
    rowid = _rowids(path)
    both = [rowid[theirs.id], rowid[mine.id]]

    dialect = backend_db.dialect(path)
    pool = queries.pool_rows("tenant-b", both, MODEL, dialect=dialect)
    assert [r[0] for r in _read(path, pool)] == [rowid[mine.id]]
    memories = queries.memories_by_rowid("tenant-b", both, dialect=dialect)
    assert [r[0] for r in _read(path, memories)] == [rowid[mine.id]]
    now = clock.to_text(clock.now())
    decay = queries.decay_inputs("tenant-b", both, 0.1, now, dialect=dialect)
    assert [r[0] for r in _read(path, decay)] == [rowid[mine.id]]
    # the first pass: SQLite's whole-index one (taken when one namespace holds
    # every memory), Postgres's HNSW scan
    query = normalized_f32(QUERY_VECTOR)
    assert query is not None
    first_pass = (
        pg_vectors.vector_candidates(query, "tenant-b", MemoryFilterSpec(), 10)
        if dialect.is_postgres
        else queries.vector_candidates(query, "tenant-b", MemoryFilterSpec(), 10, True)
    )
    assert [r[0] for r in _read(path, first_pass)] == [rowid[mine.id]]


def test_a_vector_row_naming_the_wrong_namespace_never_surfaces_its_memory(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """The vector cache proposes whatever rowids its namespace's rows name; a row
    that names the wrong one (a stale cache, a bad index row) is caught when the
    memory is read, so the response never carries another namespace's memory."""
    stack, _book = vector_stack()
    mine = stack.remember("a note of mine", namespace="tenant-b")
    stack.embed_pending(lambda _text: vec(0.5))
    theirs = stack.remember("their secret", namespace="tenant-a")
    stack.embed_pending(lambda _text: vec(0.99))
    assert [r.memory.id for r in stack.recall("zebra", namespace="tenant-b").results] == [mine.id]

    rowid = _rowids(Path(stack.config.storage.path))[theirs.id]
    write_directly(
        stack, f"UPDATE memory_vectors SET namespace = 'tenant-b' WHERE memory_rowid = {rowid}"
    )
    response = stack.recall("zebra", namespace="tenant-b")
    assert [r.memory.id for r in response.results] == [mine.id]


# ---- ReadPool.snapshot ----------------------------------------------------------------


def _counter_file(path: Path) -> Any:
    writer = open_read_write(path, synchronous="NORMAL")
    writer.execute("CREATE TABLE t(x INTEGER)")
    writer.execute("INSERT INTO t VALUES (1)")
    return writer


COUNT: queries.Query = ("SELECT count(*) FROM t", [])


def test_a_snapshot_sees_the_database_as_of_its_first_read(tmp_path: Path) -> None:
    path = tmp_path / "snap.db"
    writer = _counter_file(path)

    async def scenario() -> None:
        reads = ReadPool(path, size=2)
        await reads.open()
        try:
            async with reads.snapshot() as snap:
                assert (await snap.fetch_one(COUNT))[0] == 1
                writer.execute("INSERT INTO t VALUES (2)")  # committed meanwhile
                assert (await snap.fetch_one(COUNT))[0] == 1
                assert (await reads.fetch_one(COUNT))[0] == 2  # a plain read: its own
            async with reads.snapshot() as snap:
                assert (await snap.fetch_one(COUNT))[0] == 2
        finally:
            await reads.close()

    asyncio.run(scenario())
    writer.close()


def test_two_snapshots_never_share_a_connection(tmp_path: Path) -> None:
    path = tmp_path / "snap.db"
    _counter_file(path).close()

    async def scenario() -> None:
        reads = ReadPool(path, size=1, max_size=1)
        await reads.open()
        entered: list[str] = []

        async def second() -> None:
            async with reads.snapshot() as snap:
                entered.append("second")
                await snap.fetch_one(COUNT)

        try:
            async with reads.snapshot() as snap:
                await snap.fetch_one(COUNT)
                waiting = asyncio.create_task(second())
                for _ in range(20):  # let it run as far as it can
                    await asyncio.sleep(0)
                assert entered == [], "the only connection is taken"
            await waiting
            assert entered == ["second"]
        finally:
            await reads.close()

    asyncio.run(scenario())


def test_a_cancelled_reader_leaves_no_open_snapshot_behind(tmp_path: Path) -> None:
    path = tmp_path / "snap.db"
    writer = _counter_file(path)

    async def scenario() -> None:
        reads = ReadPool(path, size=1, max_size=1)
        await reads.open()
        inside = asyncio.Event()

        async def reader() -> None:
            async with reads.snapshot() as snap:
                await snap.fetch_one(COUNT)
                inside.set()
                await asyncio.Event().wait()  # cancelled here, mid-snapshot

        try:
            task = asyncio.create_task(reader())
            await inside.wait()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            writer.execute("INSERT INTO t VALUES (2)")
            assert (await reads.fetch_one(COUNT))[0] == 2  # the same connection, fresh
        finally:
            await reads.close()

    asyncio.run(scenario())
    writer.close()


# ---- bm25_idf is total ----------------------------------------------------------------


@given(st.integers(), st.integers())
def test_bm25_idf_never_raises_and_is_positive(collection_size: int, containing: int) -> None:
    idf = bm25_idf(collection_size, containing)
    assert math.isfinite(idf) and idf > 0


@given(st.integers(0, 10**12).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_bm25_idf_is_fts5s_formula_for_counts_in_range(counts: tuple[int, int]) -> None:
    size, containing = counts
    fts5 = math.log((size - containing + 0.5) / (containing + 0.5))
    assert bm25_idf(size, containing) == (fts5 if fts5 > 0 else 1e-6)


def test_bm25_idf_clamps_counts_from_different_snapshots() -> None:
    """More documents containing a term than the collection holds (counted at
    different moments) reads as "every document": the floor, not a domain error."""
    assert bm25_idf(3, 4) == bm25_idf(3, 3) == 1e-6
    assert bm25_idf(-1, 0) == 1e-6
    assert bm25_idf(10, -5) == bm25_idf(10, 0)
    assert bm25_idf(10**400, 1) > 0
