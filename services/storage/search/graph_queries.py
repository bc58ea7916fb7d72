"""SQL for the graph boost (seed 000 "Graph-Augmented Search"), as (sql, params)
for the read pool. Every query is confined to one namespace. `dialect` (the
read pool's, services/storage/dialect.py) where the SQL differs on PostgreSQL:
the substring position, the `+` plan guards and the filter's JSON arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common.memory_filter import MemoryFilterSpec
from services.storage.dialect import SQLITE, Dialect
from services.storage.memory_filter_sql import filter_sql, spec_live_sql
from services.storage.search.queries import marks

Query = tuple[str, list[Any]]


def like_pattern(token: str) -> str:
    """`%token%` with LIKE's wildcards and the escape character escaped."""
    escaped = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def matching_entities(
    namespace: str,
    tokens: Sequence[str],
    unspaced: Sequence[str],
    limit: int,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """Entities whose canonical name or one of whose aliases contains any token,
    or stands inside any of the `unspaced` tokens (several words run together:
    "東京に行きたい" holds the entity "東京"), most mentioned first."""

    position = dialect.position

    def tests(column: str) -> str:
        like = [f"{column} LIKE ? ESCAPE '\\'" for _ in tokens]
        inside = [f"{position}(?, {column}) > 0" for _ in unspaced]
        return " OR ".join(like + inside)

    values = [*(like_pattern(t) for t in tokens), *unspaced]
    return (
        "SELECT id FROM ("
        "SELECT id, mentions FROM entities WHERE namespace = ? AND canonical_name <> '' "
        f"AND ({tests('canonical_name')}) "
        "UNION SELECT e.id, e.mentions FROM entity_aliases a "
        "JOIN entities e ON e.id = a.entity_id AND e.namespace = a.namespace "
        f"WHERE a.namespace = ? AND a.canonical_alias <> '' AND ({tests('a.canonical_alias')})"
        ") ORDER BY mentions DESC, id LIMIT ?",
        [namespace, *values, namespace, *values, limit],
    )


def neighbour_entities(namespace: str, entity_ids: Sequence[str], limit: int) -> Query:
    """Entities one relation away from any of `entity_ids`, in either direction."""
    listed = marks(entity_ids)
    return (
        "SELECT id FROM ("
        f"SELECT target_entity_id AS id FROM relations WHERE namespace = ? AND source_entity_id IN ({listed}) "
        "UNION "
        f"SELECT source_entity_id FROM relations WHERE namespace = ? AND target_entity_id IN ({listed})"
        f") WHERE id NOT IN ({listed}) LIMIT ?",
        [namespace, *entity_ids, namespace, *entity_ids, *entity_ids, limit],
    )


def mentioning_memories(
    namespace: str,
    entity_ids: Sequence[str],
    spec: MemoryFilterSpec,
    limit: int,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """Rowids of live memories of the namespace, passing the filter, that mention
    any of `entity_ids`."""
    clauses, params = filter_sql(spec, "m", dialect)
    guard = dialect.plan_guard
    return (
        "SELECT DISTINCT m.rowid FROM memory_entity_mentions mm "
        "JOIN memories m ON m.id = mm.memory_id "
        f"WHERE mm.namespace = ? AND mm.entity_id IN ({marks(entity_ids)}) "
        # `+`: the plan starts from the mentions of the entities, not from a
        # scan of the namespace's memories
        f"AND {guard}m.namespace = ? AND {spec_live_sql(spec, 'm', keep_plan=bool(guard))}{clauses} "
        "LIMIT ?",
        [namespace, *entity_ids, namespace, *params, limit],
    )


def linked_memories(
    namespace: str,
    rowids: Sequence[int],
    link_types: Sequence[str],
    spec: MemoryFilterSpec,
    at: str,
    *,
    dialect: Dialect = SQLITE,
) -> Query:
    """(rowid reached, rowid it was reached from) over links of `link_types` valid
    at `at`, in both directions, from the memories `rowids`; the memories
    reached pass the filter (liveness is checked when their rows are read).
    The reached side's namespace is `+`-prefixed so the plan starts from the
    rowids, not from a scan of the namespace (50 ms at 100k memories)."""
    to_clauses, to_params = filter_sql(spec, "t", dialect)
    from_clauses, from_params = filter_sql(spec, "f", dialect)
    listed, types, guard = marks(rowids), marks(link_types), dialect.plan_guard

    def one_way(clause_params: list[Any]) -> list[Any]:
        return [*rowids, namespace, *link_types, at, at, namespace, *clause_params]

    valid = (
        "AND (l.valid_from IS NULL OR l.valid_from <= ?) "
        "AND (l.valid_until IS NULL OR l.valid_until > ?) "
    )
    return (
        "SELECT t.rowid, f.rowid FROM memories f "
        "JOIN memory_links l ON l.from_memory_id = f.id "
        "JOIN memories t ON t.id = l.to_memory_id "
        f"WHERE f.rowid IN ({listed}) AND l.namespace = ? AND l.link_type IN ({types}) {valid}"
        f"AND {guard}t.namespace = ?{to_clauses} "
        "UNION "
        "SELECT f.rowid, t.rowid FROM memories t "
        "JOIN memory_links l ON l.to_memory_id = t.id "
        "JOIN memories f ON f.id = l.from_memory_id "
        f"WHERE t.rowid IN ({listed}) AND l.namespace = ? AND l.link_type IN ({types}) {valid}"
        f"AND {guard}f.namespace = ?{from_clauses}",
        [*one_way(to_params), *one_way(from_params)],
    )
