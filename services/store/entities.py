"""GetEntity and ListEntities (seed 003 `get_entity_info`): the knowledge
graph's entities read back, namespace-scoped. GetEntity reads the entity, its
aliases, facts and neighbours in one snapshot so the parts agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import NotFound, Violations, echo
from services.common.facts import ENTITY_TYPES, MAX_ENTITY_CHARS
from services.common.memory_record import MemoryRecord
from services.common.validation import validate_id
from services.storage.db import ReadPool
from services.store import entities_sql as sql
from services.store.graph import canonical_name
from services.store.page_tokens import decode_ranked_position, encode_page_token

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


def _count(bad: Violations, value: int, field: str) -> int:
    if not 0 <= value <= MAX_ITEMS:
        bad.add(field, f"must be between 0 and {MAX_ITEMS}")
    return value or DEFAULT_ITEMS


def _name(bad: Violations, value: str, field: str) -> str:
    if len(value) > MAX_ENTITY_CHARS:
        bad.add(field, f"at most {MAX_ENTITY_CHARS} characters")
    return canonical_name(value)


async def get_entity(
    reads: ReadPool,
    namespace: str,
    entity_id: str,
    name: str,
    max_facts: int,
    max_neighbors: int,
    bad: Violations,
) -> EntityInfo:
    """By id or by name (canonical or alias); NOT_FOUND, naming nothing else,
    for an entity the namespace does not hold."""
    if bool(entity_id) == bool(name.strip()):
        bad.add("id", "exactly one of id and name is required")
        bad.add("name", "exactly one of id and name is required")
    elif entity_id:
        bad.check("", validate_id, entity_id, "id")
    canonical = _name(bad, name, "name")
    facts_limit = _count(bad, max_facts, "max_facts")
    neighbors_limit = _count(bad, max_neighbors, "max_neighbors")
    bad.raise_if_any()
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
    reads: ReadPool,
    namespace: str,
    name_prefix: str,
    entity_type: str,
    min_mentions: int,
    page_size: int,
    page_token: str,
    bad: Violations,
) -> tuple[list[EntityRecord], str]:
    """One page of the namespace's entities, most mentioned first."""
    prefix = _name(bad, name_prefix, "name_prefix") if name_prefix.strip() else ""
    if entity_type and entity_type not in ENTITY_TYPES:
        bad.add("entity_type", f"unknown entity type {echo(entity_type)}")
    if min_mentions < 0:
        bad.add("min_mentions", "must not be negative")
    if not 0 <= page_size <= MAX_ENTITY_PAGE:
        bad.add("page_size", f"must be between 0 and {MAX_ENTITY_PAGE}")
    scope = "\x00".join([namespace, prefix, entity_type, str(min_mentions)])
    after = bad.check(None, decode_ranked_position, page_token, "entities", scope)
    bad.raise_if_any()
    size = page_size or DEFAULT_ENTITY_PAGE
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
