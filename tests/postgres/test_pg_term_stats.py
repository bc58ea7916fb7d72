"""The keyword channel's kept statistics on Postgres (pg_migrations.py
`keyword_term_statistics`): after every kind of write the tables equal a
recount from memories (the namespace's indexed memories, their tokens, each
lexeme's documents), whether written by SQL directly or through the store's
API; the migration backfills what was written before it; and
pg_text.kept_statistics reads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from google.protobuf import duration_pb2
from pg_rows import insert, memory

import backend_db
from admin_helpers import AdminStore, admin_store
from engram.store.internal.v1 import admin_pb2 as pb
from engram.store.v1 import store_pb2 as S
from services.storage import pg
from services.storage.pg_migrations import PG_MIGRATIONS, apply_pg_migrations
from services.storage.search import pg_text

RECOUNT_TOTALS = (
    "SELECT namespace, count(*), sum(content_tokens) FROM memories"
    " WHERE content_tsv IS NOT NULL GROUP BY namespace ORDER BY namespace"
)
RECOUNT_TERMS = (
    "SELECT m.namespace, u.lexeme, count(*) FROM memories m, unnest(m.content_tsv) u"
    " WHERE m.content_tsv IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2"
)
KEPT_TOTALS = "SELECT namespace, documents, tokens FROM namespace_text_totals ORDER BY namespace"
KEPT_TERMS = "SELECT namespace, lexeme, documents FROM namespace_terms ORDER BY 1, 2"


@pytest.fixture(scope="module")
def storage_backend() -> str:
    """The API test's store on Postgres (tests/conftest.py's stacks)."""
    return "postgres"


def _as_tuples(rows: Any) -> list[tuple[Any, ...]]:
    return [tuple(int(v) if isinstance(v, int) else v for v in r) for r in rows]


def _assert_exact(read: Callable[[str], Any]) -> None:
    assert _as_tuples(read(KEPT_TOTALS)) == _as_tuples(read(RECOUNT_TOTALS))
    assert _as_tuples(read(KEPT_TERMS)) == _as_tuples(read(RECOUNT_TERMS))


def test_every_sql_write_keeps_the_tables_equal_to_a_recount(pg_conn: Any) -> None:
    def read(sql: str) -> Any:
        return pg_conn.execute(sql).fetchall()

    insert(  # one multi-row INSERT, as a Remember group or an import batch
        pg_conn,
        memory("a", "the frozen lake at dawn"),
        memory("b", "a frozen lake, a frozen river", content_hash="hb"),
        memory("c", "zebra crossing", namespace="other"),
    )
    _assert_exact(read)
    assert read(KEPT_TOTALS)[0][1:] == (2, 11)  # ns: two memories, 5 + 6 tokens
    steps = [
        "UPDATE memories SET content = 'the thawed lake' WHERE id = 'a'",  # new text
        "UPDATE memories SET namespace = 'other' WHERE id = 'b'",  # moved
        "UPDATE memories SET access_count = access_count + 1",  # no text changes
        "UPDATE memories SET is_deleted = 1 WHERE id = 'c'",  # soft delete
        "UPDATE memories SET is_deleted = 0 WHERE id = 'c'",  # restored
        "UPDATE memories SET is_deleted = 1, content = 'zebra herd' WHERE id = 'c'",
        "DELETE FROM memories WHERE id = 'c'",  # a tombstone purged: no change
        "DELETE FROM memories WHERE id = 'b'",  # a live memory purged
    ]
    for step in steps:
        pg_conn.execute(step)
        _assert_exact(read)
    assert [r[0] for r in read(KEPT_TOTALS)] == ["ns"]  # "other" holds nothing now
    assert ("other", "frozen") not in {r[:2] for r in read(KEPT_TERMS)}  # gone at 0
    pg_conn.execute("DELETE FROM memories")
    assert read(KEPT_TOTALS) == [] and read(KEPT_TERMS) == []


def test_a_failed_write_rolls_its_counts_back_with_it(pg_conn: Any) -> None:
    insert(pg_conn, memory("a", "frozen lake"))
    with pytest.raises(psycopg.errors.UniqueViolation), pg_conn.transaction():
        insert(pg_conn, memory("b", "thawed lake"), memory("a", "duplicate id"))
    assert pg_conn.execute(KEPT_TOTALS).fetchall() == [("ns", 1, 2)]
    _assert_exact(lambda sql: pg_conn.execute(sql).fetchall())


def test_the_migration_counts_the_memories_written_before_it(pg_dsn: str) -> None:
    raw = pg.open_read_write(pg_dsn)
    before = PG_MIGRATIONS.index(
        next(m for m in PG_MIGRATIONS if m[0] == "keyword_term_statistics")
    )
    apply_pg_migrations(raw, PG_MIGRATIONS[:before])
    with pg.SqliteApi(raw) as conn:
        insert(
            conn,
            memory("a", "frozen lake"),
            memory("b", "frozen river", namespace="other"),
            memory("c", "deleted lake", content_hash="hc"),
        )
        conn.execute("UPDATE memories SET is_deleted = 1 WHERE id = 'c'")
        apply_pg_migrations(raw)
        assert conn.execute(KEPT_TOTALS).fetchall() == [("ns", 1, 2), ("other", 1, 2)]
        _assert_exact(lambda sql: conn.execute(sql).fetchall())


def test_kept_statistics_read_the_tables(pg_conn: Any) -> None:
    insert(
        pg_conn,
        memory("a", "frozen lakes at dawn"),
        memory("b", "a frozen river", content_hash="hb"),
        memory("c", "it's frozen", content_hash="hc"),
        memory("d", "frozen", namespace="other"),
    )
    # "lakes" is stemmed to the lexeme "lake"; "nowhere" is in no memory; "it's"
    # is a phrase of two lexemes (counted); an empty term has none
    sql, params = pg_text.kept_statistics(["lakes", "frozen", "nowhere", "it's", ""], "ns")
    size, average, frequencies = pg_conn.execute(sql, params).fetchone()
    assert (size, average, list(frequencies)) == (3, pytest.approx(10 / 3), [1, 3, 0, 1, 0])
    sql, params = pg_text.kept_statistics(["frozen"], "empty")
    assert pg_conn.execute(sql, params).fetchone()[:2] == (0, 0)


# ---- through the store's API --------------------------------------------------------------


@pytest.fixture
def st(start_store_server: Any, make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(start_store_server, make_config)


def test_the_store_keeps_them_exact_through_every_write_of_its_api(st: AdminStore) -> None:
    def read(sql: str) -> Any:
        return backend_db.rows(st.db, sql)

    first = st.remember("the frozen lake at dawn")
    st.remember("a zebra crossing", namespace="other")
    st.remember("a memory that stays")
    _assert_exact(read)
    imported = st.store.ImportMemories(
        iter(
            [
                S.ImportMemoriesRequest(
                    items=[
                        S.ImportItem(content=f"imported note {i} about lakes") for i in range(30)
                    ]
                )
            ]
        )
    )
    ids = [r.memory_id for r in imported.results]
    _assert_exact(read)
    st.store.ModifyMemories(
        S.ModifyMemoriesRequest(
            patches=[S.MemoryPatch(id=first, content="the thawed river at noon")], reason="fix"
        )
    )
    _assert_exact(read)
    st.delete(first)
    _assert_exact(read)
    st.store.RecoverMemory(S.RecoverMemoryRequest(id=first, reason="undo"))
    _assert_exact(read)
    preview = st.store.ForgetMemories(S.ForgetMemoriesRequest(query="imported"))
    st.store.ForgetMemories(  # a namespace's memories forgotten in one request
        S.ForgetMemoriesRequest(
            query="imported",
            mode=S.FORGET_MODE_EXECUTE,
            reason="r",
            confirm_token=preview.confirm_token,
        )
    )
    _assert_exact(read)
    st.store.ForgetMemories(
        S.ForgetMemoriesRequest(ids=[first], mode=S.FORGET_MODE_EXECUTE, reason="r", purge=True)
    )
    _assert_exact(read)
    for memory_id in ids[:5]:  # tombstones past retention: the sweep purges them
        st.age("memories", "deleted_at", 31, "id = ?", memory_id)
    expiring = st.remember("a short note", ttl=duration_pb2.Duration(seconds=3600))
    st.execute(
        "UPDATE memories SET expire_at = '2000-01-01T00:00:00.000000000Z' WHERE id = ?", expiring
    )
    _assert_exact(read)
    steps = {s.step: s for s in st.admin.SweepRetention(pb.SweepRetentionRequest()).steps}
    assert steps["tombstones"].removed >= 5
    _assert_exact(read)
    assert {r[0] for r in read(KEPT_TOTALS)} == {"default", "other"}
