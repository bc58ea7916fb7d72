"""services/storage/search/pg_text.py on a real PostgreSQL: BM25 computed in the query
equals FTS5's bm25() on the same memories (one namespace, so FTS5's whole-index
statistics are the namespace's), and stays inside its namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.common.fts import any_of, quoted
from services.storage.db import open_read_write as open_sqlite
from services.storage.pg import open_read_write, translate
from services.storage.pg_migrations import apply_pg_migrations
from services.storage.search import pg_text, queries
from services.storage.sqlite_migrations import apply_migrations

AT = "2026-01-01T00:00:00.000000000Z"
CORPUS = [
    "Caroline went to the LGBTQ support group yesterday",
    "Melanie painted a sunrise over the lake last year",
    "Caroline is researching adoption agencies and counseling careers",
    "the support group was powerful and the people were supportive",
    "Melanie ran a charity race for mental health",
    "a lake a lake a lake and a very long sentence about nothing much at all today",
    "running races and painting lakes",
]
INSERT = (
    "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, type,"
    " importance, created_at, updated_at, event_time) VALUES ({}, {}, {}, {}, {}, 'fact', 0.5,"
    " {}, {}, {})"
)


def _rows(namespace: str) -> list[tuple[str, ...]]:
    return [
        (f"{namespace}-{i}", namespace, text, text.lower(), f"h{i}", AT, AT, AT)
        for i, text in enumerate(CORPUS)
    ]


@pytest.fixture
def pg(pg_dsn: str) -> Any:
    conn = open_read_write(pg_dsn)
    apply_pg_migrations(conn)
    with conn.transaction():
        for namespace in ("ns", "other"):
            for row in _rows(namespace):
                conn.execute(INSERT.format(*["%s"] * 8), row)
    return conn


def _pg_top(conn: Any, query: tuple[str, list[Any]]) -> list[tuple[str, float]]:
    rows = conn.execute(
        translate(
            f"SELECT m.id, t.score FROM ({query[0]}) t JOIN memories m ON m.rowid = t.rowid"
            " ORDER BY t.score DESC, m.id"
        ),
        query[1],
    ).fetchall()
    conn.rollback()
    return [(r[0], float(r[1])) for r in rows]


@pytest.mark.parametrize(
    "terms",
    [["caroline"], ["lake"], ["support", "group"], ["melanie", "race", "lake"], ["painted"]],
)
def test_bm25_equals_fts5s_on_the_same_memories(pg: Any, tmp_path: Path, terms: list[str]) -> None:
    sqlite = open_sqlite(tmp_path / "engram.db")
    apply_migrations(sqlite)
    for row in _rows("ns"):
        sqlite.execute(INSERT.format(*["?"] * 8), row)
    fts5 = sqlite.execute(*queries.whole_index_keyword_top(any_of(map(quoted, terms)), 10))
    by_rowid = dict(sqlite.execute("SELECT rowid, id FROM memories").fetchall())
    expected = sorted(((by_rowid[r], s) for r, s in fts5), key=lambda x: (-x[1], x[0]))
    got = _pg_top(pg, pg_text.bm25_top(terms, "ns", 10))
    assert [i for i, _ in got] == [i for i, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9)


def test_bm25_ranks_only_the_namespaces_live_memories(pg: Any) -> None:
    with pg.transaction():
        pg.execute("UPDATE memories SET is_deleted = 1 WHERE id = 'ns-1'")
    got = [i for i, _ in _pg_top(pg, pg_text.bm25_top(["melanie"], "ns", 10))]
    assert got == ["ns-4"]
    assert _pg_top(pg, pg_text.bm25_top(["nowhere"], "ns", 10)) == []
    assert _pg_top(pg, pg_text.bm25_top([], "ns", 10)) == []


def test_ts_rank_finds_the_same_memories_in_its_own_order(pg: Any) -> None:
    bm25 = {i for i, _ in _pg_top(pg, pg_text.bm25_top(["lake", "painted"], "ns", 10))}
    ts_rank = {i for i, _ in _pg_top(pg, pg_text.ts_rank_top(["lake", "painted"], "ns", 10))}
    assert bm25 == ts_rank == {"ns-1", "ns-5", "ns-6"}


@pytest.mark.parametrize("terms", [["lake"], ["melanie", "race", "lake"], ["support", "nowhere"]])
def test_the_kept_statistics_give_the_scores_the_query_counts(pg: Any, terms: list[str]) -> None:
    """Every memory live: the store's kept statistics are the collection's, so
    BM25 given them scores as BM25 counting them itself (one formula)."""
    sql, params = pg_text.kept_statistics(terms, "ns")
    size, average, frequencies = pg.execute(translate(sql), params).fetchone()
    pg.rollback()
    assert size == len(CORPUS)
    counted = _pg_top(pg, pg_text.bm25_top(terms, "ns", 10))
    kept = _pg_top(
        pg, pg_text.bm25_top(terms, "ns", 10, statistics=(size, average), frequencies=frequencies)
    )
    assert [i for i, _ in kept] == [i for i, _ in counted]
    assert [s for _, s in kept] == pytest.approx([s for _, s in counted], rel=1e-12)
