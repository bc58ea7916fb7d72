"""Knowledge-graph persistence (seed 000 "Knowledge Graph").

Runs as its own writer operation after a job's facts have committed, so a
failure here never undoes them. Re-processing a memory is idempotent: a
mention (and the relation between two entities) is counted only the first
time the memory is linked to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common import clock
from services.common.normalize import normalize_content
from services.store import graph_sql as sql


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


def write_graph(conn: Any, namespace: str, memory_id: str, triples: Sequence[Triple]) -> GraphWrite:
    at = clock.now_text()
    already_linked = sql.linked_entity_ids(conn, namespace, memory_id)
    linked = 0
    counted = 0
    seen: set[tuple[str, str, str]] = set()
    for triple in triples:
        ends = []
        for name in (triple.source, triple.target):
            entity = sql.entity_id(conn, namespace, display_name(name), canonical_name(name), at)
            if sql.link_mention(conn, namespace, memory_id, entity, name, triple.confidence, at):
                sql.count_entity_mention(conn, entity, at)
                linked += 1
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
    return GraphWrite(linked, counted)
