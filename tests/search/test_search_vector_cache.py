"""The in-memory vector first pass (services/search/vector_cache.py) stays coherent
with the store's writes: remember + embed, delete, recover, content changes,
forget; and a filtered query keeps its first pass in SQL, before the cut.

Every scenario first recalls once so the namespace is cached, then changes the
store, then recalls again. Queries are pure-vector ("striped horse" shares no
word with any memory) and the first pass is shallow (search.vector_candidates =
channel_depth = 10) with more than ten decoys at the same Hamming distance and
lower rowids, so a stale cache would put the wrong rows into the first pass
and the expected memory would be missing.

The last tests exercise VectorCache directly over a store-built file: the
change log's pruned window (a reader that fell behind reloads) and sign-bit
quantisation identical to sqlite-vec's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engram.store.v1 import store_pb2
from http_fakes import VectorBook
from recall_helpers import Stack, ids, vec
from services.search.vector_cache import VectorCache, quantize
from services.storage.db import open_read_only, open_read_write
from services.storage.sqlite_migrations import apply_migrations

SHALLOW = {"search.channel_depth": 10, "search.vector_candidates": 10}
DECOYS = 12
QUERY = "striped horse"  # no keyword in common with any memory below


def cached_stack(vector_stack: Callable[..., tuple[Stack, VectorBook]]) -> Stack:
    stack, book = vector_stack(SHALLOW)
    book.vectors[QUERY] = book.vectors["zebra"]
    return stack


def vector_ids(stack: Stack, **filter_fields: Any) -> list[str]:
    response = stack.recall(QUERY, limit=20, **filter_fields)
    assert not response.degraded
    return [r.memory.id for r in response.results if r.vector.rank]


def plant_decoys(stack: Stack, cosine: float = 0.99) -> list[str]:
    decoys = [stack.remember(f"decoy number {i}").id for i in range(DECOYS)]
    stack.embed_pending(lambda _text: vec(cosine))
    return decoys


def test_memories_embedded_after_the_cache_loaded_are_found(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack = cached_stack(vector_stack)
    first = stack.remember("an early note")
    stack.embed_pending(lambda _text: vec(0.4))
    assert vector_ids(stack) == [first.id]  # the namespace is now cached

    later = stack.remember("a later note")
    stack.embed_pending(lambda _text: vec(0.9))
    assert vector_ids(stack) == [later.id, first.id]


def test_deleted_memories_leave_the_cache_and_the_next_ones_fill_the_first_pass(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack = cached_stack(vector_stack)
    decoys = plant_decoys(stack)
    target = stack.remember("the one that should remain")
    stack.embed_pending(lambda _text: vec(0.5))  # same sign bits as the decoys
    assert target.id not in vector_ids(stack)  # behind twelve ties with lower rowids

    for decoy in decoys:
        stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=decoy, reason="noise"))
    assert vector_ids(stack) == [target.id]

    stack.store.RecoverMemory(store_pb2.RecoverMemoryRequest(id=decoys[0], reason="needed"))
    assert vector_ids(stack) == [decoys[0], target.id]


def test_a_content_change_replaces_the_cached_bits(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack = cached_stack(vector_stack)
    changed = stack.remember("pointing the other way")  # lowest rowid
    stack.embed_pending(lambda _text: vec(-0.9, axis=2))  # two bits from the query
    plant_decoys(stack, cosine=0.3)  # one bit from the query
    assert changed.id not in vector_ids(stack)

    stack.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            patches=[store_pb2.MemoryPatch(id=changed.id, content="now pointing our way")],
            reason="rewrite",
        )
    )
    assert changed.id not in vector_ids(stack)  # not embedded yet: no vector at all
    stack.embed_pending(lambda _text: vec(0.99))
    assert vector_ids(stack)[0] == changed.id


def test_forgotten_memories_leave_the_cache(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack = cached_stack(vector_stack)
    decoys = plant_decoys(stack)
    target = stack.remember("kept through the purge")
    stack.embed_pending(lambda _text: vec(0.5))
    assert target.id not in vector_ids(stack)
    stack.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            ids=decoys, mode=store_pb2.FORGET_MODE_EXECUTE, reason="cleanup"
        )
    )
    assert vector_ids(stack) == [target.id]


def test_a_filtered_query_applies_its_filter_before_the_first_pass_cut(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    stack = cached_stack(vector_stack)
    plant_decoys(stack)
    wanted = stack.remember("tagged and wanted", tags=["keep"])
    stack.embed_pending(lambda _text: vec(0.5))
    assert wanted.id not in vector_ids(stack)  # cached, unfiltered: behind the decoys
    assert vector_ids(stack, tags=["keep"]) == [wanted.id]
    assert ids(stack.recall(QUERY, tags=["keep"])) == [wanted.id]


# ---- VectorCache over a file ----------------------------------------------------------


def _vector_file(path: Path, count: int) -> None:
    conn = open_read_write(path, synchronous="NORMAL")
    apply_migrations(conn)
    rng = np.random.default_rng(5)
    rows = [
        (i, "ns", quantize(rng.standard_normal(16).astype(np.float32).tobytes()))
        for i in range(1, count + 1)
    ]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO memory_vectors(memory_rowid, namespace, bits) VALUES (?, ?, ?)", rows
    )
    conn.execute("COMMIT")
    conn.close()


def _sql_nearest(path: Path, query: bytes, limit: int) -> list[int]:
    conn = open_read_only(path)
    rows = conn.execute(
        "SELECT memory_rowid FROM memory_vectors WHERE namespace = 'ns' ORDER BY "
        "vec_distance_hamming(vec_bit(bits), vec_quantize_binary(vec_f32(?))), memory_rowid "
        "LIMIT ?",
        (query, limit),
    ).fetchall()
    conn.close()
    return [r[0] for r in rows]


def test_cache_matches_sqlite_vec_and_reloads_when_the_log_was_pruned_past_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "vectors.db"
    _vector_file(path, 300)
    rng = np.random.default_rng(9)
    query = rng.standard_normal(16).astype(np.float32).tobytes()
    sqlite_bits = (
        open_read_only(path)
        .execute("SELECT vec_quantize_binary(vec_f32(?))", (query,))
        .fetchone()[0]
    )
    assert quantize(query) == sqlite_bits

    async def scenario() -> None:
        cache = VectorCache(path)
        try:
            assert await cache.nearest("ns", query, 20) == _sql_nearest(path, query, 20)
            assert cache.reloads == 1
            conn = open_read_write(path, synchronous="NORMAL")
            conn.execute("DELETE FROM memory_vectors WHERE memory_rowid <= 100")
            assert await cache.nearest("ns", query, 20) == _sql_nearest(path, query, 20)
            assert cache.reloads == 1  # caught up from the log, no reload
            # 100,000+ logged changes: the log prunes past the cache's position
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "UPDATE memory_vectors SET bits = bits WHERE memory_rowid = ?",
                [(101 + i % 200,) for i in range(50_500)],
            )
            conn.execute("COMMIT")
            oldest = conn.execute("SELECT min(seq) FROM memory_vector_changes").fetchone()[0]
            assert oldest > 1000
            conn.close()
            assert await cache.nearest("ns", query, 20) == _sql_nearest(path, query, 20)
            assert cache.reloads == 2
        finally:
            await cache.close()

    asyncio.run(scenario())


def test_least_recently_searched_namespaces_leave_beyond_max_rows(tmp_path: Path) -> None:
    path = tmp_path / "vectors.db"
    _vector_file(path, 300)  # namespace "ns"
    conn = open_read_write(path, synchronous="NORMAL")
    conn.execute(
        "INSERT INTO memory_vectors(memory_rowid, namespace, bits) "
        "SELECT memory_rowid + 1000, 'other', bits FROM memory_vectors"
    )
    conn.close()
    query = np.random.default_rng(3).standard_normal(16).astype(np.float32).tobytes()

    async def scenario() -> None:
        cache = VectorCache(path, max_rows=400)
        try:
            first = await cache.nearest("ns", query, 10)
            assert first == _sql_nearest(path, query, 10)
            other = await cache.nearest("other", query, 10)
            assert other == [r + 1000 for r in first]
            assert cache.reloads == 2
            assert await cache.nearest("ns", query, 10) == first  # "ns" was evicted
            assert cache.reloads == 3
        finally:
            await cache.close()

    asyncio.run(scenario())
