"""The knowledge graph's SQL (services/storage/store/graph_sql.py, graph.py,
entities_sql.py) and the links between memories (extraction_sql.py) on both
backends from one home: every test runs once on a migrated SQLite file and
once on a migrated PostgreSQL database (through services/storage/pg.py's
SqliteApi), with the same assertions."""

from __future__ import annotations

from typing import Any

from pg_rows import PAST, T0, T1, T2, T3, dialect, insert, memory

from services.common.facts import NamedEntity
from services.storage.store import entities_sql, graph_sql
from services.storage.store import extraction_sql as links
from services.storage.store import repository as repo
from services.store.graph import Triple, write_graph


def _entity(conn: Any, name: str, namespace: str = "ns") -> Any:
    return conn.execute(
        "SELECT id, name, entity_type, mentions FROM entities WHERE namespace = ? "
        "AND canonical_name = ?",
        (namespace, name.lower()),
    ).fetchone()


def _links(conn: Any, link_type: str) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT from_memory_id, to_memory_id FROM memory_links WHERE link_type = ? "
        "ORDER BY from_memory_id, to_memory_id",
        (link_type,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


# ---- writes ---------------------------------------------------------------------------


def test_a_jobs_graph_is_written_once_and_rewriting_it_counts_nothing(conn: Any) -> None:
    insert(
        conn,
        memory("m", "Ana Silva works at Acme"),
        memory("f1", "Ana works at Acme", source_memory_id="m"),
        memory("f2", "Acme is in Lisbon", source_memory_id="m"),
    )
    named = [NamedEntity("Ana Silva", "person", ("Ana",)), NamedEntity("Acme", "organization")]
    triples = [Triple("Ana Silva", "Works At", "Acme", 0.8), Triple("Acme", "in", "Lisbon", 0.6)]
    facts = [("f1", "Ana works at Acme"), ("f2", "Acme is in Lisbon")]
    first = write_graph(conn, "ns", "m", triples, named, facts)
    # m names three entities; f1 names Ana and Acme, f2 Acme and Lisbon
    assert (first.entities_linked, first.relations_counted) == (7, 2)
    ana, acme, lisbon = (_entity(conn, n) for n in ("Ana Silva", "Acme", "Lisbon"))
    assert (ana["name"], ana["entity_type"], ana["mentions"]) == ("Ana Silva", "person", 2)
    assert (acme["entity_type"], acme["mentions"]) == ("organization", 3)
    assert (lisbon["entity_type"], lisbon["mentions"]) == ("thing", 2)
    # the alias resolves to the entity
    assert graph_sql.find_entity(conn, "ns", "ana") == (ana["id"], "person")
    relation = conn.execute(
        "SELECT relation_type, strength, mentions, confidence FROM relations "
        "WHERE source_entity_id = ? AND target_entity_id = ?",
        (ana["id"], acme["id"]),
    ).fetchone()
    assert tuple(relation) == ("works_at", 1.0, 1, 0.8)
    # each entity's mentions chained in the order they were linked
    # (m -> f1 for Ana and for Acme is one link; f1 was Acme's latest before f2)
    assert _links(conn, links.ENTITY) == [("f1", "f2"), ("m", "f1"), ("m", "f2")]

    again = write_graph(conn, "ns", "m", triples, named, facts)
    assert (again.entities_linked, again.relations_counted) == (0, 0)
    assert _entity(conn, "Acme")["mentions"] == 3
    assert conn.execute("SELECT count(*) FROM relations").fetchone()[0] == 2
    assert conn.execute("SELECT count(*) FROM entity_aliases").fetchone()[0] == 1


def test_a_relation_seen_again_by_another_memory_averages_its_confidence(conn: Any) -> None:
    insert(conn, memory("a", "Ana likes tea"), memory("b", "Ana likes tea a lot"))
    write_graph(conn, "ns", "a", [Triple("Ana", "likes", "Tea", 0.6)])
    write_graph(conn, "ns", "b", [Triple("Ana", "likes", "Tea", 1.0)])
    row = conn.execute("SELECT mentions, confidence FROM relations").fetchone()
    assert (row[0], round(row[1], 6)) == (2, 0.8)
    assert _links(conn, links.ENTITY) == [("a", "b")]


def test_an_alias_taken_by_another_entity_is_not_added(conn: Any) -> None:
    insert(conn, memory("m", "Bo and Bob"))
    write_graph(
        conn, "ns", "m", [], [NamedEntity("Bo", "person"), NamedEntity("Bob", "person", ("Bo",))]
    )
    assert conn.execute("SELECT count(*) FROM entity_aliases").fetchone()[0] == 0
    bob = _entity(conn, "Bob")
    assert graph_sql.add_alias(conn, "ns", bob["id"], "Bobby", "bobby", T1) is True
    assert graph_sql.add_alias(conn, "ns", bob["id"], "Bobby", "bobby", T1) is False
    assert graph_sql.add_alias(conn, "ns", bob["id"], "Bo", "bo", T1) is False


def test_unlinking_floors_mentions_at_zero_and_orphans_go_with_their_relations(
    conn: Any,
) -> None:
    insert(conn, memory("m", "Ana knows Bruno"))
    write_graph(
        conn,
        "ns",
        "m",
        [Triple("Ana", "knows", "Bruno", 1.0)],
        [NamedEntity("Ana", "person", ("A",))],
    )
    ana, bruno = _entity(conn, "Ana"), _entity(conn, "Bruno")
    assert sorted(graph_sql.mentioned_entities(conn, "m")) == sorted([ana["id"], bruno["id"]])
    graph_sql.delete_mention(conn, "m", ana["id"], T1)
    graph_sql.delete_mention(conn, "m", ana["id"], T1)  # twice: never below zero
    assert _entity(conn, "Ana")["mentions"] == 0
    assert graph_sql.delete_orphaned_entities(conn, [ana["id"], bruno["id"]]) == (1, 1)
    assert _entity(conn, "Ana") is None and _entity(conn, "Bruno") is not None
    assert conn.execute("SELECT count(*) FROM entity_aliases").fetchone()[0] == 0


# ---- reads (GetEntity, ListEntities) ------------------------------------------------------


def _graph_for_reads(conn: Any) -> dict[str, str]:
    insert(
        conn,
        memory("m1", "Ana met Bruno in Porto", created_at=T0, event_time=T0),
        memory("m2", "Ana moved to Porto", created_at=T1, event_time=T1),
        memory("gone", "Ana was deleted", created_at=T1, event_time=T1),
        memory("old", "Ana's old fact", created_at=T1, event_time=T1, valid_until=PAST),
        memory("x", "Ana elsewhere", namespace="other"),
    )
    write_graph(
        conn,
        "ns",
        "m1",
        [Triple("Ana", "met", "Bruno", 0.9), Triple("Ana", "visited", "Porto", 0.7)],
        [NamedEntity("Ana", "person", ("Annie", "A. S."))],
    )
    for memory_id in ("m2", "gone", "old"):
        write_graph(conn, "ns", memory_id, [Triple("Ana", "visited", "Porto", 0.7)])
    write_graph(conn, "other", "x", [], [NamedEntity("Ana", "person")])
    repo.update_memory(conn, "gone", {"is_deleted": 1, "deleted_at": T2})
    return {n: _entity(conn, n)["id"] for n in ("Ana", "Bruno", "Porto")}


def test_an_entity_is_read_by_id_name_or_alias_with_its_facts_and_neighbours(conn: Any) -> None:
    ids = _graph_for_reads(conn)
    by_id = repo.fetch_one(conn, entities_sql.entity_by_id("ns", ids["Ana"]))
    by_alias = repo.fetch_one(conn, entities_sql.entity_by_name("ns", "annie"))
    by_name = repo.fetch_one(conn, entities_sql.entity_by_name("ns", "ana"))
    assert by_id[0] == by_alias[0] == by_name[0] == ids["Ana"]
    assert (by_alias["via_alias"], by_name["via_alias"]) == (1, 0)
    assert repo.fetch_one(conn, entities_sql.entity_by_id("other", ids["Ana"])) is None

    facts = repo.fetch_all(conn, entities_sql.facts("ns", ids["Ana"], 10, dialect=dialect(conn)))
    assert [f["id"] for f in facts] == ["m2", "m1"]  # live and valid now, newest first

    neighbors = repo.fetch_all(conn, entities_sql.neighbors("ns", ids["Ana"], 10))
    # strongest first, then most mentioned (four memories visited Porto)
    assert [(n[0], n[4], n[6]) for n in neighbors] == [
        ("visited", 1, "Porto"),
        ("met", 1, "Bruno"),
    ]
    assert [
        (n[0], n[4]) for n in repo.fetch_all(conn, entities_sql.neighbors("ns", ids["Porto"], 10))
    ] == [("visited", 0)]
    aliases = repo.fetch_all(conn, entities_sql.aliases("ns", [ids["Ana"], ids["Bruno"]]))
    assert [tuple(a) for a in aliases] == [(ids["Ana"], "Annie"), (ids["Ana"], "A. S.")]


def test_entities_list_by_mentions_with_prefix_type_and_pages(conn: Any) -> None:
    ids = _graph_for_reads(conn)

    def page(
        prefix: str = "", entity_type: str = "", after: Any = None, limit: int = 9
    ) -> list[str]:
        query = entities_sql.list_entities("ns", prefix, entity_type, 0, after, limit)
        return [r[1] for r in repo.fetch_all(conn, query)]

    assert page() == ["Ana", "Porto", "Bruno"]
    assert page(prefix="p") == ["Porto"]
    assert page(entity_type="person") == ["Ana"]
    first = repo.fetch_all(conn, entities_sql.list_entities("ns", "", "", 0, None, 2))
    last = first[-1]
    after = (-int(last[3]), last[6], last[0])
    assert page(after=after) == ["Bruno"]
    assert (
        ids["Bruno"]
        == repo.fetch_all(conn, entities_sql.list_entities("ns", "", "", 0, after, 9))[0][0]
    )


# ---- links between memories -------------------------------------------------------------


def test_links_are_written_once_and_relation_links_close_with_a_memory(conn: Any) -> None:
    row = links.LinkRow("ns", "a", "b", links.CAUSAL, None, T0, T0, 0.5, 0.9, ("e1",))
    links.insert_links(conn, [row, row._replace(link_type=links.TEMPORAL), row])
    links.insert_link(conn, "ns", "a", "b", links.CAUSAL, "job", T1)  # already there
    stored = conn.execute(
        "SELECT link_type, weight, confidence, evidence, job_id FROM memory_links "
        "ORDER BY link_type"
    ).fetchall()
    assert [tuple(r) for r in stored] == [
        ("causal", 0.5, 0.9, '["e1"]', None),
        ("temporal", 0.5, 0.9, '["e1"]', None),
    ]
    assert links.close_relation_links(conn, "ns", "b", T2) == 1  # causal only
    assert links.close_relation_links(conn, "ns", "b", T3) == 0  # an earlier end stays
    until = conn.execute(
        "SELECT link_type, valid_until FROM memory_links ORDER BY link_type"
    ).fetchall()
    assert [tuple(r) for r in until] == [("causal", T2), ("temporal", None)]


def test_a_sessions_tail_is_its_newest_memory_without_a_successor(conn: Any) -> None:
    insert(
        conn,
        memory("s1a", "first", session_id="s1", created_at=T0),
        memory("s1b", "second", session_id="s1", created_at=T1),
        memory("s1v", "second, version two", session_id="s1", created_at=T2),
        memory("s2a", "other session", session_id="s2", created_at=T0),
    )
    links.insert_link(conn, "ns", "s1v", "s1b", links.SUPERSEDES, None, T2)
    links.insert_link(conn, "ns", "s1a", "s1b", links.TEMPORAL, None, T1)
    # s1v supersedes; s1b has no successor and is the newest that qualifies
    assert links.session_tails(conn, "ns", ["s1", "s2", "s3"]) == {"s1": "s1b", "s2": "s2a"}
    links.set_extraction_state(conn, "s1b", "completed", "model-x")
    row = conn.execute(
        "SELECT extraction_status, extraction_model FROM memories WHERE id = 's1b'"
    ).fetchone()
    assert tuple(row) == ("completed", "model-x")
