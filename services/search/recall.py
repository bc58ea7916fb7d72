"""Recall: the keyword and vector channels, then scoring (services.search.scoring).

A Recall over several namespaces searches each as below, in the same snapshot,
and merges the results by score. Both channels search one namespace with the filter applied inside their SQL,
before any cut. All of one Recall's reads run in one read snapshot
(ReadPool.snapshot): the check that the namespace holds every live memory (which
lets the keyword query skip the namespace join) and the counts behind each IDF
stay true for every later read. Each memory row is still read under the namespace
(services.search.queries), whatever channel proposed its rowid; two reads that
only propose rowids run beside the snapshot: the vector cache's first pass and,
on SQLite's whole index, the rare-terms FTS5 query when the pool has an idle
connection (Recaller._beside). Keyword scores use BM25 with the namespace's own statistics:
FTS5 computes IDF over the whole index, which would let other tenants' data
shape this tenant's ranking, so each term's IDF is recomputed over the
searched collection (namespace + filter).

On PostgreSQL (issue 21; the read pool's `dialect`), the keyword channel is
services/search/pg_text.py's BM25, computed in one query with the searched
collection's statistics (what the SQLite path rescales FTS5's to), and the
vector channel is services/search/pg_vectors.py's HNSW scan with the namespace
and filter inside it, instead of the in-process cache: the scan is faster than
the cache's first pass plus rescore at 100k (bench/README.md "Vectors on
Postgres": p50 6.4 against 12.8 ms, recall@10 0.976 against 0.972), and
Postgres has no change log for a cache to follow. Every other read is the same
query builder with the pool's dialect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common import clock, tracing
from services.common.config import Config, MemorySettings, PipelineV2Settings, SearchSettings
from services.common.db import ReadPool, Reads
from services.common.errors import Violations
from services.common.fts import MAX_QUERY_CHARS, all_of, any_of, quoted
from services.common.memory_filter import MemoryFilterSpec, check_filter
from services.common.memory_record import MEMORY_TYPES, MemoryRecord
from services.common.metrics import RECALL_CHANNEL_SECONDS, timed
from services.common.vectors import PARTS_DTYPE, normalized_f32
from services.search import decompose, pg_text, pg_vectors, queries
from services.search.access import AccessRecorder
from services.search.current_value import newest_value_first, value_groups
from services.search.decay import DecayRanking, apply_decay
from services.search.embedder import QueryEmbedder
from services.search.graph_boost import GraphBoost, graph_boost
from services.search.keyword_statistics import (
    IndexStatistics,
    TermStatistics,
    bm25_idf,
    collection_statistics,
    rare_terms,
)
from services.search.query_intent import Classified, Intent, IntentClassifier, rule_intent
from services.search.recall_rows import Bm25Row, KeptStatistics, PoolRow, Restatement
from services.search.rerank import Reranker, rerank_head
from services.search.routes import (
    CAUSAL_LINK_TYPES,
    CAUSAL_SEEDS,
    TEMPORAL_LINK_TYPES,
    linked_reach,
    speakers_named,
    time_statements,
)
from services.search.scoring import (
    Candidate,
    ScoringParams,
    boost,
    clamped,
    coverage,
    coverage_idf,
    fuse,
    select,
    weigh_importance,
)
from services.search.text import keyword_terms, time_windows
from services.search.vector_cache import VectorCache

MAX_LIMIT = 100
DEFAULT_LIMIT = 10
_NO_FILTER = MemoryFilterSpec()


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
class Keywords:
    """The keyword channel's answer: (rowid, BM25) best first, the share of
    the query's IDF mass the best match holds (services.search.scoring.coverage),
    and the statistics it read (none when the query had no term)."""

    ranked: list[tuple[int, float]]
    coverage: float = 0.0
    statistics: TermStatistics | None = None


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
    bad: Violations | None = None,
    min_score: float | None = None,
) -> tuple[str, int, MemoryFilterSpec, float | None]:
    """The request's query, limit, filter and min_score, checked; every bad field
    (with those already in `bad`) in one InvalidArgument."""
    bad = bad if bad is not None else Violations()
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


class Recaller:
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
        # "sqlite" or "postgres": which channels run, and the query builders' SQL
        self._dialect = reads.dialect
        self._embedder = embedder
        self._params = params
        self._reranker = reranker
        self._access = access
        # the cache follows SQLite's vector change log; Postgres scans its HNSW index
        self._vector_cache = (
            vector_cache if params.vector_cache and self._dialect == "sqlite" else None
        )
        self._index_statistics = IndexStatistics()
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
        bad: Violations | None = None,
        snapshot: Reads | None = None,
        intent: Intent = Intent.UNSPECIFIED,
        asked_at: datetime | None = None,
    ) -> RecallOutcome:
        """`namespaces`: one, or several searched each on its own (its own statistics)
        in one read snapshot and merged by score. `bad` holds what the caller already
        found wrong with the request; `min_score` None means the configured
        `search.min_score`. `snapshot`: the caller's read snapshot, when Recall is
        one of several reads that must see the same database (AssembleContext).
        `intent`: the caller's, or UNSPECIFIED to classify the query; `asked_at`:
        the time of asking, for relative dates (None: now)."""
        names = (namespaces,) if isinstance(namespaces, str) else tuple(namespaces)
        query, limit, spec, min_score = check_recall_request(query, limit, spec, bad, min_score)
        if min_score is None:
            min_score = self._params.scoring.min_score
        warnings: list[str] = []
        route = _Route(intent, asked_at if asked_at is not None else clock.now())
        # The query embedding starts first (the longest step); the keyword and
        # graph channels read while it runs, the vector cache's scan beside them
        # (SQLite, numpy and the model release the GIL).
        embedding = asyncio.create_task(self._embedder.embed(query))
        picked: list[Candidate] = []
        records: dict[int, MemoryRecord] = {}
        vectors_used = False
        try:
            async with (
                contextlib.nullcontext(snapshot) if snapshot else self._reads.snapshot()
            ) as reads:
                # with a reranker, its whole head is picked before the cut to `limit`
                # (seed 000 "Optional Reranking")
                depth = max(limit, self._params.reranker_top_n) if self._reranker else limit
                for namespace in names:  # one connection: its reads run in turn anyway
                    found, rows, used = await self._search(
                        reads, namespace, query, depth, min_score, spec, embedding, warnings, route
                    )
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

    async def _search(
        self,
        reads: Reads,
        namespace: str,
        query: str,
        limit: int,
        min_score: float,
        spec: MemoryFilterSpec,
        embedding: asyncio.Task[list[float] | None],
        warnings: list[str],
        route: _Route,
    ) -> tuple[list[Candidate], dict[int, MemoryRecord], bool]:
        """Every read of one Recall, on one snapshot: (picked candidates, their
        records by rowid, whether the vector channel ran)."""
        keyword_task: asyncio.Task[tuple[Keywords, dict[int, PoolRow]]] | None = None
        graph_task: asyncio.Task[GraphBoost] | None = None
        entity_task: asyncio.Task[GraphBoost] | None = None
        rows_task: asyncio.Task[dict[int, PoolRow]] | None = None
        split = (
            decompose.parts(query, self._params.decompose_rules)
            if self._params.decompose_weight > 0
            else []
        )
        part_embeddings = [asyncio.create_task(self._embedder.embed(p)) for p in split]
        part_vectors: list[list[float]] = []
        part_scans: asyncio.Task[tuple[list[list[float]], list[list[int]]]] | None = None
        windows = [
            (clock.to_text(start), clock.to_text(end))
            for start, end in time_windows(query, route.asked_at)
        ]
        # what the request or the rules already say; the vector decides the rest
        early = self._early_intent(route, query, bool(windows))
        if windows and spec.as_of is None and early not in (None, Intent.GENERAL):
            # a routed question naming a past range also reads what was true then
            spec = replace(spec, valid_during=tuple(windows))
        try:
            whole_index, index_model = await self._index_facts(reads, namespace, spec)
            keyword_task = asyncio.create_task(
                self._keyword_with_rows(reads, namespace, query, spec, whole_index, index_model)
            )
            graph_task = asyncio.create_task(self._graph(reads, namespace, query, spec))
            # with the graph boost on, its lookup is the entity route's too
            by_graph = self._params.graph_enabled
            if early is Intent.ENTITY and not by_graph:
                entity_task = asyncio.create_task(self._entities(reads, namespace, query, spec))
            vector, candidates = await self._vector_channel(
                reads, namespace, embedding, index_model, spec, whole_index, warnings
            )
            if split:  # the parts' vector proposals, beside the keyword channel
                part_scans = asyncio.create_task(
                    self._part_candidates(
                        reads, namespace, part_embeddings, vector is not None, spec, whole_index
                    )
                )
            if candidates:  # their pool rows, read while the keyword channel runs
                rows_task = asyncio.create_task(
                    self._pool_rows(reads, namespace, candidates, index_model, spec)
                )
            intent = await self._intent(route, query, vector, bool(windows))
            if intent is Intent.ENTITY and entity_task is None and not by_graph:
                entity_task = asyncio.create_task(self._entities(reads, namespace, query, spec))
            keyword, keyword_rows = await keyword_task
            if rows_task is not None:
                keyword_rows = keyword_rows | await rows_task
            if split:  # a question about several things: each part's matches join
                keyword, candidates, part_vectors = await self._parts(
                    reads,
                    namespace,
                    split,
                    part_scans,
                    keyword,
                    candidates,
                    spec,
                    whole_index,
                )
            graph = await graph_task
            entities = await entity_task if entity_task is not None else None
            if intent is Intent.ENTITY and by_graph:
                entities = graph
            keyword_coverage = keyword.coverage
            routed: dict[int, float] = {}
            if entities is not None:
                weight = self._params.intent_entity_weight
                routed = {rowid: weight for rowid in sorted(entities.rowids)}
            elif intent is Intent.CAUSAL:
                routed = await self._causal(reads, namespace, keyword.ranked, candidates, spec)
            elif intent is Intent.TEMPORAL:
                routed = await self._session_neighbours(
                    reads, namespace, keyword.ranked, candidates, spec
                )
                if windows:
                    in_range = await self._in_windows(reads, namespace, windows, spec)
                    routed = in_range | routed  # a neighbour's lift wins over the range's 0
        except BaseException:
            tasks: list[asyncio.Task[Any]] = [*part_embeddings]
            tasks += [
                t
                for t in (keyword_task, graph_task, entity_task, rows_task, part_scans)
                if t is not None
            ]
            for task in tasks:
                task.cancel()
            # the snapshot ends after these, so none may still be reading
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if graph.timed_out:
            warnings.append("graph boost timed out; partial graph results used")
        elif graph.failed:
            warnings.append("graph boost failed; results without it")
        vectors_used = vector is not None
        pool = await self._pool(
            namespace,
            keyword.ranked,
            candidates,
            vector,
            index_model,
            graph.rowids,
            keyword_rows,
            reads,
            spec=spec,
            routed=routed,
            part_vectors=part_vectors,
        )
        await self._lift(reads, namespace, query, intent, pool)
        params = self._params.scoring
        confidence = fuse(pool, params, vectors_used, keyword_coverage)
        boost(pool, params, windows)
        if params.importance_weight and pool:
            rows = await reads.fetch_all(
                queries.importance_by_rowid(
                    namespace, [c.rowid for c in pool], dialect=self._dialect
                )
            )
            importance = {rowid: value for rowid, value in rows}
            weigh_importance(pool, importance, params.importance_weight)
        if self._params.decay is not None:
            await apply_decay(reads, namespace, pool, self._params.decay, dialect=self._dialect)
        picked = select(pool, limit, params.diversity_penalty, min_score, confidence)
        records = {
            row["rowid"]: MemoryRecord.from_row(row)
            for row in await reads.fetch_all(
                queries.memories_by_rowid(
                    namespace, [c.rowid for c in picked], spec, dialect=self._dialect
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
        return picked, records, vectors_used

    async def _parts(
        self,
        reads: Reads,
        namespace: str,
        split: list[str],
        part_scans: asyncio.Task[tuple[list[list[float]], list[list[int]]]] | None,
        keyword: Keywords,
        candidates: list[int],
        spec: MemoryFilterSpec,
        whole_index: bool,
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
                *(
                    self._keyword_channel(
                        reads, namespace, p, spec, whole_index, known, with_coverage=False
                    )
                    for p in split
                )
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
        reads: Reads,
        namespace: str,
        embeddings: list[asyncio.Task[list[float] | None]],
        scan: bool,
        spec: MemoryFilterSpec,
        whole_index: bool,
    ) -> tuple[list[list[float]], list[list[int]]]:
        """(the parts' vectors, each one's vector proposals), scanned in turn;
        none without `scan` (the vector channel did not run: nor do the parts')."""
        vectors = [v for v in await asyncio.gather(*embeddings) if v is not None]
        if not scan:
            return [], []
        model = self._embedder.provider.model
        return vectors, [
            await self._vector_candidates(namespace, v, model, spec, whole_index, reads)
            for v in vectors
        ]

    async def _index_facts(
        self, reads: Reads, namespace: str, spec: MemoryFilterSpec
    ) -> tuple[bool, str]:
        """(whether the unfiltered namespace holds every live memory, the vector
        index's model). The first only matters to SQLite's channels (FTS5's own
        statistics, the plain vector scan): Postgres's are per namespace."""
        if self._dialect == "postgres":
            index = await reads.fetch_one(queries.index_model())
            return False, index[0] if index else ""
        whole, index = await asyncio.gather(
            reads.fetch_one(queries.namespace_is_whole_index(namespace)),
            reads.fetch_one(queries.index_model()),
        )
        return spec.is_empty() and bool(whole[0]), index[0] if index else ""

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

    async def _entities(
        self,
        reads: Reads,
        namespace: str,
        query: str,
        spec: MemoryFilterSpec,
        channel: str = "entity",
    ) -> GraphBoost:
        """Memories mentioning the entities the query names: the entity route, and
        the graph channel (`channel` names it in metrics and traces)."""
        with timed(RECALL_CHANNEL_SECONDS, channel), tracing.span(f"recall.{channel}"):
            return await graph_boost(
                reads,
                namespace,
                query,
                spec,
                self._params.graph_boost_timeout_s,
                dialect=self._dialect,
            )

    async def _causal(
        self,
        reads: Reads,
        namespace: str,
        keyword: list[tuple[int, float]],
        vector_candidates: list[int],
        spec: MemoryFilterSpec,
    ) -> dict[int, float]:
        """The causal route: what causal links reach from the best matches, the
        lift halving per hop."""
        return await self._reach(
            reads,
            namespace,
            keyword,
            vector_candidates,
            spec,
            CAUSAL_LINK_TYPES,
            self._params.intent_causal_depth,
            self._params.intent_causal_weight,
        )

    async def _session_neighbours(
        self,
        reads: Reads,
        namespace: str,
        keyword: list[tuple[int, float]],
        vector_candidates: list[int],
        spec: MemoryFilterSpec,
    ) -> dict[int, float]:
        """The temporal route's chain (seed 003 "temporal chain traversal"): the
        memories written just before and after the best matches in their session,
        one `temporal` link away: what happened around the thing asked about."""
        return await self._reach(
            reads,
            namespace,
            keyword,
            vector_candidates,
            spec,
            TEMPORAL_LINK_TYPES,
            1,
            self._params.intent_temporal_link_weight,
        )

    async def _reach(
        self,
        reads: Reads,
        namespace: str,
        keyword: list[tuple[int, float]],
        vector_candidates: list[int],
        spec: MemoryFilterSpec,
        link_types: tuple[str, ...],
        depth: int,
        weight: float,
    ) -> dict[int, float]:
        """What links of `link_types` reach from the best keyword and vector
        matches within `depth` hops, each lifted by `weight` halved per hop."""
        seeds = [r for r, _ in keyword[:CAUSAL_SEEDS]] + vector_candidates[:CAUSAL_SEEDS]
        if not seeds or weight <= 0:
            return {}
        channel = link_types[0]
        with timed(RECALL_CHANNEL_SECONDS, channel), tracing.span(f"recall.{channel}"):
            at = spec.as_of or clock.now_text()
            reached = await linked_reach(
                reads, namespace, seeds, link_types, spec, depth, at, dialect=self._dialect
            )
        return {rowid: weight / 2 ** (hop - 1) for rowid, hop in reached.items()}

    async def _in_windows(
        self, reads: Reads, namespace: str, windows: list[tuple[str, str]], spec: MemoryFilterSpec
    ) -> dict[int, float]:
        """The temporal route's list: memories of the range the query names, latest
        first (their lift is the time boost every memory in range gets), then
        facts no longer valid that were during the range (a superseded value, a
        short-term fact since ended), lifted by the same boost when their event
        time lies outside the range."""
        depth = self._params.channel_depth
        with timed(RECALL_CHANNEL_SECONDS, "time_range"), tracing.span("recall.time_range"):
            dialect = self._dialect
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
        time_boost = self._params.scoring.time_boost
        for rowid, event_time in closed:
            in_range = any(start <= event_time < end for start, end in windows)
            routed.setdefault(rowid, 0.0 if in_range else time_boost)
        return routed

    async def _lift(
        self, reads: Reads, namespace: str, query: str, intent: Intent, pool: list[Candidate]
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
            stating = await time_statements(reads, namespace, pool, dialect=self._dialect)
            for c in pool:
                if c.rowid in stating:
                    c.intent_boost += self._params.intent_time_statement_weight

    async def _graph(
        self, reads: Reads, namespace: str, query: str, spec: MemoryFilterSpec
    ) -> GraphBoost:
        """The graph channel: memories linked to the query's entities (when enabled)."""
        if not self._params.graph_enabled:
            return GraphBoost(frozenset())
        return await self._entities(reads, namespace, query, spec, "graph")

    async def _keyword_with_rows(
        self,
        reads: Reads,
        namespace: str,
        query: str,
        spec: MemoryFilterSpec,
        whole_index: bool,
        model: str,
    ) -> tuple[Keywords, dict[int, PoolRow]]:
        """The keyword channel, then its pool rows (fetched while the query is
        still being embedded)."""
        with timed(RECALL_CHANNEL_SECONDS, "keyword"), tracing.span("recall.keyword"):
            keyword = await self._keyword_channel(reads, namespace, query, spec, whole_index)
            if not keyword.ranked:
                return keyword, {}
            rowids = [r for r, _ in keyword.ranked]
            rows = await reads.fetch_all(
                queries.pool_rows(namespace, rowids, model, spec, dialect=self._dialect)
            )
            return keyword, {row.rowid: row for row in map(PoolRow._make, rows)}

    async def _keyword_channel(
        self,
        reads: Reads,
        namespace: str,
        query: str,
        spec: MemoryFilterSpec,
        whole_index: bool,
        known: TermStatistics | None = None,
        *,
        with_coverage: bool = True,
    ) -> Keywords:
        """(rowid, score) best first, BM25 with the searched collection's IDF, and
        the share of the query's IDF mass in that collection the best match holds
        (0 without `with_coverage`). `known`: statistics another query read in
        this snapshot over the same collection (a question's, for its parts):
        only what they lack is read."""
        if self._dialect == "postgres":
            return await self._pg_keyword_channel(reads, namespace, query, spec, known)
        matches = list(dict.fromkeys(quoted(term) for term in keyword_terms(query)))
        if not matches:
            return Keywords([])
        depth = self._params.channel_depth
        if whole_index:  # the collection is the whole index: FTS5's IDF is ours
            statistics = await self._index_statistics.read(reads, matches, known)
            counts = {m: statistics.terms[m][0] for m in matches}
            ranked = await self._whole_index_keyword(reads, matches, counts, depth)
            if not with_coverage:
                return Keywords(ranked, statistics=statistics)
            weights = {m: coverage_idf(statistics.size, counts[m]) for m in matches}
            return Keywords(ranked, await self._coverage(reads, weights, ranked), statistics)
        statistics = await collection_statistics(reads, namespace, spec, matches, known)
        collection_size, index_size = statistics.size, statistics.index_size
        in_collection = {m: statistics.terms[m][0] for m in matches}
        weighted = [
            (m, bm25_idf(collection_size, local) / bm25_idf(index_size, overall))
            for m in matches
            for local, overall in [statistics.terms[m]]
            if local
        ]
        if not weighted:
            return Keywords([], statistics=statistics)
        rows = await reads.fetch_all(queries.weighted_keyword_top(weighted, namespace, spec, depth))
        ranked = [(rowid, score) for rowid, score in rows]
        if not with_coverage:
            return Keywords(ranked, statistics=statistics)
        weights = {m: coverage_idf(collection_size, in_collection[m]) for m in matches}
        return Keywords(ranked, await self._coverage(reads, weights, ranked), statistics)

    async def _pg_keyword_channel(
        self,
        reads: Reads,
        namespace: str,
        query: str,
        spec: MemoryFilterSpec,
        known: TermStatistics | None = None,
    ) -> Keywords:
        """The keyword channel on Postgres: BM25 in one query
        (services/search/pg_text.py), which also returns the statistics and the
        best match's terms the coverage needs. The statistics are the
        namespace's, kept by the store (one indexed read, exact at the
        snapshot), with the common-terms cutoff as on SQLite's whole index,
        filtered Recalls included: a filter (a time window the query names, a
        type) narrows which memories are scored, not the IDF, as Lucene scores
        a filtered query. Counting a filtered collection's statistics and
        scoring every match without a cutoff scanned the namespace: 3.6 s at
        the p95 of Recall at 1M (bench/README.md "Recall at 1M")."""
        terms = list(dict.fromkeys(keyword_terms(query)))
        if not terms:
            return Keywords([])
        statistics = known  # (a question's, when this is one of its parts)
        missing = terms if statistics is None else statistics.missing(terms)
        if missing:
            kept = KeptStatistics._make(
                await reads.fetch_one(pg_text.kept_statistics(missing, namespace))
            )
            read = {t: (int(n), int(n)) for t, n in zip(missing, kept.frequencies, strict=True)}
            size = int(kept.size)
            statistics = (
                TermStatistics(size, size, float(kept.average), read)
                if statistics is None
                else statistics.with_terms(read)
            )
        if statistics is None or not statistics.size:
            return Keywords([], statistics=statistics)
        frequencies = [statistics.terms[t][0] for t in terms]
        counts = dict(zip(terms, frequencies, strict=True))
        rare = rare_terms(terms, counts, self._params.keyword_postings_budget)
        required = None if rare is None else [terms.index(t) + 1 for t in rare]
        collection = (statistics.size, statistics.average)
        query_rows = await reads.fetch_all(
            pg_text.bm25_top(
                terms,
                namespace,
                self._params.channel_depth,
                spec,
                collection,
                frequencies,
                required,
            )
        )
        if not query_rows:
            return Keywords([], statistics=statistics)
        rows = [Bm25Row._make(row) for row in query_rows]
        best = rows[0]
        size = int(best.size)
        weights = {
            t: coverage_idf(size, int(n)) for t, n in zip(terms, best.frequencies, strict=True)
        }
        held = {terms[int(i) - 1] for i in best.held}
        ranked = [(row.rowid, float(row.score)) for row in rows]
        return Keywords(ranked, coverage(weights, held), statistics)

    async def _coverage(
        self, reads: Reads, weights: dict[str, float], ranked: list[tuple[int, float]]
    ) -> float:
        """The share of the query's IDF mass held by the best match's terms."""
        if not ranked:
            return 0.0
        rows = await reads.fetch_all(queries.terms_in_memory(list(weights), ranked[0][0]))
        return coverage(weights, {row[0] for row in rows})

    async def _whole_index_keyword(
        self, reads: Reads, matches: list[str], counts: dict[str, int], depth: int
    ) -> list[tuple[int, float]]:
        """FTS5's BM25 over the OR of the terms. When the terms match more than
        `keyword_postings_budget` documents in total, the rarest terms that fit the
        budget are "rare" and the rest "common": a document is then scored only
        when it matches a rare term, with its full BM25 (common terms included)
        when it also matches a common one. Documents matching common terms only,
        which carry the least IDF, are left out. Costs follow the rare terms'
        documents instead of every posting of every term."""
        rare = rare_terms(matches, counts, self._params.keyword_postings_budget)
        if rare is not None:
            common = [m for m in matches if m not in rare]
            rare_only, with_common = await asyncio.gather(
                self._beside(reads, queries.whole_index_keyword_top(any_of(rare), depth)),
                reads.fetch_all(
                    queries.whole_index_keyword_top(all_of([any_of(rare), any_of(common)]), depth)
                ),
            )
            # the AND query's score is the full one (every term's part); a
            # rare-only score stands where the document has no common term
            scores = {rowid: score for rowid, score in rare_only}
            scores.update((rowid, score) for rowid, score in with_common)
            ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
            return ranked[:depth]
        rows = await reads.fetch_all(queries.whole_index_keyword_top(any_of(matches), depth))
        return [(rowid, score) for rowid, score in rows]

    async def _beside(self, reads: Reads, query: queries.Query) -> list[Any]:
        """A whole-index FTS5 query run on another connection of SQLite's pool
        when one is idle (its own snapshot, on its own thread: beside the
        snapshot's reads, half the keyword channel's time at 100k), else in the
        snapshot. Its rowids are proposals like the vector cache's, read under
        the namespace in the snapshot (_pool); a write landing between the two
        snapshots moves its BM25 statistics by a hair, as the cached counts do."""
        if self._dialect == "sqlite":
            rows = await self._reads.fetch_all_spare(query)
            if rows is not None:
                return rows
        return await reads.fetch_all(query)

    async def _vector_channel(
        self,
        reads: Reads,
        namespace: str,
        embedding: asyncio.Task[list[float] | None],
        index_model: str,
        spec: MemoryFilterSpec,
        whole_index: bool,
        warnings: list[str],
    ) -> tuple[list[float] | None, list[int]]:
        """(query vector, candidate rowids); no vector when the channel cannot
        run, with the reason in `warnings`."""
        vector = await embedding
        if vector is None:
            if self._embedder.enabled:
                warnings.append(self._embedder.last_error or "query embedding unavailable")
            return None, []
        if index_model != self._embedder.provider.model:
            warnings.append(
                f"vector index holds {index_model or 'no'} vectors, queries use "
                f"{self._embedder.provider.model}; keywords only"
            )
            return None, []
        with timed(RECALL_CHANNEL_SECONDS, "vector"), tracing.span("recall.vector"):
            candidates = await self._vector_candidates(
                namespace, vector, index_model, spec, whole_index, reads
            )
        return vector, candidates

    async def _vector_candidates(
        self,
        namespace: str,
        vector: list[float],
        model: str,
        spec: MemoryFilterSpec,
        whole_index: bool = False,
        reads: Reads | None = None,
    ) -> list[int]:
        """First-pass rowids, nearest first: proposals only (the cache's are not
        checked against the namespace until _pool reads their rows). `reads`: the
        Recall's snapshot (the pool when called on its own, as the benchmark does)."""
        query_f32 = _query_f32(vector)
        depth = self._params.channel_depth
        if self._dialect == "postgres":
            return await self._pg_vector_candidates(
                reads or self._reads, namespace, query_f32, spec
            )
        if self._params.vector_candidates <= 0:
            sql = queries.exact_vector_candidates(query_f32, model, namespace, spec, depth)
        else:
            size = max(self._params.vector_candidates, depth)
            if self._vector_cache is not None and spec.is_empty():
                # a filter keeps its first pass in SQL: applied before the cut
                cached = await self._vector_cache.nearest(namespace, query_f32, size)
                if cached is not None:
                    return cached
            sql = queries.vector_candidates(query_f32, namespace, spec, size, whole_index)
        return [row[0] for row in await (reads or self._reads).fetch_all(sql)]

    async def _pg_vector_candidates(
        self, reads: Reads, namespace: str, query_f32: bytes, spec: MemoryFilterSpec
    ) -> list[int]:
        """The vector channel on Postgres: the HNSW scan for the channel's depth
        (its settings hold for the rest of the snapshot's transaction), or the
        exact query when the scan comes back short (pg_vectors.nearest's rule);
        `vector_candidates` 0 asks for the exact query at once."""
        depth = self._params.channel_depth
        rows: list[Any] = []
        if self._params.vector_candidates > 0:
            await reads.fetch_all(pg_vectors.scan_settings())
            rows = await reads.fetch_all(
                pg_vectors.vector_candidates(query_f32, namespace, spec, depth)
            )
        if len(rows) < depth:
            rows = await reads.fetch_all(
                pg_vectors.exact_vector_candidates(query_f32, namespace, spec, depth)
            )
        return [row[0] for row in rows]

    async def _pool(
        self,
        namespace: str,
        keyword: list[tuple[int, float]],
        vector_candidates: list[int],
        vector: list[float] | None,
        model: str,
        graph: frozenset[int] = frozenset(),
        fetched: dict[int, PoolRow] | None = None,
        reads: Reads | None = None,
        *,
        spec: MemoryFilterSpec = _NO_FILTER,
        routed: dict[int, float] | None = None,
        part_vectors: Sequence[list[float]] = (),
    ) -> list[Candidate]:
        """Keyword top ∪ vector top (by exact cosine) ∪ graph-linked memories, with
        what scoring needs (`fetched`: pool rows already read, by rowid; `reads`:
        as for _vector_candidates). A proposed rowid that is not a live memory of
        the namespace has no row and leaves the pool here."""
        reads = reads or self._reads
        routed = routed or {}
        wanted = list(
            dict.fromkeys([r for r, _ in keyword] + vector_candidates + sorted(graph) + [*routed])
        )
        if not wanted:
            return []
        by_rowid = dict(fetched or {})
        missing = [r for r in wanted if r not in by_rowid]
        if missing:
            by_rowid.update(await self._pool_rows(reads, namespace, missing, model, spec))
        rows = [by_rowid[r] for r in wanted if r in by_rowid]
        cosine: dict[int, float] = {}
        if vector is not None:
            embedded = [row for row in rows if row.vector is not None]
            if embedded:
                blobs = [row.vector for row in embedded if row.vector is not None]
                matrix = np.frombuffer(b"".join(blobs), dtype=np.float32)
                matrix = matrix.reshape(len(embedded), -1)
                query = np.frombuffer(_query_f32(vector), dtype=np.float32)
                for row, value in zip(embedded, (matrix @ query).tolist(), strict=True):
                    cosine[row.rowid] = float(value)
                if self._params.sentence_weight > 0:
                    cosine.update(
                        _best_parts(embedded, query, cosine, self._params.sentence_weight)
                    )
                if part_vectors:
                    queries_f32 = [
                        np.frombuffer(_query_f32(v), dtype=np.float32) for v in part_vectors
                    ]
                    rowids = [row.rowid for row in embedded]
                    weight = self._params.decompose_weight
                    cosine.update(
                        decompose.part_cosines(cosine, rowids, matrix, queries_f32, weight)
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
            candidate.cosine = cosine.get(rowid)
            candidate.event_time = pooled.event_time
            candidate.who = pooled.who or ""
        await self._link_neighbours(reads, namespace, candidates)
        return list(candidates.values())

    async def _pool_rows(
        self, reads: Reads, namespace: str, rowids: list[int], model: str, spec: MemoryFilterSpec
    ) -> dict[int, PoolRow]:
        """Pool rows (queries.pool_rows) of the live memories of the namespace
        among `rowids`, by rowid."""
        query = queries.pool_rows(
            namespace,
            rowids,
            model,
            spec,
            dialect=self._dialect,
            parts=self._params.sentence_weight > 0,
        )
        rows = await reads.fetch_all(query)
        return {row.rowid: row for row in map(PoolRow._make, rows)}

    async def _link_neighbours(
        self, reads: Reads, namespace: str, candidates: dict[int, Candidate]
    ) -> None:
        """Set prev/next between pool members of one episode that are adjacent in
        the namespace's insertion order (the only neighbours scoring uses)."""
        episodes: dict[str, list[int]] = defaultdict(list)
        for rowid, candidate in candidates.items():
            episodes[candidate.event_time].append(rowid)
        pairs = [p for rowids in episodes.values() for p in pairwise(sorted(rowids))]
        adjacent = {(a, b) for a, b in pairs if b == a + 1}
        gapped = [(a, b) for a, b in pairs if b != a + 1]
        for start in range(0, len(gapped), 400):
            rows = await reads.fetch_all(
                queries.adjacent_pairs(namespace, gapped[start : start + 400])
            )
            adjacent.update((a, b) for a, b in rows)
        for a, b in adjacent:
            candidates[a].next_rowid = b
            candidates[b].prev_rowid = a

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
    rows: Sequence[PoolRow], query: npt.NDArray[np.float32], cosine: dict[int, float], weight: float
) -> dict[int, float]:
    """rowid -> whole cosine + weight x max(0, best sentence cosine - sd x
    sqrt(2 ln n) - whole) for the pool rows that hold sentence vectors (`parts`,
    float16, each of the whole vector's dimensions), n its sentences, sd the
    spread of every sentence cosine in the pool: a turn whose one answering
    sentence is lost in its whole vector still meets the question (issue 19),
    while a long turn gains nothing for the maximum that many sentences reach by
    chance (about sd x sqrt(2 ln n) above their mean). The plain maximum and
    min-max scaling within the pool gained nothing once cross-validated
    (bench/README.md, "Sentence vectors through Recall"). One product over all parts."""
    with_parts = [row for row in rows if row.parts]
    if not with_parts:
        return {}
    dims = len(query)
    blobs = [bytes(row.parts) for row in with_parts if row.parts]
    counts = np.array([len(b) // (2 * dims) for b in blobs])
    parts = np.frombuffer(b"".join(blobs), dtype=PARTS_DTYPE).reshape(-1, dims)
    scores = parts.astype(np.float32) @ query
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    chance = float(scores.std()) * np.sqrt(2.0 * np.log(counts))
    best = (np.maximum.reduceat(scores, starts) - chance).tolist()
    return {
        row.rowid: cosine[row.rowid] + weight * max(0.0, value - cosine[row.rowid])
        for row, value in zip(with_parts, best, strict=True)
    }


def _query_f32(vector: Sequence[float]) -> bytes:
    blob = normalized_f32(vector)
    if blob is None:
        raise ValueError("the embedding provider returned a zero or non-finite vector")
    return blob
