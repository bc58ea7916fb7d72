"""The vector index on a real PostgreSQL: services/storage/store/pg_vectors.py (the
repository's vector functions, same meaning) and services/storage/search/pg_vectors.py
(the vector channel's HNSW scan: the namespace's top k, the filter inside the
scan, nothing from another namespace, no deleted, expired or superseded memory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from services.common.memory_filter import MemoryFilterSpec
from services.storage.pg import SqliteApi, open_read_only, open_read_write, translate
from services.storage.pg_migrations import apply_pg_migrations
from services.storage.search import pg_vectors as channel
from services.storage.store import pg_vectors as store
from services.storage.store import repository

AT = "2026-01-01T00:00:00.000000000Z"
PAST = "2020-01-01T00:00:00.000000000Z"
FUTURE = "2999-01-01T00:00:00.000000000Z"
MODEL = "test-model"
NOW = MemoryFilterSpec()


@pytest.fixture
def conn(pg_dsn: str, needs_pgvector: None) -> Iterator[Any]:
    """The store's connection to a migrated database (SqliteApi: the store's own)."""
    connection = open_read_write(pg_dsn)
    apply_pg_migrations(connection)
    api = SqliteApi(connection)
    yield api
    api.close()


@pytest.fixture
def reader(pg_dsn: str, conn: Any) -> Iterator[Any]:
    """The search service's read-only connection to the same database."""
    connection = open_read_only(pg_dsn)
    yield connection
    connection.close()


def _unit(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    vectors = rng.standard_normal((n, dims)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _memory(
    conn: Any,
    memory_id: str,
    namespace: str = "ns",
    content_hash: str | None = None,
    **columns: Any,
) -> int:
    values = {
        "id": memory_id,
        "namespace": namespace,
        "content": f"content {memory_id}",
        "normalized_content": f"content {memory_id}",
        "content_hash": content_hash or f"h-{memory_id}",
        "type": "fact",
        "importance": 0.5,
        "created_at": AT,
        "updated_at": AT,
        "event_time": AT,
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(["?"] * len(values))
    row = conn.execute(
        f"INSERT INTO memories ({names}) VALUES ({marks}) RETURNING rowid", list(values.values())
    ).fetchone()
    return int(row[0])


def _embed(conn: Any, namespace: str, content_hash: str, vector: np.ndarray) -> None:
    repository.upsert_embedding(
        conn, namespace, content_hash, MODEL, vector.astype(np.float32).tobytes(), len(vector), AT
    )


def _indexed(conn: Any) -> dict[int, tuple[str, list[float]]]:
    rows = conn.execute("SELECT memory_rowid, namespace, embedding::text FROM memory_vectors")
    return {r[0]: (r[1], json.loads(r[2])) for r in rows}


def _hnsw_oid(conn: Any) -> Any:
    return conn.execute("SELECT to_regclass('memory_vectors_hnsw')::oid").fetchone()[0]


# ---- the store's vector functions ----------------------------------------------------------


def test_setting_the_model_sizes_the_column_and_builds_the_index_once(conn: Any) -> None:
    assert repository.index_model(conn) is None
    with conn.transaction():
        store.set_index_model(conn, MODEL, None, AT)
    assert repository.index_model(conn) == (MODEL, None)
    assert _hnsw_oid(conn) is None  # unsized: nothing to index yet
    with conn.transaction():
        store.set_index_model(conn, MODEL, 4, AT)
    built = _hnsw_oid(conn)
    assert built is not None and repository.index_model(conn) == (MODEL, 4)
    with conn.transaction():
        store.set_index_model(conn, MODEL, 4, AT)  # same size: the index stays
    assert _hnsw_oid(conn) == built


def test_indexing_takes_live_memories_with_their_own_namespaces_vector_of_the_model(
    conn: Any,
) -> None:
    vector = np.array([0.6, 0.8, 0.0, 0.0], np.float32)
    with conn.transaction():
        store.set_index_model(conn, MODEL, 4, AT)
        embedded = _memory(conn, "a", content_hash="same")
        _memory(conn, "b")  # no vector
        _memory(conn, "c", content_hash="same", is_deleted=1)  # a tombstone
        _memory(conn, "d", namespace="other", content_hash="same")  # ns's vector is not its
        _embed(conn, "ns", "same", vector)
        repository.upsert_embedding(conn, "ns", "h-b", "another-model", vector.tobytes(), 4, AT)
        written = store.index_memories(conn, ["a", "b", "c", "d"])
    assert written == 1
    assert _indexed(conn) == {embedded: ("ns", pytest.approx([0.6, 0.8, 0.0, 0.0], abs=1e-3))}
    models = dict(conn.execute("SELECT id, embedding_model FROM memories").fetchall())
    assert models == {"a": MODEL, "b": None, "c": None, "d": None}


def test_a_new_vector_for_an_indexed_memory_replaces_its_index_row(conn: Any) -> None:
    with conn.transaction():
        store.set_index_model(conn, MODEL, 2, AT)
        rowid = _memory(conn, "a")
        _embed(conn, "ns", "h-a", np.array([1.0, 0.0]))
        store.index_memories(conn, ["a"])
        _embed(conn, "ns", "h-a", np.array([0.0, 1.0]))
        assert store.index_memories(conn, ["a"]) == 1
    assert _indexed(conn) == {rowid: ("ns", [0.0, 1.0])}
    assert conn.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 1


def test_missing_vectors_are_filled_and_a_model_change_refills_the_whole_index(
    conn: Any,
) -> None:
    with conn.transaction():
        store.set_index_model(conn, MODEL, 2, AT)
        rowids = [_memory(conn, m) for m in ("a", "b", "c")]
        for m in ("a", "b", "c"):
            _embed(conn, "ns", f"h-{m}", np.array([1.0, 0.0]))
        store.index_memories(conn, ["a"])
        assert store.index_missing_vectors(conn) == 2
        assert store.index_missing_vectors(conn) == 0
    assert set(_indexed(conn)) == set(rowids)
    with conn.transaction():  # as adopt_index_model does on a model change
        for m in ("a", "b"):
            repository.upsert_embedding(
                conn, "ns", f"h-{m}", "new", np.ones(3, np.float32).tobytes(), 3, AT
            )
        repository.clear_vector_index(conn)
        store.set_index_model(conn, "new", repository.embedding_dimensions(conn, "new"), AT)
        assert store.index_all_embedded(conn) == 2
    assert repository.index_model(conn) == ("new", 3)
    assert {rowid: len(v) for rowid, (_, v) in _indexed(conn).items()} == {
        rowids[0]: 3,
        rowids[1]: 3,
    }
    assert _hnsw_oid(conn) is not None
    assert repository.embedding_dimensions(conn, "absent") is None


def test_unused_vectors_go_and_a_tombstones_vector_stays_for_recovery(conn: Any) -> None:
    with conn.transaction():
        _memory(conn, "live", content_hash="live")
        _memory(conn, "gone", content_hash="tomb", is_deleted=1, deleted_at=AT)
        _memory(conn, "old", content_hash="closed", invalidated_at=AT, valid_until=AT)
        _memory(conn, "elsewhere", namespace="other", content_hash="orphan")
        for content_hash in ("live", "tomb", "closed", "orphan"):
            _embed(conn, "ns", content_hash, np.array([1.0, 0.0]))
        removed = repository.delete_unused_embeddings(
            conn, "ns", ["live", "tomb", "closed", "orphan", "orphan"]
        )
    assert removed == 1  # the namespace holds no memory of "orphan": the other's is no reason
    left = {r[0] for r in conn.execute("SELECT content_hash FROM embeddings")}
    assert left == {"live", "tomb", "closed"}


# ---- the vector channel ----------------------------------------------------------------------


def _load(conn: Any, vectors: np.ndarray, namespaces: list[str], **columns: list[Any]) -> list[int]:
    """Memories with these vectors, indexed through the store's functions."""
    rowids = []
    with conn.transaction():
        store.set_index_model(conn, MODEL, vectors.shape[1], AT)
        for i, (vector, namespace) in enumerate(zip(vectors, namespaces, strict=True)):
            extra = {name: values[i] for name, values in columns.items()}
            rowids.append(_memory(conn, f"m{i}", namespace, **extra))
            _embed(conn, namespace, f"h-m{i}", vector)
        store.index_all_embedded(conn)
    conn.execute("ANALYZE memory_vectors")
    conn.execute("ANALYZE memories")
    conn.commit()
    return rowids


def _exact(
    vectors: np.ndarray, rowids: list[int], query: np.ndarray, keep: list[bool], k: int
) -> list[int]:
    """The true top k by float32 cosine among the kept rows."""
    scores = vectors @ query
    ranked = sorted((i for i in range(len(rowids)) if keep[i]), key=lambda i: -scores[i])
    return [rowids[i] for i in ranked[:k]]


def _top(reader: Any, query: np.ndarray, namespace: str, spec: MemoryFilterSpec, k: int) -> list:
    rows = channel.nearest(reader, query.astype(np.float32).tobytes(), namespace, spec, k)
    reader.rollback()
    return rows


def test_the_hnsw_top_k_is_the_exact_top_k_of_the_namespace(conn: Any, reader: Any) -> None:
    rng = np.random.default_rng(1)
    vectors = _unit(rng, 3000, 16)
    namespaces = [f"ns{i % 3}" for i in range(3000)]
    rowids = _load(conn, vectors, namespaces)
    queries = _unit(rng, 20, 16)
    found = 0
    for query in queries:
        rows = _top(reader, query, "ns1", NOW, 10)
        got = [r[0] for r in rows]
        assert [r[1] for r in rows] == sorted(r[1] for r in rows)
        expected = _exact(vectors, rowids, query, [n == "ns1" for n in namespaces], 10)
        found += len(set(got) & set(expected))
        exact = [
            r[0]
            for r in _run(reader, channel.exact_vector_candidates(query.tobytes(), "ns1", NOW, 10))
        ]
        reader.rollback()
        assert len(set(exact) & set(expected)) >= 9  # halfvec rounding may swap a near-tie
    assert found / (10 * len(queries)) >= 0.95


def _run(reader: Any, query: tuple[str, list[Any]]) -> list[Any]:
    """A channel query (sqlite3-style, as the read pool takes it) on a bare reader."""
    return reader.execute(translate(query[0]), query[1]).fetchall()  # type: ignore[no-any-return]


def _plan(reader: Any, query: np.ndarray, spec: MemoryFilterSpec) -> str:
    _run(reader, channel.scan_settings())
    sql, params = channel.vector_candidates(query.tobytes(), "ns1", spec, 10)
    plan = "\n".join(r[0] for r in _run(reader, ("EXPLAIN " + sql, params)))
    reader.rollback()
    return plan


def test_the_scan_runs_on_the_hnsw_index_with_the_filter_inside(conn: Any, reader: Any) -> None:
    """A filter most rows pass is checked inside the HNSW scan; one the planner
    expects almost no row to pass is answered by sorting those rows (exact, and
    cheaper than walking the graph for them)."""
    rng = np.random.default_rng(2)
    vectors = _unit(rng, 3000, 16)
    _load(conn, vectors, [f"ns{i % 3}" for i in range(3000)], who=["bob"] * 3000)
    common = MemoryFilterSpec(types=("fact",), who="bob", importance_min=0.1)
    plan = _plan(reader, vectors[0], common)
    assert "Index Scan using memory_vectors_hnsw" in plan and "who = 'bob'" in plan, plan
    rare = _plan(reader, vectors[0], MemoryFilterSpec(who="ann"))
    assert "memory_vectors_hnsw" not in rare, rare


def test_nothing_from_another_namespace_even_at_distance_zero(conn: Any, reader: Any) -> None:
    rng = np.random.default_rng(3)
    vectors = _unit(rng, 2000, 16)
    query = vectors[0]
    vectors[1::2] = query  # every memory of "theirs" sits exactly on the query
    namespaces = ["ours" if i % 2 == 0 else "theirs" for i in range(2000)]
    rowids = _load(conn, vectors, namespaces)
    ours = {r for r, n in zip(rowids, namespaces, strict=True) if n == "ours"}
    rows = _top(reader, query, "ours", NOW, 50)
    assert len(rows) == 50 and {r[0] for r in rows} <= ours
    assert rows[0][0] == rowids[0]
    assert _top(reader, query, "nobody", NOW, 10) == []


def test_the_filter_is_applied_before_the_cut_not_after(conn: Any, reader: Any) -> None:
    """One memory in 40 carries the tag: a top 10 cut before the filter would
    hold none or few of them; the iterative scan returns the tagged top 10."""
    rng = np.random.default_rng(4)
    n = 4000
    vectors = _unit(rng, n, 16)
    tags = [json.dumps(["rare", "x"]) if i % 40 == 0 else "[]" for i in range(n)]
    whos = ["ann" if i % 80 == 0 else "bob" for i in range(n)]
    rowids = _load(conn, vectors, ["ns"] * n, tags=tags, who=whos)
    for query in _unit(rng, 5, 16):
        for spec, keep in (
            (MemoryFilterSpec(tags=("rare",)), [t != "[]" for t in tags]),
            (MemoryFilterSpec(tags=("rare",), who="ann"), [w == "ann" for w in whos]),
        ):
            got = [r[0] for r in _top(reader, query, "ns", spec, 10)]
            expected = _exact(vectors, rowids, query, keep, 10)
            assert len(got) == 10 and set(got) <= {
                r for r, k in zip(rowids, keep, strict=True) if k
            }
            assert len(set(got) & set(expected)) >= 9


def test_deleted_expired_and_superseded_memories_never_come_back(conn: Any, reader: Any) -> None:
    rng = np.random.default_rng(5)
    n = 1000
    vectors = _unit(rng, n, 8)
    query = vectors[0]
    vectors[:4] = query  # four memories on the query, each gone in its own way but one
    expire = [PAST, FUTURE, None, None] + [None] * (n - 4)
    valid_until = [None, None, PAST, None] + [None] * (n - 4)
    rowids = _load(conn, vectors, ["ns"] * n, expire_at=expire, valid_until=valid_until)
    with conn.transaction():
        conn.execute("UPDATE memories SET is_deleted = 1, deleted_at = ? WHERE id = 'm3'", (AT,))
    top = [r[0] for r in _top(reader, query, "ns", NOW, 5)]
    assert rowids[1] == top[0]  # expires in the future: still here
    assert not {rowids[0], rowids[2], rowids[3]} & set(top)
    # as of a time before it was superseded, the superseded memory was valid
    before = MemoryFilterSpec(as_of="2019-06-01T00:00:00.000000000Z")
    conn.execute("UPDATE memories SET valid_from = ?", ("2018-01-01T00:00:00.000000000Z",))
    conn.execute("UPDATE memories SET created_at = valid_from")
    conn.commit()
    assert rowids[2] in [r[0] for r in _top(reader, query, "ns", before, 5)]


def test_a_namespace_too_rare_for_the_scan_still_gets_its_whole_top_k(
    conn: Any, reader: Any
) -> None:
    """With the scan capped (hnsw.max_scan_tuples) before it meets 10 rows of a
    small namespace, the channel falls back to the exact query."""
    rng = np.random.default_rng(6)
    n = 3000
    vectors = _unit(rng, n, 16)
    namespaces = ["small" if i % 250 == 0 else "big" for i in range(n)]
    rowids = _load(conn, vectors, namespaces)
    query = vectors[1]
    reader.execute("SELECT set_config('hnsw.max_scan_tuples', '100', false)")
    got = [r[0] for r in _top(reader, query, "small", NOW, 10)]
    assert got == _exact(vectors, rowids, query, [s == "small" for s in namespaces], 10)


def test_every_filter_field_runs_on_postgres(conn: Any, reader: Any) -> None:
    """memory_filter's SQL, rewritten where SQLite's dialect differs, selects
    what it selects on SQLite."""
    rng = np.random.default_rng(7)
    vectors = _unit(rng, 6, 4)
    rowids = _load(
        conn,
        vectors,
        ["ns"] * 6,
        tags=['["a", "b"]', '["a"]', "[]", '["a", "b"]', '["a", "b"]', '["a", "b"]'],
        categories=['["c"]'] * 5 + ["[]"],
        type=["fact", "fact", "fact", "event", "fact", "fact"],
        pinned=[1, 1, 1, 1, 0, 1],
        session_id=["s"] * 6,
        importance=[0.9, 0.9, 0.9, 0.9, 0.9, 0.1],
    )
    spec = MemoryFilterSpec(
        types=("fact",),
        tags=("a", "b"),
        categories=("c",),
        who="",
        pinned=True,
        source_type="",
        since="2025-01-01T00:00:00.000000000Z",
        until="2027-01-01T00:00:00.000000000Z",
        importance_min=0.5,
        session_id="s",
    )
    assert [r[0] for r in _top(reader, vectors[0], "ns", spec, 10)] == [rowids[0]]
