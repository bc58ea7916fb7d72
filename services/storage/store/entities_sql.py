"""SQL for reading the knowledge graph's entities (GetEntity, ListEntities).
Every statement is scoped to one namespace: an entity of another namespace is
never found, and nothing of it is read. One text for SQLite and Postgres (the
read pool translates it), except SQLite's `+` planner hints in `facts`."""

from __future__ import annotations

from collections.abc import Sequence

from services.storage.dialect import SQLITE, Dialect
from services.storage.memory_filter_sql import live_sql
from services.storage.store.repository import _M_COLUMNS, Query

ENTITY_COLUMNS = "e.id, e.name, e.entity_type, e.mentions, e.created_at, e.updated_at"


def entity_by_id(namespace: str, entity_id: str) -> Query:
    return (
        f"SELECT {ENTITY_COLUMNS} FROM entities e WHERE e.namespace = ? AND e.id = ?",
        [namespace, entity_id],
    )


def entity_by_name(namespace: str, canonical: str) -> Query:
    """The entity whose canonical name, or else whose alias, this is."""
    return (
        f"SELECT {ENTITY_COLUMNS}, 0 AS via_alias FROM entities e "
        "WHERE e.namespace = ? AND e.canonical_name = ? "
        f"UNION ALL SELECT {ENTITY_COLUMNS}, 1 FROM entity_aliases a "
        "JOIN entities e ON e.id = a.entity_id AND e.namespace = a.namespace "
        "WHERE a.namespace = ? AND a.canonical_alias = ? ORDER BY via_alias LIMIT 1",
        [namespace, canonical, namespace, canonical],
    )


def aliases(namespace: str, entity_ids: Sequence[str]) -> Query:
    """(entity_id, alias) of these entities, each entity's in the order first seen."""
    # none: IN (NULL) matches nothing (Postgres has no empty IN list)
    marks = ", ".join("?" * len(entity_ids)) or "NULL"
    return (
        "SELECT entity_id, alias FROM entity_aliases "
        f"WHERE namespace = ? AND entity_id IN ({marks}) ORDER BY entity_id, created_at, rowid",
        [namespace, *entity_ids],
    )


def facts(namespace: str, entity_id: str, limit: int, *, dialect: Dialect = SQLITE) -> Query:
    """Live memories valid now that mention the entity, newest valid_from first
    (`+`, on SQLite: from the entity's mentions, not a scan of the namespace's
    memories; Postgres has no such hint, and no unary + on text)."""
    hint = dialect.plan_guard
    live = live_sql("m", keep_plan=not dialect.is_postgres)
    return (
        f"SELECT {_M_COLUMNS} FROM memory_entity_mentions mm JOIN memories m "
        f"ON m.id = mm.memory_id AND {hint}m.namespace = mm.namespace "
        f"WHERE mm.namespace = ? AND mm.entity_id = ? AND {live} "
        "ORDER BY m.valid_from DESC, m.id DESC LIMIT ?",
        [namespace, entity_id, limit],
    )


def neighbors(namespace: str, entity_id: str, limit: int) -> Query:
    """(relation columns, outgoing, the other entity's columns), strongest first."""
    return (
        "SELECT r.relation_type, r.strength, r.confidence, r.mentions, r.outgoing, "
        f"{ENTITY_COLUMNS} FROM ("
        "SELECT target_entity_id AS other, relation_type, strength, confidence, mentions, "
        "1 AS outgoing FROM relations WHERE namespace = ? AND source_entity_id = ? "
        "UNION ALL SELECT source_entity_id, relation_type, strength, confidence, mentions, 0 "
        "FROM relations WHERE namespace = ? AND target_entity_id = ?) r "
        "JOIN entities e ON e.id = r.other AND e.namespace = ? "
        "ORDER BY r.strength DESC, r.mentions DESC, e.canonical_name, r.relation_type, e.id "
        "LIMIT ?",
        [namespace, entity_id, namespace, entity_id, namespace, limit],
    )


def list_entities(
    namespace: str,
    prefix: str,
    entity_type: str,
    min_mentions: int,
    after: tuple[int, str, str] | None,
    limit: int,
) -> Query:
    """Most mentioned first, then by canonical name and id; after the
    (-mentions, canonical_name, id) a previous page ended at."""
    sql = (
        f"SELECT {ENTITY_COLUMNS}, e.canonical_name FROM entities e "
        "WHERE e.namespace = ? AND e.mentions >= ?"
    )
    args: list[object] = [namespace, min_mentions]
    if prefix:
        # a range on the unique (namespace, canonical_name) index, not LIKE:
        # a prefix may hold % or _
        sql += " AND e.canonical_name >= ? AND e.canonical_name < ?"
        args.extend([prefix, prefix + "\U0010ffff"])
    if entity_type:
        sql += " AND e.entity_type = ?"
        args.append(entity_type)
    if after is not None:
        sql += " AND (-e.mentions, e.canonical_name, e.id) > (?, ?, ?)"
        args.extend(after)
    sql += " ORDER BY e.mentions DESC, e.canonical_name, e.id LIMIT ?"
    args.append(limit)
    return sql, args
