"""The one home for turning channel results into a ranking.

1. Fusion: the alpha blend `(1 - alpha) * keyword + alpha * cosine`, with the
   keyword score oriented so that a stronger BM25 match scores higher and scaled
   by the best match (default), or reciprocal rank fusion; plus the graph boost
   for memories linked to the query's entities.
2. Temporal intent: memories whose event time falls in a date the query names
   get `time_boost`.
3. Episodes: memories of a namespace sharing an event time form an episode (a
   conversation session, a meeting, an import). A memory is lifted by its
   episode's best member and by its immediate neighbours in insertion order.
4. Diversified selection: each further pick from an episode already picked
   pays `diversity_penalty`, so one episode cannot crowd out the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ScoringParams:
    fusion: str = "alpha"  # "alpha" | "rrf"
    alpha: float = 0.7
    rrf_k: int = 60
    min_score: float = 0.1
    time_boost: float = 0.2
    episode_weight: float = 0.2
    neighbor_weight: float = 0.1
    diversity_penalty: float = 0.03


@dataclass
class Candidate:
    rowid: int
    keyword_rank: int = 0  # 1-based; 0 = not returned by the channel
    keyword_score: float = 0.0  # BM25 with namespace statistics, higher is better
    vector_rank: int = 0
    cosine: float | None = None  # exact; None when the memory has no vector
    event_time: str = ""
    prev_rowid: int | None = None
    next_rowid: int | None = None
    graph_boost: float = 0.0  # graphBoostWeight when linked to the query's entities
    fused: float = 0.0
    score: float = 0.0
    boosts: dict[str, float] = field(default_factory=dict)


def fuse(
    candidates: Sequence[Candidate], params: ScoringParams, vectors_used: bool
) -> list[Candidate]:
    """Set `fused` on each candidate; drop those under `min_score`."""
    if not candidates:
        return []
    if params.fusion == "rrf":
        for c in candidates:
            c.fused = sum(
                1.0 / (params.rrf_k + rank) for rank in (c.keyword_rank, c.vector_rank) if rank
            )
        top = max(c.fused for c in candidates)
        for c in candidates:
            c.fused /= top
    else:
        best_keyword = max((c.keyword_score for c in candidates), default=0.0) or 1.0
        for c in candidates:
            keyword = c.keyword_score / best_keyword if c.keyword_rank else 0.0
            if vectors_used and c.cosine is not None:
                c.fused = (1.0 - params.alpha) * keyword + params.alpha * c.cosine
            else:  # one signal only: use it directly (seed 002 "Alpha Blending")
                c.fused = keyword
    for c in candidates:  # seed 000 "Graph-Augmented Search": additive
        c.fused += c.graph_boost
    return [c for c in candidates if c.fused >= params.min_score]


def boost(
    candidates: Sequence[Candidate], params: ScoringParams, windows: Sequence[tuple[str, str]]
) -> None:
    """Set `score`: fused plus temporal and episodic boosts (absolute, not per-query)."""
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


def select(candidates: Sequence[Candidate], limit: int, penalty: float) -> list[Candidate]:
    """Greedy pick by score minus `penalty` per memory already picked from the same
    episode; each pick's `score` becomes that effective score (non-increasing)."""
    remaining = sorted(candidates, key=lambda c: (-c.score, c.rowid))
    picked: list[Candidate] = []
    per_episode: dict[str, int] = {}
    while remaining and len(picked) < limit:
        best_index, best_score = 0, float("-inf")
        for index, c in enumerate(remaining):
            effective = c.score - penalty * per_episode.get(c.event_time, 0)
            if effective > best_score:
                best_index, best_score = index, effective
        chosen = remaining.pop(best_index)
        chosen.score = best_score
        per_episode[chosen.event_time] = per_episode.get(chosen.event_time, 0) + 1
        picked.append(chosen)
    return picked
