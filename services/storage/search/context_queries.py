"""SQL for AssembleContext's own reads (pinned memories, the graph's entities), as
(sql, params) for the read pool. Every query names one namespace, so a row of another
tenant never comes back whatever ids the caller passes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.storage.memory_filter_sql import live_sql
from services.storage.search.queries import MEMORY_COLUMNS, marks

Query = tuple[str, list[Any]]


def pinned_memories(namespace: str, limit: int, as_of: str | None = None) -> Query:
    """Live pinned memories of the namespace (valid now, or at `as_of`), most
    important first, then newest."""
    return (
        f"SELECT {MEMORY_COLUMNS} FROM memories m "
        f"WHERE m.namespace = ? AND {live_sql('m', as_of=as_of)} AND m.pinned = 1 "
        "ORDER BY m.importance DESC, m.updated_at DESC, m.id LIMIT ?",
        [namespace, limit],
    )


def session_memories(namespace: str, session_id: str, limit: int, as_of: str | None) -> Query:
    """The session's live short-term memories (turns and summaries; valid now, or at
    `as_of`), newest first."""
    return (
        f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.namespace = ? AND m.session_id = ? "
        f"AND {live_sql('m', as_of=as_of)} AND m.expire_at IS NOT NULL "
        "ORDER BY m.created_at DESC, m.id DESC LIMIT ?",
        [namespace, session_id, limit],
    )


def has_entities(namespace: str) -> Query:
    """Whether the namespace has a knowledge graph at all (one index seek)."""
    return ("SELECT EXISTS (SELECT 1 FROM entities WHERE namespace = ?)", [namespace])


def mentioned_entities(namespace: str, memory_ids: Sequence[str], limit: int) -> Query:
    """(id, name, entity_type, how many of `memory_ids` mention it) for the entities
    those memories mention, the most mentioned among them first."""
    return (
        "SELECT e.id, e.name, e.entity_type, count(*) AS shown FROM memory_entity_mentions mm "
        "JOIN entities e ON e.id = mm.entity_id AND e.namespace = mm.namespace "
        f"WHERE mm.namespace = ? AND mm.memory_id IN ({marks(memory_ids)}) "
        "GROUP BY e.id ORDER BY shown DESC, e.mentions DESC, e.id LIMIT ?",
        [namespace, *memory_ids, limit],
    )


def entities_by_id(namespace: str, entity_ids: Sequence[str]) -> Query:
    """(id, name, entity_type) of the namespace's entities among `entity_ids`."""
    return (
        "SELECT id, name, entity_type FROM entities "
        f"WHERE namespace = ? AND id IN ({marks(entity_ids)})",
        [namespace, *entity_ids],
    )


def entity_relations(namespace: str, entity_ids: Sequence[str], limit: int) -> Query:
    """(entity id, relation type, other entity's name, outgoing) for the relations
    of `entity_ids`, strongest first, at most `limit` per entity."""
    listed = marks(entity_ids)
    return (
        "SELECT entity_id, relation_type, other, outgoing FROM ("
        "SELECT r.entity_id, r.relation_type, o.name AS other, r.outgoing, "
        "row_number() OVER (PARTITION BY r.entity_id "
        "ORDER BY r.strength DESC, r.mentions DESC, o.name) AS n FROM ("
        "SELECT source_entity_id AS entity_id, target_entity_id AS other_id, relation_type, "
        f"strength, mentions, 1 AS outgoing FROM relations WHERE namespace = ? AND source_entity_id IN ({listed}) "
        "UNION ALL "
        "SELECT target_entity_id, source_entity_id, relation_type, strength, mentions, 0 "
        f"FROM relations WHERE namespace = ? AND target_entity_id IN ({listed})"
        ") r JOIN entities o ON o.id = r.other_id AND o.namespace = ?"
        ") WHERE n <= ? ORDER BY entity_id, n",
        [namespace, *entity_ids, namespace, *entity_ids, namespace, limit],
    )
