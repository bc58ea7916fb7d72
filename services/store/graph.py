"""Knowledge-graph persistence (seed 000 "Knowledge Graph").

Runs as its own writer operation after a job's facts have committed, so a
failure here never undoes them. Re-processing a memory is idempotent: a
mention (and the relation between two entities) is counted only the first
time the memory is linked to it. Entities carry a type and aliases (seed 003
"entities"); a fact the job wrote is linked to the entities it names, so
GetEntity shows facts, not only the conversation they came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from services.common import clock
from services.common.facts import DEFAULT_ENTITY_TYPE, NamedEntity
from services.common.normalize import normalize_content
from services.storage.connection import Connection
from services.storage.store import extraction_sql as links
from services.storage.store import graph_sql as sql


@dataclass(frozen=True)
class Triple:
    source: str
    relationship: str
    target: str
    confidence: float


@dataclass(frozen=True)
class GraphWrite:
    entities_linked: int
    relations_counted: int


def display_name(name: str) -> str:
    """The name as stored: original casing, whitespace normalised."""
    return normalize_content(name).storage


def canonical_name(name: str) -> str:
    """Entities match on this: lower-cased, whitespace normalised."""
    return display_name(name).lower()


def relation_type(relationship: str) -> str:
    """`Works At` and `works_at` are one relation type."""
    return "_".join(canonical_name(relationship).split())


class _Resolver:
    """Names to entity ids for one write (seed 003 "entities"): a name matches
    an entity's canonical name or alias within the namespace, else a new
    entity is created. A more specific type replaces `thing`; a specific type
    once set stays (a later, different guess does not flip it). New aliases
    are merged unless the name is taken by another entity (entities are never
    merged by an alias)."""

    def __init__(self, conn: Connection, namespace: str, at: str) -> None:
        self.conn = conn
        self.namespace = namespace
        self.at = at
        self.known: dict[str, tuple[str, str]] = {}  # canonical name -> (id, type)

    def resolve(
        self, name: str, entity_type: str = DEFAULT_ENTITY_TYPE, aliases: Sequence[str] = ()
    ) -> str:
        canonical = canonical_name(name)
        found = self.known.get(canonical) or sql.find_entity(self.conn, self.namespace, canonical)
        if found is None:
            entity = sql.create_entity(
                self.conn, self.namespace, display_name(name), canonical, entity_type, self.at
            )
            found = (entity, entity_type)
        elif found[1] in (DEFAULT_ENTITY_TYPE, "unknown") and entity_type != DEFAULT_ENTITY_TYPE:
            sql.set_entity_type(self.conn, found[0], entity_type, self.at)
            found = (found[0], entity_type)
        self.known[canonical] = found
        for alias in aliases:
            other = canonical_name(alias)
            if other == canonical or self.known.get(other, found)[0] != found[0]:
                continue
            if sql.add_alias(
                self.conn, self.namespace, found[0], display_name(alias), other, self.at
            ):
                self.known[other] = found
        return found[0]


def names_in(text: str, names: Sequence[str]) -> bool:
    """Whether `text` names any of `names` as whole words (case aside)."""
    lowered = canonical_name(text)
    return any(
        re.search(rf"(?<!\w){re.escape(canonical_name(n))}(?!\w)", lowered) for n in names if n
    )


def write_graph(
    conn: Connection,
    namespace: str,
    memory_id: str,
    triples: Sequence[Triple],
    named: Sequence[NamedEntity] = (),
    facts: Sequence[tuple[str, str]] = (),
) -> GraphWrite:
    """The job's entities: each named entity (typed, with aliases) and each
    triple's two ends are resolved and linked to the source memory; each is
    also linked to the job's facts ((memory id, content)) that name it or an
    alias of it."""
    at = clock.now_text()
    resolver = _Resolver(conn, namespace, at)
    already_linked = sql.linked_entity_ids(conn, namespace, memory_id)
    linked = 0
    counted = 0
    mentioned: dict[str, list[str]] = {}  # entity id -> names it was given here

    def link(memory: str, entity: str, name: str, confidence: float) -> None:
        nonlocal linked
        if sql.link_mention(conn, namespace, memory, entity, name, confidence, at):
            sql.count_entity_mention(conn, entity, at)
            linked += 1
            # seed 003's `entity` edge, as a chain: the memory that named the
            # entity before this one -> this one (one link per new mention, not
            # one per pair, so a much-mentioned entity costs nothing extra)
            previous = sql.previous_mention(conn, entity, memory)
            if previous is not None:
                links.insert_link(
                    conn, namespace, previous, memory, links.ENTITY, None, at, confidence=confidence
                )

    for described in named:
        entity = resolver.resolve(described.name, described.type, described.aliases)
        link(memory_id, entity, described.name, 1.0)
        mentioned.setdefault(entity, []).extend([described.name, *described.aliases])
    seen: set[tuple[str, str, str]] = set()
    for triple in triples:
        ends = []
        for name in (triple.source, triple.target):
            entity = resolver.resolve(name)
            link(memory_id, entity, name, triple.confidence)
            mentioned.setdefault(entity, []).append(name)
            ends.append(entity)
        source, target = ends
        key = (source, target, relation_type(triple.relationship))
        # Counted once per memory: a repeat within the call, or a relation whose
        # two ends this memory had already linked on an earlier run, is not new.
        if key in seen or (source in already_linked and target in already_linked):
            continue
        seen.add(key)
        sql.record_relation(conn, namespace, source, target, key[2], triple.confidence, at)
        counted += 1
    for fact_id, content in facts:
        for entity, names in mentioned.items():
            if fact_id != memory_id and names_in(content, names):
                link(fact_id, entity, names[0], 1.0)
    return GraphWrite(linked, counted)
