"""Graph-augmented search (seed 000 "Graph-Augmented Search").

Query tokens find entities, entities reach their one-hop neighbours, and both
lead to the memories that mention them. The lookup is bounded by a deadline
checked after each step (it returns what it has, marked timed out) and any
failure yields an empty set: the boost is additive, so recall is never worse
for the graph being slow or broken.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

from services.common.db import Reads
from services.common.memory_filter import MemoryFilterSpec
from services.search import graph_queries as queries

log = logging.getLogger("engram.search.graph")

MAX_ENTITY_HITS = 20
MAX_NEIGHBOURS = 50
MAX_MEMORIES = 200
MAX_TOKENS = 32
_TOKEN = re.compile(r"[a-z0-9]{2,}")


@dataclass(frozen=True)
class GraphBoost:
    rowids: frozenset[int]
    timed_out: bool = False
    failed: bool = False


def query_tokens(query: str) -> list[str]:
    """Alphanumeric runs of 2+ characters, lower-cased, first occurrence order."""
    return list(dict.fromkeys(_TOKEN.findall(query.lower())))[:MAX_TOKENS]


async def graph_boost(
    reads: Reads, namespace: str, query: str, spec: MemoryFilterSpec, timeout_s: float
) -> GraphBoost:
    deadline = time.monotonic() + timeout_s
    try:
        tokens = query_tokens(query)
        if not tokens:
            return GraphBoost(frozenset())
        seeds = [
            row[0]
            for row in await reads.fetch_all(
                queries.matching_entities(namespace, tokens, MAX_ENTITY_HITS)
            )
        ]
        if not seeds:
            return GraphBoost(frozenset())
        if time.monotonic() > deadline:
            return GraphBoost(frozenset(), timed_out=True)
        neighbours = [
            row[0]
            for row in await reads.fetch_all(
                queries.neighbour_entities(namespace, seeds, MAX_NEIGHBOURS)
            )
        ]
        if time.monotonic() > deadline:
            return GraphBoost(frozenset(), timed_out=True)
        rows = await reads.fetch_all(
            queries.mentioning_memories(namespace, seeds + neighbours, spec, MAX_MEMORIES)
        )
        return GraphBoost(frozenset(row[0] for row in rows), timed_out=time.monotonic() > deadline)
    except Exception:
        log.warning("graph boost failed", exc_info=True)
        return GraphBoost(frozenset(), failed=True)
