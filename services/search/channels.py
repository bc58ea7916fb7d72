"""Recall's channels other than keyword and vector (services/search/keyword_channel.py,
vector_channel.py), each one object built once per Recaller and asked per
namespace under a RecallScope: the entity channel (the graph boost and the
entity route), the link channels (the causal route and the temporal route's
session neighbours), the temporal route's time range, and the episode links
between pool members that scoring uses. Each reads with the filter inside its
SQL, like the keyword and vector channels."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from services.common import tracing
from services.common.metrics import RECALL_CHANNEL_SECONDS, timed
from services.search.graph_boost import GraphBoost, graph_boost
from services.search.recall_scope import RecallScope
from services.search.routes import CAUSAL_SEEDS, linked_reach
from services.search.scoring import Candidate
from services.storage.search import queries


class EntityChannel:
    """Memories mentioning the entities the query names: the entity route, and
    the graph channel (`name` names it in metrics and traces)."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self._name = name
        self._timeout_s = timeout_s

    async def linked(self, scope: RecallScope, query: str) -> GraphBoost:
        with timed(RECALL_CHANNEL_SECONDS, self._name), tracing.span(f"recall.{self._name}"):
            return await graph_boost(
                scope.reads,
                scope.namespace,
                query,
                scope.spec,
                self._timeout_s,
                dialect=scope.dialect,
            )


class LinkChannel:
    """What links of `link_types` reach from the best keyword and vector
    matches within `depth` hops, each lifted by `weight` halved per hop (its
    metrics and traces named by the first link type)."""

    def __init__(self, link_types: tuple[str, ...], depth: int, weight: float) -> None:
        self._link_types = link_types
        self._depth = depth
        self._weight = weight

    async def reach(
        self,
        scope: RecallScope,
        keyword: list[tuple[int, float]],
        vector_candidates: list[int],
    ) -> dict[int, float]:
        seeds = [r for r, _ in keyword[:CAUSAL_SEEDS]] + vector_candidates[:CAUSAL_SEEDS]
        weight = self._weight
        if not seeds or weight <= 0:
            return {}
        channel = self._link_types[0]
        with timed(RECALL_CHANNEL_SECONDS, channel), tracing.span(f"recall.{channel}"):
            reached = await linked_reach(
                scope.reads,
                scope.namespace,
                seeds,
                self._link_types,
                scope.spec,
                self._depth,
                scope.at(),
                dialect=scope.dialect,
            )
        return {rowid: weight / 2 ** (hop - 1) for rowid, hop in reached.items()}


class TimeRangeChannel:
    """The temporal route's list: memories of the range the query names, latest
    first (their lift is the time boost every memory in range gets), then
    facts no longer valid that were during the range (a superseded value, a
    short-term fact since ended), lifted by the same boost when their event
    time lies outside the range."""

    def __init__(self, depth: int, time_boost: float) -> None:
        self._depth = depth
        self._time_boost = time_boost

    async def in_range(
        self, scope: RecallScope, windows: list[tuple[str, str]]
    ) -> dict[int, float]:
        reads, namespace, spec, dialect = scope.reads, scope.namespace, scope.spec, scope.dialect
        depth = self._depth
        with timed(RECALL_CHANNEL_SECONDS, "time_range"), tracing.span("recall.time_range"):
            rows = await reads.fetch_all(
                queries.in_time_windows(namespace, windows, spec, depth, dialect=dialect)
            )
            closed = (
                await reads.fetch_all(
                    queries.closed_valid_in_windows(namespace, spec, depth, dialect=dialect)
                )
                if spec.valid_during
                else []
            )
        routed = {row[0]: 0.0 for row in rows}
        time_boost = self._time_boost
        for rowid, event_time in closed:
            in_range = any(start <= event_time < end for start, end in windows)
            routed.setdefault(rowid, 0.0 if in_range else time_boost)
        return routed


async def link_neighbours(scope: RecallScope, candidates: dict[int, Candidate]) -> None:
    """Set prev/next between pool members of one episode that are adjacent in
    the namespace's insertion order (the only neighbours scoring uses)."""
    episodes: dict[str, list[int]] = defaultdict(list)
    for rowid, candidate in candidates.items():
        episodes[candidate.event_time].append(rowid)
    pairs = [p for rowids in episodes.values() for p in pairwise(sorted(rowids))]
    adjacent = {(a, b) for a, b in pairs if b == a + 1}
    gapped = [(a, b) for a, b in pairs if b != a + 1]
    for start in range(0, len(gapped), 400):
        rows = await scope.reads.fetch_all(
            queries.adjacent_pairs(scope.namespace, gapped[start : start + 400])
        )
        adjacent.update((a, b) for a, b in rows)
    for a, b in adjacent:
        candidates[a].next_rowid = b
        candidates[b].prev_rowid = a
