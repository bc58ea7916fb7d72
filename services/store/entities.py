"""GetEntity and ListEntities (seed 003 `get_entity_info`): the knowledge
graph's entities read back, namespace-scoped. GetEntity reads the entity, its
aliases, facts and neighbours in one snapshot so the parts agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import NotFound, echo
from services.common.memory_record import MemoryRecord
from services.storage.db import ReadPool
from services.storage.store import entities_sql as sql
from services.store.inputs import GetEntityInput, ListEntitiesInput
from services.store.page_tokens import encode_page_token

DEFAULT_ITEMS = 20  # facts and neighbours GetEntity returns unless asked
MAX_ITEMS = 100
DEFAULT_ENTITY_PAGE = 100
MAX_ENTITY_PAGE = 500


@dataclass(frozen=True)
class EntityRecord:
    id: str
    name: str
    entity_type: str
    mentions: int
    created_at: str
    updated_at: str
    aliases: tuple[str, ...] = ()

    @classmethod
    def from_row(cls, row: Sequence[Any], aliases: Sequence[str] = ()) -> EntityRecord:
        return cls(row[0], row[1], row[2], int(row[3]), row[4], row[5], tuple(aliases))


@dataclass(frozen=True)
class Neighbor:
    entity: EntityRecord
    relation_type: str
    outgoing: bool
    strength: float
    confidence: float
    mentions: int


@dataclass(frozen=True)
class EntityInfo:
    entity: EntityRecord
    facts: list[MemoryRecord]
    facts_truncated: bool
    neighbors: list[Neighbor]
    neighbors_truncated: bool


async def get_entity(reads: ReadPool, asked: GetEntityInput) -> EntityInfo:
    """By id or by name (canonical or alias); NOT_FOUND, naming nothing else,
    for an entity the namespace does not hold."""
    namespace, entity_id, name, canonical = asked.namespace, asked.id, asked.name, asked.canonical
    facts_limit, neighbors_limit = asked.max_facts, asked.max_neighbors
    async with reads.snapshot() as snap:
        query = (
            sql.entity_by_id(namespace, entity_id)
            if entity_id
            else sql.entity_by_name(namespace, canonical)
        )
        row = await snap.fetch_one(query)
        if row is None:
            what = f"entity {entity_id}" if entity_id else f"entity named {echo(name)}"
            raise NotFound(f"{what} not found in namespace {namespace}")
        found_id = row[0]
        fact_rows = await snap.fetch_all(
            sql.facts(namespace, found_id, facts_limit + 1, dialect=reads.dialect)
        )
        neighbor_rows = await snap.fetch_all(
            sql.neighbors(namespace, found_id, neighbors_limit + 1)
        )
        shown = [r[5] for r in neighbor_rows[:neighbors_limit]]
        alias_rows = await snap.fetch_all(sql.aliases(namespace, [found_id, *shown]))
    names: dict[str, list[str]] = {}
    for entity, alias in alias_rows:
        names.setdefault(entity, []).append(alias)
    return EntityInfo(
        entity=EntityRecord.from_row(row, names.get(found_id, ())),
        facts=[MemoryRecord.from_row(r) for r in fact_rows[:facts_limit]],
        facts_truncated=len(fact_rows) > facts_limit,
        neighbors=[
            Neighbor(
                EntityRecord.from_row(r[5:], names.get(r[5], ())),
                r[0],
                bool(r[4]),
                float(r[1]),
                float(r[2]),
                int(r[3]),
            )
            for r in neighbor_rows[:neighbors_limit]
        ],
        neighbors_truncated=len(neighbor_rows) > neighbors_limit,
    )


async def list_entities(
    reads: ReadPool, asked: ListEntitiesInput
) -> tuple[list[EntityRecord], str]:
    """One page of the namespace's entities, most mentioned first."""
    namespace, prefix, entity_type = asked.namespace, asked.name_prefix, asked.entity_type
    min_mentions, size, after, scope = asked.min_mentions, asked.page_size, asked.after, asked.scope
    async with reads.snapshot() as snap:
        rows = await snap.fetch_all(
            sql.list_entities(namespace, prefix, entity_type, min_mentions, after, size + 1)
        )
        page = rows[:size]
        alias_rows = await snap.fetch_all(sql.aliases(namespace, [r[0] for r in page]))
    names: dict[str, list[str]] = {}
    for entity, alias in alias_rows:
        names.setdefault(entity, []).append(alias)
    entities = [EntityRecord.from_row(r, names.get(r[0], ())) for r in page]
    token = ""
    if len(rows) > size:
        last = page[-1]
        token = encode_page_token("entities", scope, [-int(last[3]), last[6], last[0]])
    return entities, token
