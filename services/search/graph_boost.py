"""Graph-augmented search (seed 000 "Graph-Augmented Search").

Query words find entities, entities reach their one-hop neighbours, and both
lead to the memories that mention them. The lookup is bounded by a deadline
checked after each step (it returns what it has, marked timed out) and any
failure yields an empty set: the boost is additive, so recall is never worse
for the graph being slow or broken.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from services.common.memory_filter import MemoryFilterSpec
from services.common.text import unspaced, without_stop_words, words
from services.storage.db import Reads
from services.storage.dialect import SQLITE, Dialect
from services.storage.search import graph_queries as queries

log = logging.getLogger("engram.search.graph")

MAX_ENTITY_HITS = 20
MAX_NEIGHBOURS = 50
MAX_MEMORIES = 200
MAX_TOKENS = 32


@dataclass(frozen=True)
class GraphBoost:
    rowids: frozenset[int]
    timed_out: bool = False
    failed: bool = False


def query_tokens(query: str) -> list[str]:
    """The query's words (services.common.text) in first occurrence order,
    without stop words; a single character is too little to name an entity,
    except in a script written without spaces (one ideograph can be a word)."""
    distinct = dict.fromkeys(words(query))
    named = [w for w in without_stop_words(distinct) if len(w) > 1 or unspaced(w)]
    return named[:MAX_TOKENS]


async def graph_boost(
    reads: Reads,
    namespace: str,
    query: str,
    spec: MemoryFilterSpec,
    timeout_s: float,
    *,
    dialect: Dialect = SQLITE,
) -> GraphBoost:
    """The memories the query's entities lead to (`dialect`: the read pool's).
    Its reads are isolated (Reads.fetch_all_isolated): one that fails fails the
    boost, never the snapshot the Recall's other reads share."""
    deadline = time.monotonic() + timeout_s
    try:
        tokens = query_tokens(query)
        if not tokens:
            return GraphBoost(frozenset())
        seeds = [
            row[0]
            for row in await reads.fetch_all_isolated(
                queries.matching_entities(
                    namespace,
                    tokens,
                    [t for t in tokens if unspaced(t)],
                    MAX_ENTITY_HITS,
                    dialect=dialect,
                )
            )
        ]
        if not seeds:
            return GraphBoost(frozenset())
        if time.monotonic() > deadline:
            return GraphBoost(frozenset(), timed_out=True)
        neighbours = [
            row[0]
            for row in await reads.fetch_all_isolated(
                queries.neighbour_entities(namespace, seeds, MAX_NEIGHBOURS)
            )
        ]
        if time.monotonic() > deadline:
            return GraphBoost(frozenset(), timed_out=True)
        rows = await reads.fetch_all_isolated(
            queries.mentioning_memories(
                namespace, seeds + neighbours, spec, MAX_MEMORIES, dialect=dialect
            )
        )
        return GraphBoost(frozenset(row[0] for row in rows), timed_out=time.monotonic() > deadline)
    except Exception:
        log.warning("graph boost failed", exc_info=True)
        return GraphBoost(frozenset(), failed=True)
