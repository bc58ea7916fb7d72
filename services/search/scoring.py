"""The one home for turning channel results into a ranking and a score.

Every score is in [0, 1) and comparable across queries, so `min_score` can tell
"nothing relevant" from an answer (bench/README.md, LoCoMo).

1. Fusion: the alpha blend `(1 - alpha) * keyword + alpha * cosine` (default),
   with the keyword score oriented so that a stronger BM25 match scores higher
   and scaled by the best match, and the cosine clamped to [0, 1]; or
   weighted reciprocal rank fusion (the intent route's list as the graph
   channel); plus the graph boost for memories linked to the query's entities
   and the intent route's lift (added in the blend). A memory without a vector scores its keyword score.
2. Temporal intent: memories whose event time falls in a date the query names
   get `time_boost`.
3. Episodes: memories of a namespace sharing an event time form an episode (a
   conversation session, a meeting, an import). A memory is lifted by its
   episode's best member and by its immediate neighbours in insertion order.
4. Diversified selection: each further pick from an episode already picked
   pays `diversity_penalty`, so one episode cannot crowd out the others.
5. Score: the sum of 1-4, squashed by tanh into [0, 1), times the query's
   keyword strength: tanh(3 x the share of the query's IDF mass, the sum of
   every query term's IDF in the searched collection, matched or not, that
   the best keyword match holds), weighted like the keyword channel in the
   blend. A query
   whose rare words match nothing in the collection scores low however close
   its nearest memories are. The factor is one per query, so it never changes
   the order; picks under `min_score` are left out.

Why not a keyword score that is itself the share of the IDF mass, boosts that
lift toward 1 (`s + (1 - s) * b`), or seed 002's cosine alone for a memory only
the vector channel returned: each cost LoCoMo dev R@10 (0.002-0.024, 0.020 and
0.030); numbers in bench/README.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from services.common.config import SearchSettings
from services.common.importance import importance_factor

# How fast the keyword strength saturates with the share of the query's IDF mass
# the best match covers: at 3, a best match covering a third of it gets 0.76.
KEYWORD_STRENGTH = 3.0


# The configuration's defaults (services/common/config.py writes them, and only there).
_SEARCH = SearchSettings()


@dataclass(frozen=True)
class ScoringParams:
    """Each field is the `search.*` key of its name (ScoringParams.from_settings);
    its default is that key's."""

    fusion: str = _SEARCH.fusion  # "alpha" | "rrf"
    alpha: float = _SEARCH.alpha
    rrf_k: int = _SEARCH.rrf_k
    min_score: float = _SEARCH.min_score
    time_boost: float = _SEARCH.time_boost
    episode_weight: float = _SEARCH.episode_weight
    neighbor_weight: float = _SEARCH.neighbor_weight
    diversity_penalty: float = _SEARCH.diversity_penalty
    # search.fusion=rrf: channel weights (seed 003 "RRF merge"); the graph
    # channel is the intent route's ranked list
    rrf_weight_fts: float = _SEARCH.rrf_weight_fts
    rrf_weight_vector: float = _SEARCH.rrf_weight_vector
    rrf_weight_graph: float = _SEARCH.rrf_weight_graph
    importance_weight: float = _SEARCH.importance_weight  # 0: importance does not rank

    @classmethod
    def from_settings(cls, search: SearchSettings) -> ScoringParams:
        """The parameters `search.*` configures."""
        return cls(**{f.name: getattr(search, f.name) for f in fields(cls)})


@dataclass
class Candidate:
    rowid: int
    keyword_rank: int = 0  # 1-based; 0 = not returned by the channel
    keyword_score: float = 0.0  # BM25 with namespace statistics, higher is better
    keyword: float = 0.0  # keyword_score scaled by the best match, in [0, 1] (fuse)
    keyword_shown: float = 0.0  # keyword times the query's keyword strength (fuse)
    vector_rank: int = 0
    cosine: float | None = None  # exact; None when the memory has no vector
    event_time: str = ""
    prev_rowid: int | None = None
    next_rowid: int | None = None
    graph_boost: float = 0.0  # graphBoostWeight when linked to the query's entities
    who: str = ""
    route_rank: int = 0  # 1-based rank in the intent route's list (graph channel)
    intent_boost: float = 0.0  # what the intent route adds (services/search/recall.py)
    fused: float = 0.0
    score: float = 0.0
    boosts: dict[str, float] = field(default_factory=dict)


def fuse(
    candidates: Sequence[Candidate],
    params: ScoringParams,
    vectors_used: bool,
    keyword_coverage: float = 0.0,
) -> float:
    """Set `keyword` and `fused` on each candidate; return the query's confidence,
    the factor of every final score. `keyword_coverage`: the share of the query's
    IDF mass the best keyword match holds (services.search.recall)."""
    best = max((c.keyword_score for c in candidates if c.keyword_rank), default=0.0)
    strength = keyword_strength(keyword_coverage)
    for c in candidates:
        c.keyword = c.keyword_score / best if c.keyword_rank and best > 0 else 0.0
        c.keyword_shown = c.keyword * strength
    if params.fusion == "rrf":
        # weighted; by the best possible (rank 1 in every channel that ran)
        k = params.rrf_k
        routed = any(c.route_rank for c in candidates)
        weights = (
            params.rrf_weight_fts
            + (params.rrf_weight_vector if vectors_used else 0.0)
            + (params.rrf_weight_graph if routed else 0.0)
        )
        best_rrf = (weights or 1.0) / (k + 1)
        for c in candidates:
            ranked = (
                (params.rrf_weight_fts, c.keyword_rank),
                (params.rrf_weight_vector, c.vector_rank),
                (params.rrf_weight_graph, c.route_rank),
            )
            c.fused = sum(w / (k + r) for w, r in ranked if r) / best_rrf
    else:
        for c in candidates:
            if vectors_used and c.cosine is not None:
                c.fused = (1.0 - params.alpha) * c.keyword + params.alpha * clamped(c.cosine)
            else:  # no vector for this memory (or no vector channel): keywords alone
                c.fused = c.keyword
    for c in candidates:  # seed 000 "Graph-Augmented Search": additive
        c.fused += c.graph_boost
        if params.fusion != "rrf" or not c.route_rank:  # the route's lifts off its list
            c.fused += c.intent_boost
    if not vectors_used:
        return strength
    return params.alpha + (1.0 - params.alpha) * strength


def keyword_strength(coverage: float) -> float:
    """How much of the query its best keyword match covers, in [0, 1)."""
    return math.tanh(KEYWORD_STRENGTH * min(max(coverage, 0.0), 1.0))


def coverage_idf(collection_size: int, containing: int) -> float:
    """A term's weight in the query's IDF mass: BM25's IDF without FTS5's floor
    (Lucene's `log(1 + (N - n + 0.5) / (n + 0.5))`, always positive), so a word
    in every memory of a small collection still counts a little, and a word the
    collection lacks counts most."""
    size = max(collection_size, 0)
    hits = min(max(containing, 0), size)
    return math.log1p((size - hits + 0.5) / (hits + 0.5))


def coverage(weights: dict[str, float], held: set[str]) -> float:
    """The share of the query's IDF mass (`weights`, per term) that the terms
    `held` by its best keyword match carry."""
    total = sum(weights.values())
    return sum(w for term, w in weights.items() if term in held) / total if total > 0 else 0.0


def clamped(cosine: float) -> float:
    """A cosine as a score: an opposite meaning is no more relevant than an unrelated one."""
    return min(max(cosine, 0.0), 1.0)


def squash(raw: float) -> float:
    """Fused plus boosts into [0, 1), the same map on every query."""
    return math.tanh(max(raw, 0.0))


def boost(
    candidates: Sequence[Candidate], params: ScoringParams, windows: Sequence[tuple[str, str]]
) -> None:
    """Set `score`: fused plus temporal and episodic boosts (absolute, not per-query),
    before the squash."""
    base: dict[int, float] = {}
    for c in candidates:
        c.score = c.fused
        if windows and any(start <= c.event_time < end for start, end in windows):
            c.score += params.time_boost
            c.boosts["time"] = params.time_boost
        base[c.rowid] = c.score
    episode_best: dict[str, float] = {}
    for c in candidates:
        episode_best[c.event_time] = max(episode_best.get(c.event_time, 0.0), base[c.rowid])
    by_rowid = {c.rowid: c for c in candidates}
    for c in candidates:
        episode = params.episode_weight * episode_best[c.event_time]
        neighbours = sum(
            base[n]
            for n in (c.prev_rowid, c.next_rowid)
            if n is not None and n in by_rowid and by_rowid[n].event_time == c.event_time
        )
        c.boosts["episode"] = episode
        c.boosts["neighbours"] = params.neighbor_weight * neighbours
        c.score += episode + params.neighbor_weight * neighbours


def weigh_importance(
    candidates: Sequence[Candidate], importance: dict[int, float], weight: float
) -> None:
    """Scale each score by its memory's importance (services/common/importance.py),
    after the boosts and before the selection; recorded in `boosts["importance"]`."""
    for c in candidates:
        if c.rowid in importance:
            factor = importance_factor(importance[c.rowid], weight)
            c.score *= factor
            c.boosts["importance"] = factor


def select(
    candidates: Sequence[Candidate],
    limit: int,
    penalty: float,
    min_score: float = 0.0,
    confidence: float = 1.0,
) -> list[Candidate]:
    """Greedy pick by score minus `penalty` per memory already picked from the same
    episode; each pick's `score` becomes that effective score, squashed, times the
    query's `confidence` (fuse). Picks are non-increasing, so they stop at the
    first under `min_score`."""
    remaining = sorted(candidates, key=lambda c: (-c.score, c.rowid))
    picked: list[Candidate] = []
    per_episode: dict[str, int] = {}
    while remaining and len(picked) < limit:
        best_index, best_score = 0, float("-inf")
        for index, c in enumerate(remaining):
            if c.score <= best_score and penalty >= 0:
                break  # sorted by score: no later one can do better (Recall at 100k)
            effective = c.score - penalty * per_episode.get(c.event_time, 0)
            if effective > best_score:
                best_index, best_score = index, effective
        final = confidence * squash(best_score)
        if final < min_score:
            break
        chosen = remaining.pop(best_index)
        chosen.score = final
        per_episode[chosen.event_time] = per_episode.get(chosen.event_time, 0) + 1
        picked.append(chosen)
    return picked
