"""The search service's query builders on both backends from one home: every
test runs once on a migrated SQLite file and once on a migrated PostgreSQL
database, writes the same rows through the store's repository and the same
INSERTs, and reads them back through services/search's builders with the
backend's dialect (the read pool's), with the same assertions. Postgres's
keyword channel (pg_text) is checked against the rows it must rank."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pg_rows import memory

from services.common.memory_filter import MemoryFilterSpec
from services.storage import pg
from services.storage.dialect import dialect_of
from services.storage.search import context_queries, graph_queries, pg_text, queries
from services.storage.store import repository as repo

T0 = "2026-01-01T00:00:00.000000000Z"
T1 = "2026-01-02T00:00:00.000000000Z"
T2 = "2026-01-03T00:00:00.000000000Z"
PAST = "2000-01-01T00:00:00.000000000Z"
FUTURE = "2999-01-01T00:00:00.000000000Z"
E_END = "2026-01-01T06:00:00.000000000Z"  # when memory "e" stopped being valid
NOW = MemoryFilterSpec()


def _insert(conn: Any, *rows: repo.MemoryRow) -> dict[str, int]:
    """The rows written in one transaction, and every memory's rowid by id."""
    conn.execute("BEGIN IMMEDIATE")
    repo.insert_memory_rows(conn, list(rows))
    conn.execute("COMMIT")
    return {r[0]: r[1] for r in conn.execute("SELECT id, rowid FROM memories").fetchall()}


def _run(conn: Any, query: tuple[str, list[Any]]) -> list[Any]:
    return list(conn.execute(*query).fetchall())


def _ids(rowids: dict[str, int], found: Any) -> list[str]:
    by_rowid = {v: k for k, v in rowids.items()}
    return [by_rowid[r] for r in found]


def _corpus(conn: Any) -> dict[str, int]:
    return _insert(
        conn,
        memory("a", "Caroline went to the support group", tags='["x", "y"]', importance=0.9),
        memory("b", "Melanie painted a sunrise over the lake", created_at=T1, event_time=T1),
        memory("c", "deleted memory about the lake"),
        memory("d", "expired memory about the lake", expire_at=PAST),
        memory("e", "superseded memory about the lake", valid_until=E_END),
        memory("f", "a lake in another namespace", namespace="other"),
        memory("g", "pinned rule: the lake is cold", pinned=1, importance=0.8, tags='["y"]'),
        memory(
            "h",
            "session turn about yesterday",
            session_id="s1",
            expire_at=FUTURE,
            created_at=T2,
            event_time=T2,
        ),
    )


def _delete(conn: Any, memory_id: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    repo.update_memory(conn, memory_id, {"is_deleted": 1, "deleted_at": T2})
    conn.execute("COMMIT")


def test_rows_by_rowid_are_the_namespaces_live_memories_only(conn: Any) -> None:
    rowids = _corpus(conn)
    _delete(conn, "c")
    dialect = dialect_of(conn)
    every = list(rowids.values())
    live = ["a", "b", "g", "h"]
    memories = _run(conn, queries.memories_by_rowid("ns", every, dialect=dialect))
    assert sorted(r["id"] for r in memories) == live
    record = next(r for r in memories if r["id"] == "a")
    assert (record["rowid"], json.loads(record["tags"]), record["pinned"]) == (
        rowids["a"],
        ["x", "y"],
        0,
    )
    pool = _run(conn, queries.pool_rows("ns", every, "model", dialect=dialect))
    assert sorted(_ids(rowids, [r[0] for r in pool])) == live
    assert {r[0]: (r[1], r[2], r[3]) for r in pool}[rowids["b"]] == (T1, None, "user")
    importance = dict(_run(conn, queries.importance_by_rowid("ns", every, dialect=dialect)))
    assert importance[rowids["a"]] == pytest.approx(0.9)
    assert rowids["f"] not in importance
    contents = dict(_run(conn, queries.contents("ns", [rowids["b"], rowids["f"]], dialect=dialect)))
    assert contents == {rowids["b"]: "Melanie painted a sunrise over the lake"}
    # as of a past instant, the superseded memory was valid (and recorded by then)
    then = MemoryFilterSpec(as_of="2026-01-01T12:00:00.000000000Z")
    before = _run(conn, queries.memories_by_rowid("ns", every, then, dialect=dialect))
    assert sorted(r["id"] for r in before) == ["a", "g"]


def test_counts_windows_and_neighbours_agree(conn: Any) -> None:
    rowids = _corpus(conn)
    dialect = dialect_of(conn)
    assert _run(conn, queries.live_count("ns", NOW, dialect=dialect))[0][0] == 5  # a b c g h
    assert _run(conn, queries.live_count(None, NOW))[0][0] == 6
    tagged = MemoryFilterSpec(tags=("y",))
    assert _run(conn, queries.live_count("ns", tagged, dialect=dialect))[0][0] == 2
    day_two = [(T1, T2)]
    found = _run(conn, queries.in_time_windows("ns", day_two, NOW, 10, dialect=dialect))
    assert _ids(rowids, [r[0] for r in found]) == ["b"]
    widened = MemoryFilterSpec(valid_during=((PAST, T2),))
    closed = _run(conn, queries.closed_valid_in_windows("ns", widened, 10, dialect=dialect))
    assert _ids(rowids, [r[0] for r in closed]) == ["e"]
    a, b, g = rowids["a"], rowids["b"], rowids["g"]
    # nothing between a and b; between b and g, c is live (d expired, e superseded)
    assert [tuple(r) for r in _run(conn, queries.adjacent_pairs("ns", [(a, b), (b, g)]))] == [
        (a, b)
    ]


def test_decay_inputs_read_the_confidence_at_the_instant(conn: Any) -> None:
    rowids = _insert(
        conn,
        memory("fresh", "fresh"),
        memory("pinned", "pinned", pinned=1, created_at=PAST),
        memory("old", "old", created_at=PAST, decay_rate=0.5),
    )
    rows = _run(
        conn,
        queries.decay_inputs("ns", list(rowids.values()), 0.1, T0, dialect=dialect_of(conn)),
    )
    confidence = {r["rowid"]: float(r["current_confidence"]) for r in rows}
    assert confidence[rowids["fresh"]] == pytest.approx(1.0)
    assert confidence[rowids["pinned"]] == pytest.approx(1.0)
    assert confidence[rowids["old"]] < 1e-6


def _graph(conn: Any) -> dict[str, int]:
    rowids = _corpus(conn)
    conn.execute("BEGIN IMMEDIATE")
    for entity_id, name, mentions in [
        ("e-car", "Caroline", 5),
        ("e-mel", "Melanie", 3),
        ("e-pct", "100%_sure", 1),
        ("e-tokyo", "東京", 2),
    ]:
        conn.execute(
            "INSERT INTO entities (id, namespace, name, canonical_name, entity_type, mentions,"
            " created_at, updated_at) VALUES (?, 'ns', ?, ?, 'person', ?, ?, ?)",
            [entity_id, name, name.lower(), mentions, T0, T0],
        )
    conn.execute(
        "INSERT INTO entity_aliases (namespace, canonical_alias, entity_id, alias, created_at)"
        " VALUES ('ns', 'mel', 'e-mel', 'Mel', ?)",
        [T0],
    )
    conn.execute(
        "INSERT INTO relations (id, namespace, source_entity_id, target_entity_id,"
        " relation_type, strength, mentions, confidence, created_at, updated_at)"
        " VALUES ('r1', 'ns', 'e-car', 'e-mel', 'friend_of', 0.9, 2, 0.9, ?, ?)",
        [T0, T0],
    )
    for memory_id, entity_id in [("a", "e-car"), ("b", "e-mel"), ("g", "e-mel"), ("c", "e-mel")]:
        conn.execute(
            "INSERT INTO memory_entity_mentions (memory_id, entity_id, namespace, mention_text,"
            " confidence, created_at) VALUES (?, ?, 'ns', 'x', 0.9, ?)",
            [memory_id, entity_id, T0],
        )
    for link_id, source, target, link_type, until in [
        ("l1", "a", "b", "causal", None),
        ("l2", "b", "g", "causal", None),
        ("l3", "a", "g", "temporal", PAST),
    ]:
        conn.execute(
            "INSERT INTO memory_links (id, namespace, from_memory_id, to_memory_id, link_type,"
            " created_at, valid_until) VALUES (?, 'ns', ?, ?, ?, ?, ?)",
            [link_id, source, target, link_type, T0, until],
        )
    conn.execute("COMMIT")
    _delete(conn, "c")
    return rowids


def test_the_graph_queries_agree(conn: Any) -> None:
    rowids = _graph(conn)
    dialect = dialect_of(conn)
    matched = _run(
        conn, graph_queries.matching_entities("ns", ["carol", "mel"], [], 10, dialect=dialect)
    )
    assert [r[0] for r in matched] == ["e-car", "e-mel"]
    # LIKE's wildcards in a token are literal; a name inside an unspaced token matches
    literal = graph_queries.matching_entities("ns", ["0%_"], [], 10, dialect=dialect)
    assert [r[0] for r in _run(conn, literal)] == ["e-pct"]
    inside = graph_queries.matching_entities(
        "ns", ["東京に行きたい"], ["東京に行きたい"], 10, dialect=dialect
    )
    assert [r[0] for r in _run(conn, inside)] == ["e-tokyo"]
    neighbours = _run(conn, graph_queries.neighbour_entities("ns", ["e-car"], 10))
    assert [r[0] for r in neighbours] == ["e-mel"]
    mentioning = graph_queries.mentioning_memories("ns", ["e-mel"], NOW, 10, dialect=dialect)
    assert sorted(_ids(rowids, [r[0] for r in _run(conn, mentioning)])) == ["b", "g"]
    tagged = graph_queries.mentioning_memories(
        "ns", ["e-mel"], MemoryFilterSpec(tags=("y",)), 10, dialect=dialect
    )
    assert _ids(rowids, [r[0] for r in _run(conn, tagged)]) == ["g"]
    linked = graph_queries.linked_memories(
        "ns", [rowids["b"]], ["causal"], NOW, T0, dialect=dialect
    )
    reached = sorted(_ids(rowids, [r[0] for r in _run(conn, linked)]))
    assert reached == ["a", "g"]
    ended = graph_queries.linked_memories(
        "ns", [rowids["a"]], ["temporal"], NOW, T0, dialect=dialect
    )
    assert _run(conn, ended) == []  # the temporal link's validity ended


def test_the_context_queries_agree(conn: Any) -> None:
    _graph(conn)
    pinned = _run(conn, context_queries.pinned_memories("ns", 10))
    assert [r["id"] for r in pinned] == ["g"]
    session = _run(conn, context_queries.session_memories("ns", "s1", 10, None))
    assert [r["id"] for r in session] == ["h"]
    assert bool(_run(conn, context_queries.has_entities("ns"))[0][0]) is True
    assert bool(_run(conn, context_queries.has_entities("other"))[0][0]) is False
    mentioned = _run(conn, context_queries.mentioned_entities("ns", ["a", "b", "g"], 10))
    assert [(r[0], r[3]) for r in mentioned] == [("e-mel", 2), ("e-car", 1)]
    by_id = _run(conn, context_queries.entities_by_id("ns", ["e-car", "nope"]))
    assert [tuple(r) for r in by_id] == [("e-car", "Caroline", "person")]
    relations = _run(conn, context_queries.entity_relations("ns", ["e-car", "e-mel"], 5))
    assert [tuple(r) for r in relations] == [
        ("e-car", "friend_of", "Melanie", 1),
        ("e-mel", "friend_of", "Caroline", 0),
    ]


# ---- Postgres's keyword channel ---------------------------------------------------


def test_bm25_ranks_the_live_filtered_collection_with_its_statistics(pg_conn: Any) -> None:
    rowids = _corpus(pg_conn)
    _delete(pg_conn, "c")
    rows = _run(pg_conn, pg_text.bm25_top(["lake", "cold", "nowhere"], "ns", 10))
    # c deleted, d expired, e superseded, f elsewhere: b and g, g holding both terms
    assert _ids(rowids, [r[0] for r in rows]) == ["g", "b"]
    assert [list(r[2]) for r in rows] == [[1, 2], [1]]
    # the collection: a, b, g, h live in ns; "lake" in two, "cold" in one, "nowhere" in none
    assert {(r[3], tuple(r[4])) for r in rows} == {(4, (2, 1, 0))}
    tagged = _run(pg_conn, pg_text.bm25_top(["lake"], "ns", 10, MemoryFilterSpec(tags=("y",))))
    assert _ids(rowids, [r[0] for r in tagged]) == ["g"]
    assert (tagged[0][3], list(tagged[0][4])) == (2, [1])  # a and g carry the tag
    then = MemoryFilterSpec(as_of="2026-01-01T12:00:00.000000000Z")
    assert _ids(
        rowids, [r[0] for r in _run(pg_conn, pg_text.bm25_top(["lake"], "ns", 10, then))]
    ) == ["g"]
    assert _run(pg_conn, pg_text.bm25_top([], "ns", 10)) == []
    assert _run(pg_conn, pg_text.bm25_top(["nowhere"], "ns", 10)) == []


def test_a_term_is_matched_as_fts5_matches_a_quoted_term(pg_conn: Any) -> None:
    rowids = _insert(
        pg_conn,
        memory("run", "she was running fast"),
        memory("ran", "a runner ran"),
    )
    # stemmed as content_tsv is: "runs" finds "running"
    rows = _run(pg_conn, pg_text.bm25_top(["runs"], "ns", 10))
    assert _ids(rowids, [r[0] for r in rows]) == ["run"]


def test_a_failed_isolated_read_leaves_the_snapshot_usable(pg_conn: Any, pg_dsn: str) -> None:
    """Postgres aborts a transaction on a failed statement: the graph boost's
    reads (fetch_all_isolated) fail alone, and the Recall's other reads in the
    same snapshot still run and still see the snapshot's data."""
    _corpus(pg_conn)

    async def run() -> tuple[int, int, int]:
        reads = pg.PgReadPool(pg_dsn, size=1)
        await reads.open()
        try:
            async with reads.snapshot() as snapshot:
                before = (await snapshot.fetch_one(queries.live_count(None, NOW)))[0]
                await asyncio.to_thread(_insert, pg_conn, memory("late", "written meanwhile"))
                with pytest.raises(pg.psycopg.errors.UndefinedTable):
                    await snapshot.fetch_all_isolated(("SELECT * FROM no_such_table", []))
                after = (await snapshot.fetch_one(queries.live_count(None, NOW)))[0]
            fresh = (await reads.fetch_one(queries.live_count(None, NOW)))[0]
            return before, after, fresh
        finally:
            await reads.close()

    assert asyncio.run(run()) == (6, 6, 7)


def test_bm25_with_the_collections_statistics_given_ranks_as_when_it_counts_them(
    pg_conn: Any,
) -> None:
    _corpus(pg_conn)
    counted = _run(pg_conn, pg_text.bm25_top(["lake", "cold"], "ns", 10))
    size, average = counted[0][3], counted[0][5]
    assert size == 5 and average > 0  # a, b, c, g, h
    given = _run(pg_conn, pg_text.bm25_top(["lake", "cold"], "ns", 10, statistics=(size, average)))
    assert [(r[0], list(r[2]), r[3], list(r[4])) for r in given] == [
        (r[0], list(r[2]), r[3], list(r[4])) for r in counted
    ]
    assert [r[1] for r in given] == pytest.approx([r[1] for r in counted])
    # statistics of another collection change the scores, not which memories match
    other = _run(pg_conn, pg_text.bm25_top(["lake", "cold"], "ns", 10, statistics=(1000, average)))
    assert {r[0] for r in other} == {r[0] for r in counted}
    assert [r[1] for r in other] != pytest.approx([r[1] for r in counted])
