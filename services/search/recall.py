"""Recall: the channels, then scoring (services.search.scoring).

A Recall over several namespaces searches each as below, in the same snapshot,
and merges the results by score. All of one Recall's reads run in one read
snapshot (ReadPool.snapshot): the check that the namespace holds every live
memory (which lets the keyword query skip the namespace join) and the counts
behind each IDF stay true for every later read. Each channel searches one
namespace with the filter applied inside its SQL, before any cut; each memory
row is still read under the namespace (services.storage.search.queries), whatever
channel proposed its rowid. Two reads that only propose rowids run beside the
snapshot: the vector cache's first pass and, on SQLite's whole index, the
rare-terms FTS5 query when the pool has an idle connection
(keyword_channel.SqliteKeywordChannel._beside).

The parts, in the order one namespace is searched (Recaller._search):
- RecallScope (recall_scope.py): the snapshot, namespace, filter and the two
  facts every channel reads under, built once per namespace of a Recall;
- the channels, each one object built once per Recaller: keyword
  (keyword_channel.py, its statistics in keyword_statistics.py) and vector
  (vector_channel.py), one class per backend chosen when the Recaller is built
  from the read pool's `dialect` (issue 21: PostgreSQL's BM25 in pg_text.py
  and HNSW scan in pg_vectors.py); the entity, link and time-range channels
  (channels.py), the same on both;
- the pool (Recaller._pool): every proposal's row (recall_rows.PoolRow) and
  exact cosine; then fusion, boosts, importance, decay and the cut
  (Recaller._rank), and the records with the current value first
  (Recaller._records).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common import clock, tracing
from services.common.config import Config, MemorySettings, PipelineV2Settings, SearchSettings
from services.common.errors import Violations
from services.common.fts import MAX_QUERY_CHARS
from services.common.memory_filter import MemoryFilterSpec, check_filter
from services.common.memory_record import MEMORY_TYPES, MemoryRecord
from services.common.metrics import RECALL_CHANNEL_SECONDS, timed
from services.common.vectors import PARTS_DTYPE, normalized_f32
from services.search import decompose
from services.search.access import AccessRecorder
from services.search.channels import EntityChannel, LinkChannel, TimeRangeChannel, link_neighbours
from services.search.current_value import newest_value_first, value_groups
from services.search.decay import DecayRanking, apply_decay
from services.search.embedder import QueryEmbedder
from services.search.graph_boost import GraphBoost
from services.search.keyword_channel import (
    KeywordChannel,
    Keywords,
    PgKeywordChannel,
    SqliteKeywordChannel,
)
from services.search.keyword_statistics import TermStatistics, bm25_idf, rare_terms
from services.search.query_intent import Classified, Intent, IntentClassifier, rule_intent
from services.search.recall_rows import PoolRow, Restatement, pool_rows_by_rowid
from services.search.recall_scope import RecallScope
from services.search.rerank import Reranker, rerank_head
from services.search.routes import (
    CAUSAL_LINK_TYPES,
    TEMPORAL_LINK_TYPES,
    speakers_named,
    time_statements,
)
from services.search.scoring import (
    Candidate,
    ScoringParams,
    boost,
    clamped,
    fuse,
    select,
    weigh_importance,
)
from services.search.text import time_windows
from services.search.vector_cache import VectorCache
from services.search.vector_channel import PgVectorChannel, SqliteVectorChannel, VectorChannel
from services.storage.db import ReadPool, Reads
from services.storage.dialect import dialect_of
from services.storage.search import queries

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "Found",
    "Keywords",
    "RecallHit",
    "RecallOutcome",
    "RecallParams",
    "RecallScope",
    "Recaller",
    "TermStatistics",
    "bm25_idf",
    "check_recall_request",
    "rare_terms",
]

MAX_LIMIT = 100
DEFAULT_LIMIT = 10


def _from_pipeline(pipeline: PipelineV2Settings) -> dict[str, Any]:
    """The RecallParams fields `memory.pipelineV2.*` sets (its keys' names and
    milliseconds there)."""
    return {
        "reranker_top_n": pipeline.rerankerTopN,
        "reranker_timeout_s": pipeline.rerankerTimeoutMs / 1000,
        "graph_enabled": pipeline.graphEnabled,
        "graph_boost_weight": pipeline.graphBoostWeight,
        "graph_boost_timeout_s": pipeline.graphBoostTimeoutMs / 1000,
    }


# The configuration's defaults (services/common/config.py writes them, and only there).
_SEARCH = SearchSettings()
_PIPELINE = _from_pipeline(PipelineV2Settings())
_DECAY = DecayRanking.configured(_SEARCH, MemorySettings())
_SEARCH_KEYS = frozenset(SearchSettings.model_fields)


@dataclass(frozen=True)
class RecallParams:
    """Recall's parameters, built from the configuration by `from_config`: a field
    named as a `search.*` key is that key; the reranker and graph fields are
    `memory.pipelineV2.*` (_from_pipeline); `decay` is DecayRanking.configured.
    Each default is its key's; vector_cache and keyword_postings_budget are not
    configured (tests and benchmarks set them)."""

    scoring: ScoringParams = field(default_factory=ScoringParams)
    channel_depth: int = _SEARCH.channel_depth  # results kept from each channel
    # Hamming first-pass size; 0 = exact float32 scan
    vector_candidates: int = _SEARCH.vector_candidates
    vector_cache: bool = True  # unfiltered first pass in memory (services.search.vector_cache)
    # the pool's cosine: whole + w x max(0, best sentence - sd x sqrt(2 ln n) - whole)
    # (issue 19; _best_parts)
    sentence_weight: float = _SEARCH.sentence_weight
    # Whole-index keyword queries whose terms match more documents than this in
    # total score their most frequent terms only where a rarer term matched
    # (a common-terms cutoff); 0 = always score every matching document.
    keyword_postings_budget: int = 10_000
    reranker_top_n: int = _PIPELINE["reranker_top_n"]
    reranker_timeout_s: float = _PIPELINE["reranker_timeout_s"]
    graph_enabled: bool = _PIPELINE["graph_enabled"]
    graph_boost_weight: float = _PIPELINE["graph_boost_weight"]
    graph_boost_timeout_s: float = _PIPELINE["graph_boost_timeout_s"]
    # seed 003 intent routing (services.search.routes)
    intent_routing: bool = _SEARCH.intent_routing
    intent_similarity_threshold: float = _SEARCH.intent_similarity_threshold
    intent_entity_weight: float = _SEARCH.intent_entity_weight
    intent_speaker_weight: float = _SEARCH.intent_speaker_weight
    intent_speaker_any_intent: bool = _SEARCH.intent_speaker_any_intent
    intent_time_statement_weight: float = _SEARCH.intent_time_statement_weight
    intent_causal_weight: float = _SEARCH.intent_causal_weight
    intent_temporal_link_weight: float = _SEARCH.intent_temporal_link_weight
    intent_causal_depth: int = _SEARCH.intent_causal_depth
    # question decomposition (issue 19; services.search.decompose): each part's
    # keyword and vector matches join the pool; 0 = off, no split
    decompose_weight: float = _SEARCH.decompose_weight
    decompose_depth: int = _SEARCH.decompose_depth  # each part's matches added from each channel
    decompose_rules: str = _SEARCH.decompose_rules  # decompose.RULE_SETS
    # set when search.decay_ranking, else None (off)
    decay: DecayRanking | None = _DECAY

    @classmethod
    def from_config(cls, config: Config) -> RecallParams:
        """The parameters the configuration sets (the one place it is read for Recall)."""
        search = config.search
        return cls(
            scoring=ScoringParams.from_settings(search),
            **{f.name: getattr(search, f.name) for f in fields(cls) if f.name in _SEARCH_KEYS},
            **_from_pipeline(config.memory.pipelineV2),
            decay=DecayRanking.configured(search, config.memory),
        )


@dataclass(frozen=True)
class RecallHit:
    memory: MemoryRecord
    score: float
    keyword_rank: int
    keyword_score: float
    vector_rank: int
    vector_score: float
    rerank_rank: int
    graph_boost: float = 0.0  # added because the memory is linked to the query's entities
    intent_boost: float = 0.0  # added by the query's intent route


@dataclass(frozen=True)
class RecallOutcome:
    hits: list[RecallHit]
    degraded: bool
    warnings: list[str]
    intent: Classified = field(
        default_factory=lambda: Classified(Intent.GENERAL, "default: no rule matched")
    )


@dataclass
class _Route:
    """One Recall's intent: given by the request, or classified once (the first
    namespace searched) from the rules, then the query vector."""

    asked: Intent
    asked_at: datetime | None
    classified: Classified | None = None


def check_recall_request(
    query: str,
    limit: int,
    spec: MemoryFilterSpec,
    min_score: float | None = None,
) -> tuple[str, int, MemoryFilterSpec, float | None]:
    """The request's query, limit, filter and min_score, checked; every bad field
    in one InvalidArgument (a parse step takes them with Violations.check_all)."""
    bad = Violations()
    if min_score is not None and not 0.0 <= min_score <= 1.0:  # NaN fails too
        bad.add("min_score", "must be between 0 and 1")
    if not query.strip():
        bad.add("query", "must not be empty")
    elif len(query) > MAX_QUERY_CHARS:
        bad.add("query", f"must be at most {MAX_QUERY_CHARS} characters")
    if limit < 0 or limit > MAX_LIMIT:
        bad.add("limit", f"must be between 1 and {MAX_LIMIT}")
    spec = check_filter(spec, MEMORY_TYPES, bad=bad)
    bad.raise_if_any()
    return query, limit or DEFAULT_LIMIT, spec, min_score


@dataclass(frozen=True)
class _Asked:
    """One Recall's question, the same for every namespace it searches: the
    query, its filter, how many to pick (`depth`: with a reranker its whole
    head) above `min_score`, the query embedding (started first), the time
    windows the query names, its parts (services.search.decompose), and what
    every namespace adds to: the warnings and the intent route."""

    query: str
    spec: MemoryFilterSpec
    depth: int
    min_score: float
    embedding: asyncio.Task[list[float] | None]
    windows: list[tuple[str, str]]
    split: list[str]
    warnings: list[str]
    route: _Route


@dataclass(frozen=True)
class Found:
    """What one namespace's channels found, the pool's input (Recaller._pool):
    the proposals (keyword matches, vector proposals, graph-linked and routed
    memories with their lift), the pool rows already read, the query's vector
    (None when the vector channel did not run) and its parts' vectors, and the
    intent settled. The defaults are a channel's empty answer (a benchmark
    pools the vector channel's proposals alone)."""

    keyword: Keywords = field(default_factory=lambda: Keywords([]))
    rows: dict[int, PoolRow] = field(default_factory=dict)
    vector_candidates: list[int] = field(default_factory=list)
    vector: list[float] | None = None
    part_vectors: list[list[float]] = field(default_factory=list)
    graph: GraphBoost = field(default_factory=lambda: GraphBoost(frozenset()))
    routed: dict[int, float] = field(default_factory=dict)
    intent: Intent = Intent.GENERAL


def _backend_channels(
    reads: ReadPool, params: RecallParams, vector_cache: VectorCache | None
) -> tuple[KeywordChannel, VectorChannel]:
    """The keyword and vector channels of the read pool's backend (its `dialect`):
    the cache follows SQLite's vector change log; Postgres scans its HNSW index."""
    depth, budget = params.channel_depth, params.keyword_postings_budget
    if dialect_of(reads).is_postgres:
        return PgKeywordChannel(depth, budget), PgVectorChannel(depth, params.vector_candidates)
    cache = vector_cache if params.vector_cache else None
    return (
        SqliteKeywordChannel(reads, depth, budget),
        SqliteVectorChannel(depth, params.vector_candidates, cache),
    )


class Recaller:
    """Recall over one read pool. Its channels are built here, once: `keyword`
    and `vector` are the pool's backend's (_backend_channels); the entity, link
    and time-range channels are the same on both. `scope` reads what one
    namespace's channels search under (tests and benchmarks call the channels
    with it directly)."""

    def __init__(
        self,
        reads: ReadPool,
        embedder: QueryEmbedder,
        params: RecallParams,
        *,
        reranker: Reranker | None = None,
        access: AccessRecorder | None = None,
        vector_cache: VectorCache | None = None,
    ) -> None:
        self._reads = reads
        self._dialect = dialect_of(reads)  # the query builders' SQL
        self._embedder = embedder
        self._params = params
        self._reranker = reranker
        self._access = access
        self.keyword, self.vector = _backend_channels(reads, params, vector_cache)
        self._graph = EntityChannel("graph", params.graph_boost_timeout_s)
        self._entity = EntityChannel("entity", params.graph_boost_timeout_s)
        self._causal = LinkChannel(
            CAUSAL_LINK_TYPES, params.intent_causal_depth, params.intent_causal_weight
        )
        # the temporal route's chain (seed 003 "temporal chain traversal"): the
        # memories written just before and after the best matches in their
        # session, one `temporal` link away: what happened around the thing asked about
        self._neighbours = LinkChannel(TEMPORAL_LINK_TYPES, 1, params.intent_temporal_link_weight)
        self._time_range = TimeRangeChannel(params.channel_depth, params.scoring.time_boost)
        self.classifier = IntentClassifier(
            embedder.provider if params.intent_routing else None,
            params.intent_similarity_threshold,
            wait_s=embedder.timeout_s,
        )

    async def recall(
        self,
        namespaces: str | Sequence[str],
        query: str,
        limit: int,
        spec: MemoryFilterSpec,
        *,
        track_access: bool = True,
        min_score: float | None = None,
        snapshot: Reads | None = None,
        intent: Intent = Intent.UNSPECIFIED,
        asked_at: datetime | None = None,
    ) -> RecallOutcome:
        """`namespaces`: one, or several searched each on its own (its own statistics)
        in one read snapshot and merged by score (the arguments are checked here too,
        for callers without a parse step); `min_score` None means the configured
        `search.min_score`. `snapshot`: the caller's read snapshot, when Recall is
        one of several reads that must see the same database (AssembleContext).
        `intent`: the caller's, or UNSPECIFIED to classify the query; `asked_at`:
        the time of asking, for relative dates (None: now)."""
        names = (namespaces,) if isinstance(namespaces, str) else tuple(namespaces)
        query, limit, spec, min_score = check_recall_request(query, limit, spec, min_score)
        if min_score is None:
            min_score = self._params.scoring.min_score
        warnings: list[str] = []
        route = _Route(intent, asked_at if asked_at is not None else clock.now())
        # with a reranker, its whole head is picked before the cut to `limit`
        # (seed 000 "Optional Reranking")
        depth = max(limit, self._params.reranker_top_n) if self._reranker else limit
        # The query embedding starts first (the longest step); the keyword and
        # graph channels read while it runs, the vector cache's scan beside them
        # (SQLite, numpy and the model release the GIL).
        embedding = asyncio.create_task(self._embedder.embed(query))
        picked: list[Candidate] = []
        records: dict[int, MemoryRecord] = {}
        vectors_used = False
        try:
            asked = _Asked(
                query,
                spec,
                depth,
                min_score,
                embedding,
                [
                    (clock.to_text(start), clock.to_text(end))
                    for start, end in time_windows(query, route.asked_at)
                ],
                (
                    decompose.parts(query, self._params.decompose_rules)
                    if self._params.decompose_weight > 0
                    else []
                ),
                warnings,
                route,
            )
            async with (
                contextlib.nullcontext(snapshot) if snapshot else self._reads.snapshot()
            ) as reads:
                for namespace in names:  # one connection: its reads run in turn anyway
                    found, rows, used = await self._search(asked, reads, namespace)
                    picked.extend(found)
                    records.update(rows)  # rowids are unique across namespaces
                    vectors_used = vectors_used or used
        except BaseException:
            embedding.cancel()
            raise
        if len(names) > 1:  # scores are comparable across namespaces (tanh, calibrated)
            picked = sorted(picked, key=lambda c: (-c.score, c.rowid))[:depth]
            warnings = list(dict.fromkeys(warnings))
        rerank_ranks = await self._rerank(query, picked, records, warnings)
        if rerank_ranks:
            picked = [picked[i] for i in rerank_ranks]
        picked = picked[:limit]
        hits = [
            RecallHit(
                memory=records[c.rowid],
                score=c.score,
                keyword_rank=c.keyword_rank,
                keyword_score=c.keyword_shown,
                vector_rank=c.vector_rank,
                vector_score=clamped(c.cosine or 0.0),
                rerank_rank=position + 1 if rerank_ranks else 0,
                graph_boost=c.graph_boost,
                intent_boost=c.intent_boost,
            )
            for position, c in enumerate(picked)
        ]
        if self._access is not None and hits and track_access:
            by_namespace: dict[str, list[str]] = defaultdict(list)
            for hit in hits:
                by_namespace[hit.memory.namespace].append(hit.memory.id)
            for namespace, memory_ids in by_namespace.items():
                self._access.record(namespace, memory_ids)
        degraded = self._embedder.enabled and not vectors_used
        classified = route.classified or Classified(Intent.GENERAL, "default: no rule matched")
        return RecallOutcome(hits, degraded, warnings, classified)

    async def scope(self, reads: Reads, namespace: str, spec: MemoryFilterSpec) -> RecallScope:
        """The namespace's scope in this snapshot: whether the unfiltered
        namespace holds every live memory (the keyword channel's question: only
        SQLite's asks it) and the vector index's model, read together."""
        whole, index = await asyncio.gather(
            self.keyword.whole_index(reads, namespace, spec),
            reads.fetch_one(queries.index_model()),
        )
        return RecallScope(reads, namespace, spec, whole, index[0] if index else "", self._dialect)

    async def _search(
        self, asked: _Asked, reads: Reads, namespace: str
    ) -> tuple[list[Candidate], dict[int, MemoryRecord], bool]:
        """Every read of one namespace, on one snapshot: (picked candidates,
        their records by rowid, whether the vector channel ran)."""
        part_embeddings = [asyncio.create_task(self._embedder.embed(p)) for p in asked.split]
        # what the request or the rules already say; the vector decides the rest
        early = self._early_intent(asked.route, asked.query, bool(asked.windows))
        spec = asked.spec
        if asked.windows and spec.as_of is None and early not in (None, Intent.GENERAL):
            # a routed question naming a past range also reads what was true then
            spec = replace(spec, valid_during=tuple(asked.windows))
        try:
            scope = await self.scope(reads, namespace, spec)
            found = await self._read(scope, asked, part_embeddings, early)
        except BaseException:
            for task in part_embeddings:
                task.cancel()
            # the snapshot ends after these, so none may still be reading
            await asyncio.gather(*part_embeddings, return_exceptions=True)
            raise
        if found.graph.timed_out:
            asked.warnings.append("graph boost timed out; partial graph results used")
        elif found.graph.failed:
            asked.warnings.append("graph boost failed; results without it")
        pool = await self._pool(scope, found)
        await self._lift(scope, asked.query, found.intent, pool)
        picked = await self._rank(scope, asked, found, pool)
        picked, records = await self._records(scope, asked.query, picked)
        return picked, records, found.vector is not None

    async def _read(
        self,
        scope: RecallScope,
        asked: _Asked,
        part_embeddings: list[asyncio.Task[list[float] | None]],
        early: Intent | None,
    ) -> Found:
        """Every channel's read of one namespace, as much of it at once as the
        order allows: the keyword and graph channels start before the query
        vector is awaited, the vector proposals' pool rows are read while the
        keyword channel runs; the routes follow from the intent."""
        keyword_task: asyncio.Task[tuple[Keywords, dict[int, PoolRow]]] | None = None
        graph_task: asyncio.Task[GraphBoost] | None = None
        entity_task: asyncio.Task[GraphBoost] | None = None
        rows_task: asyncio.Task[dict[int, PoolRow]] | None = None
        part_scans: asyncio.Task[tuple[list[list[float]], list[list[int]]]] | None = None
        query = asked.query
        part_vectors: list[list[float]] = []
        try:
            keyword_task = asyncio.create_task(self._keyword_with_rows(scope, query))
            graph_task = asyncio.create_task(self._graph_boost(scope, query))
            # with the graph boost on, its lookup is the entity route's too
            by_graph = self._params.graph_enabled
            if early is Intent.ENTITY and not by_graph:
                entity_task = asyncio.create_task(self._entity.linked(scope, query))
            vector, candidates = await self._vector_channel(scope, asked)
            if asked.split:  # the parts' vector proposals, beside the keyword channel
                part_scans = asyncio.create_task(
                    self._part_candidates(scope, part_embeddings, vector is not None)
                )
            if candidates:  # their pool rows, read while the keyword channel runs
                rows_task = asyncio.create_task(self._pool_rows(scope, candidates))
            intent = await self._intent(asked.route, query, vector, bool(asked.windows))
            if intent is Intent.ENTITY and entity_task is None and not by_graph:
                entity_task = asyncio.create_task(self._entity.linked(scope, query))
            keyword, keyword_rows = await keyword_task
            if rows_task is not None:
                keyword_rows = keyword_rows | await rows_task
            if asked.split:  # a question about several things: each part's matches join
                keyword, candidates, part_vectors = await self._parts(
                    scope, asked.split, part_scans, keyword, candidates
                )
            graph = await graph_task
            entities = await entity_task if entity_task is not None else None
            if intent is Intent.ENTITY and by_graph:
                entities = graph
            routed = await self._routed(scope, asked, intent, entities, keyword, candidates)
        except BaseException:
            tasks = [
                t
                for t in (keyword_task, graph_task, entity_task, rows_task, part_scans)
                if t is not None
            ]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return Found(keyword, keyword_rows, candidates, vector, part_vectors, graph, routed, intent)

    async def _routed(
        self,
        scope: RecallScope,
        asked: _Asked,
        intent: Intent,
        entities: GraphBoost | None,
        keyword: Keywords,
        candidates: list[int],
    ) -> dict[int, float]:
        """The intent route's memories and their lift: the entities' (entity),
        what causal links reach from the best matches, the lift halving per hop
        (causal), the best matches' session neighbours and the memories of the
        range the query names (temporal)."""
        if entities is not None:
            weight = self._params.intent_entity_weight
            return {rowid: weight for rowid in sorted(entities.rowids)}
        if intent is Intent.CAUSAL:
            return await self._causal.reach(scope, keyword.ranked, candidates)
        if intent is not Intent.TEMPORAL:
            return {}
        routed = await self._neighbours.reach(scope, keyword.ranked, candidates)
        if asked.windows:
            in_range = await self._time_range.in_range(scope, asked.windows)
            routed = in_range | routed  # a neighbour's lift wins over the range's 0
        return routed

    async def _rank(
        self, scope: RecallScope, asked: _Asked, found: Found, pool: list[Candidate]
    ) -> list[Candidate]:
        """The pool fused, boosted, weighed by importance and decay, and cut
        (services.search.scoring)."""
        params = self._params.scoring
        confidence = fuse(pool, params, found.vector is not None, found.keyword.coverage)
        boost(pool, params, asked.windows)
        if params.importance_weight and pool:
            rows = await scope.reads.fetch_all(
                queries.importance_by_rowid(
                    scope.namespace, [c.rowid for c in pool], dialect=scope.dialect
                )
            )
            importance = {rowid: value for rowid, value in rows}
            weigh_importance(pool, importance, params.importance_weight)
        if self._params.decay is not None:
            await apply_decay(
                scope.reads, scope.namespace, pool, self._params.decay, dialect=scope.dialect
            )
        return select(pool, asked.depth, params.diversity_penalty, asked.min_score, confidence)

    async def _records(
        self, scope: RecallScope, query: str, picked: list[Candidate]
    ) -> tuple[list[Candidate], dict[int, MemoryRecord]]:
        """The picked memories' records (those still live under the scope's
        filter), a value's newest statement first (services.search.current_value)."""
        reads, namespace, spec = scope.reads, scope.namespace, scope.spec
        records = {
            row["rowid"]: MemoryRecord.from_row(row)
            for row in await reads.fetch_all(
                queries.memories_by_rowid(
                    namespace, [c.rowid for c in picked], spec, dialect=scope.dialect
                )
            )
        }
        picked = [c for c in picked if c.rowid in records]
        if not spec.valid_during:  # a named range reads what was true then: its boost decides
            groups = value_groups(picked, records, query)
            if groups:
                ids = [records[picked[i].rowid].id for places in groups for i in places]
                restated: dict[str, list[tuple[str, str]]] = {}
                for row in await reads.fetch_all(queries.restatements(namespace, ids)):
                    event = Restatement._make(row)
                    restated.setdefault(event.memory_id, []).append(
                        (event.metadata, event.recorded_at)
                    )
                picked = newest_value_first(picked, records, groups, restated, spec.as_of)
        return picked, records

    async def _parts(
        self,
        scope: RecallScope,
        split: list[str],
        part_scans: asyncio.Task[tuple[list[list[float]], list[list[int]]]] | None,
        keyword: Keywords,
        candidates: list[int],
    ) -> tuple[Keywords, list[int], list[list[float]]]:
        """The question's parts searched by the same channels (no SQL of their
        own): the keyword list and vector proposals with each part's best added
        (services.search.decompose), and the parts' vectors for the pool's cosine.
        The parts' keyword channels use the statistics the question's read
        (TermStatistics: only a term the question lacks is counted) and skip
        the coverage: the whole query's stays the query's confidence.
        `part_scans`: the parts' vectors and vector proposals, started beside the
        question's keyword channel (_part_candidates)."""
        with timed(RECALL_CHANNEL_SECONDS, "parts"), tracing.span("recall.parts"):
            known = keyword.statistics
            part_keywords = await asyncio.gather(
                *(self.keyword.ranked(scope, p, known, with_coverage=False) for p in split)
            )
            vectors, part_candidates = await part_scans if part_scans else ([], [])
        depth, weight = self._params.decompose_depth, self._params.decompose_weight
        ranked = decompose.merged_keyword(
            keyword.ranked, [k.ranked for k in part_keywords], weight, depth
        )
        merged = decompose.merged_candidates(candidates, part_candidates, depth)
        return Keywords(ranked, keyword.coverage), merged, vectors

    async def _part_candidates(
        self,
        scope: RecallScope,
        embeddings: list[asyncio.Task[list[float] | None]],
        scan: bool,
    ) -> tuple[list[list[float]], list[list[int]]]:
        """(the parts' vectors, each one's vector proposals), scanned in turn;
        none without `scan` (the vector channel did not run: nor do the parts')."""
        vectors = [v for v in await asyncio.gather(*embeddings) if v is not None]
        if not scan:
            return [], []
        return vectors, [await self.vector.nearest(scope, _query_f32(v)) for v in vectors]

    def _early_intent(self, route: _Route, query: str, names_time: bool) -> Intent | None:
        """The intent known before the query vector: the request's, a rule's, or
        the one an earlier namespace of this Recall settled; None: not yet."""
        if not self._params.intent_routing and route.asked is Intent.UNSPECIFIED:
            return Intent.GENERAL
        if route.classified is None and route.asked is not Intent.UNSPECIFIED:
            route.classified = Classified(route.asked, "request")
        if route.classified is None:
            route.classified = rule_intent(query, names_time)
        return route.classified.intent if route.classified else None

    async def _intent(
        self, route: _Route, query: str, vector: list[float] | None, names_time: bool
    ) -> Intent:
        """The query's intent, settled once per Recall (the rules and the
        example similarity, services.search.query_intent)."""
        if route.classified is None:
            if self._params.intent_routing:
                if vector is not None:
                    await self.classifier.settle()
                route.classified = self.classifier.classify(query, vector, names_time)
            else:
                route.classified = Classified(Intent.GENERAL, "default: routing off")
        return route.classified.intent

    async def _lift(
        self, scope: RecallScope, query: str, intent: Intent, pool: list[Candidate]
    ) -> None:
        """The in-pool part of a route: memories of the speaker the query names or
        addresses (every intent, general included, unless `intent_speaker_any_intent`
        is off: entity only), memories that state a time (temporal)."""
        speakers = intent is Intent.ENTITY or self._params.intent_speaker_any_intent
        if speakers and self._params.intent_speaker_weight > 0:
            named = speakers_named(query, pool)
            for c in pool:
                if c.who and c.who.lower() in named:
                    c.intent_boost += self._params.intent_speaker_weight
        if intent is Intent.TEMPORAL and self._params.intent_time_statement_weight > 0:
            stating = await time_statements(
                scope.reads, scope.namespace, pool, dialect=scope.dialect
            )
            for c in pool:
                if c.rowid in stating:
                    c.intent_boost += self._params.intent_time_statement_weight

    async def _graph_boost(self, scope: RecallScope, query: str) -> GraphBoost:
        """The graph channel: memories linked to the query's entities (when enabled)."""
        if not self._params.graph_enabled:
            return GraphBoost(frozenset())
        return await self._graph.linked(scope, query)

    async def _keyword_with_rows(
        self, scope: RecallScope, query: str
    ) -> tuple[Keywords, dict[int, PoolRow]]:
        """The keyword channel, then its pool rows (fetched while the query is
        still being embedded)."""
        with timed(RECALL_CHANNEL_SECONDS, "keyword"), tracing.span("recall.keyword"):
            keyword = await self.keyword.ranked(scope, query)
            if not keyword.ranked:
                return keyword, {}
            rowids = [r for r, _ in keyword.ranked]
            rows = await scope.reads.fetch_all(
                queries.pool_rows(
                    scope.namespace, rowids, scope.model, scope.spec, dialect=scope.dialect
                )
            )
            return keyword, pool_rows_by_rowid(rows)

    async def _vector_channel(
        self, scope: RecallScope, asked: _Asked
    ) -> tuple[list[float] | None, list[int]]:
        """(query vector, candidate rowids); no vector when the channel cannot
        run, with the reason in the Recall's warnings."""
        vector = await asked.embedding
        if vector is None:
            if self._embedder.enabled:
                asked.warnings.append(self._embedder.last_error or "query embedding unavailable")
            return None, []
        if scope.model != self._embedder.provider.model:
            asked.warnings.append(
                f"vector index holds {scope.model or 'no'} vectors, queries use "
                f"{self._embedder.provider.model}; keywords only"
            )
            return None, []
        with timed(RECALL_CHANNEL_SECONDS, "vector"), tracing.span("recall.vector"):
            candidates = await self.vector.nearest(scope, _query_f32(vector))
        return vector, candidates

    async def _pool(self, scope: RecallScope, found: Found) -> list[Candidate]:
        """Keyword top ∪ vector top (by exact cosine) ∪ graph-linked ∪ routed
        memories, with what scoring needs (`found.rows`: pool rows already read).
        A proposed rowid that is not a live memory of the namespace has no row
        and leaves the pool here."""
        keyword, vector_candidates = found.keyword.ranked, found.vector_candidates
        graph, routed = found.graph.rowids, found.routed
        wanted = list(
            dict.fromkeys([r for r, _ in keyword] + vector_candidates + sorted(graph) + [*routed])
        )
        if not wanted:
            return []
        by_rowid = dict(found.rows)
        missing = [r for r in wanted if r not in by_rowid]
        if missing:
            by_rowid.update(await self._pool_rows(scope, missing))
        rows = [by_rowid[r] for r in wanted if r in by_rowid]
        cosine = (
            self._cosines(rows, found.vector, found.part_vectors)
            if found.vector is not None
            else {}
        )
        depth = self._params.channel_depth
        vector_top = sorted(
            (r for r in vector_candidates if r in cosine), key=lambda r: -cosine[r]
        )[:depth]
        candidates: dict[int, Candidate] = {}
        for rank, (rowid, score) in enumerate(keyword, start=1):
            candidates[rowid] = Candidate(rowid, keyword_rank=rank, keyword_score=score)
        for rank, rowid in enumerate(vector_top, start=1):
            candidates.setdefault(rowid, Candidate(rowid)).vector_rank = rank
        weight = self._params.graph_boost_weight
        for rowid in graph:
            candidates.setdefault(rowid, Candidate(rowid)).graph_boost = weight
        for rank, (rowid, lift) in enumerate(routed.items(), start=1):
            candidate = candidates.setdefault(rowid, Candidate(rowid))
            candidate.route_rank, candidate.intent_boost = rank, lift
        for rowid, candidate in list(candidates.items()):
            pooled = by_rowid.get(rowid)
            if pooled is None:  # not a live memory of the namespace
                del candidates[rowid]
                continue
            _, event_time, _, who, _ = pooled
            candidate.cosine = cosine.get(rowid)
            candidate.event_time = event_time
            candidate.who = who or ""
        await link_neighbours(scope, candidates)
        return list(candidates.values())

    def _cosines(
        self, rows: list[PoolRow], vector: list[float], part_vectors: Sequence[list[float]]
    ) -> dict[int, float]:
        """rowid -> the pool's cosine of the embedded rows: the exact one, raised
        by the best sentence (_best_parts) and the question's parts
        (services.search.decompose.part_cosines) when those are on."""
        cosine: dict[int, float] = {}
        rowids: list[int] = []
        blobs: list[bytes] = []
        with_parts: list[tuple[int, bytes]] = []  # (rowid, sentence vectors)
        for rowid, _, exact, _, parts in rows:
            if exact is not None:
                rowids.append(rowid)
                blobs.append(exact)
                if parts:
                    with_parts.append((rowid, parts))
        if not rowids:
            return cosine
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32)
        matrix = matrix.reshape(len(rowids), -1)
        query = np.frombuffer(_query_f32(vector), dtype=np.float32)
        for rowid, value in zip(rowids, (matrix @ query).tolist(), strict=True):
            cosine[rowid] = float(value)
        if self._params.sentence_weight > 0:
            cosine.update(_best_parts(with_parts, query, cosine, self._params.sentence_weight))
        if part_vectors:
            queries_f32 = [np.frombuffer(_query_f32(v), dtype=np.float32) for v in part_vectors]
            weight = self._params.decompose_weight
            cosine.update(decompose.part_cosines(cosine, rowids, matrix, queries_f32, weight))
        return cosine

    async def _pool_rows(self, scope: RecallScope, rowids: list[int]) -> dict[int, PoolRow]:
        """Pool rows (queries.pool_rows) of the live memories of the namespace
        among `rowids`, by rowid."""
        query = queries.pool_rows(
            scope.namespace,
            rowids,
            scope.model,
            scope.spec,
            dialect=scope.dialect,
            parts=self._params.sentence_weight > 0,
        )
        rows = await scope.reads.fetch_all(query)
        return pool_rows_by_rowid(rows)

    async def _rerank(
        self,
        query: str,
        picked: Sequence[Candidate],
        records: dict[int, MemoryRecord],
        warnings: list[str],
    ) -> list[int] | None:
        if self._reranker is None or len(picked) < 2:
            return None
        documents = [records[c.rowid].content for c in picked]
        with timed(RECALL_CHANNEL_SECONDS, "rerank"), tracing.span("recall.rerank"):
            head, warning = await rerank_head(
                self._reranker,
                query,
                documents,
                self._params.reranker_top_n,
                self._params.reranker_timeout_s,
            )
        if warning:
            warnings.append(warning)
        if head is None:
            return None
        return head + list(range(len(head), len(picked)))


def _best_parts(
    with_parts: Sequence[tuple[int, bytes]],
    query: npt.NDArray[np.float32],
    cosine: dict[int, float],
    weight: float,
) -> dict[int, float]:
    """rowid -> whole cosine + weight x max(0, best sentence cosine - sd x
    sqrt(2 ln n) - whole) for the pool rows that hold sentence vectors
    (`with_parts`: (rowid, parts) in pool order; float16, each of the whole
    vector's dimensions), n its sentences, sd the spread of every sentence
    cosine in the pool: a turn whose one answering
    sentence is lost in its whole vector still meets the question (issue 19),
    while a long turn gains nothing for the maximum that many sentences reach by
    chance (about sd x sqrt(2 ln n) above their mean). The plain maximum and
    min-max scaling within the pool gained nothing once cross-validated
    (bench/README.md, "Sentence vectors through Recall"). One product over all parts."""
    if not with_parts:
        return {}
    dims = len(query)
    blobs = [bytes(blob) for _, blob in with_parts]
    counts = np.array([len(b) // (2 * dims) for b in blobs])
    parts = np.frombuffer(b"".join(blobs), dtype=PARTS_DTYPE).reshape(-1, dims)
    scores = parts.astype(np.float32) @ query
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    chance = float(scores.std()) * np.sqrt(2.0 * np.log(counts))
    best = (np.maximum.reduceat(scores, starts) - chance).tolist()
    return {
        rowid: cosine[rowid] + weight * max(0.0, value - cosine[rowid])
        for (rowid, _), value in zip(with_parts, best, strict=True)
    }


def _query_f32(vector: Sequence[float]) -> bytes:
    blob = normalized_f32(vector)
    if blob is None:
        raise ValueError("the embedding provider returned a zero or non-finite vector")
    return blob
