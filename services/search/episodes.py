"""Episode-level evidence beside turn-level (issue 19).

An episode (memories of a namespace sharing an event time: one conversation
session) is otherwise judged only by the pool members the turn channels found
(scoring.boost's episode term). Here the pool's best episodes are also judged
as a whole: the normalised mean of ALL their members' vectors (the centroid),
its cosine with the query lifting each pool member of the episode by
`weight` x that cosine (clamped to [0, 1]). And by their keyword mass: the
sum of their pool members' scaled keyword scores.

Both off by default (search.episode_centroid_weight, episode_keyword_weight 0):
each gains LoCoMo R@10 but costs LongMemEval all@5 or R@5, the keyword mass
LoCoMo's session R@10 too (bench/README.md "Episode centroids and episode
keyword mass"; adding the top episodes' unseen members and scoring an episode
by its best members' cosines were measured there and not kept).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from services.common.db import Reads
from services.common.memory_filter import MemoryFilterSpec
from services.search import queries
from services.search.scoring import Candidate, clamped


def top_episodes(pool: Sequence[Candidate], count: int) -> list[str]:
    """The `count` episodes whose best member scores highest (after the boosts)."""
    best: dict[str, float] = {}
    for c in pool:
        best[c.event_time] = max(best.get(c.event_time, float("-inf")), c.score)
    return sorted(best, key=lambda e: (-best[e], e))[:count]


def centroid_cosines(rows: Sequence[Any], query: Sequence[float]) -> dict[str, float]:
    """From (rowid, event_time, float32 vector) rows: episode -> the cosine of its
    members' normalised mean vector with the query."""
    if not rows:
        return {}
    q = np.asarray(query, dtype=np.float32)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    matrix = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype=np.float32)
    matrix = matrix.reshape(len(rows), -1)
    members: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        members[row[1]].append(index)
    centroids: dict[str, float] = {}
    for episode, indices in members.items():
        mean = matrix[indices].mean(axis=0)
        norm = float(np.linalg.norm(mean))
        centroids[episode] = float(mean @ q) / norm if norm > 0 else 0.0
    return centroids


def lift(
    pool: Sequence[Candidate], by_episode: dict[str, float], weight: float, name: str = "centroid"
) -> None:
    """Add `weight` x the episode's clamped value to each member's score (after
    scoring.boost, which sets the score afresh); recorded in boosts[name]."""
    for c in pool:
        if c.event_time in by_episode:
            value = weight * clamped(by_episode[c.event_time])
            c.score += value
            c.boosts[name] = value


def keyword_mass(pool: Sequence[Candidate]) -> dict[str, float]:
    """Episode -> tanh of the sum of its pool members' scaled keyword scores: an
    episode whose several turns each match some of the query's words (a cheap
    stand-in for BM25 over the episode's text, which FTS5 does not index)."""
    total: dict[str, float] = defaultdict(float)
    for c in pool:
        total[c.event_time] += c.keyword
    return {episode: math.tanh(value) for episode, value in total.items() if value > 0}


async def centroids(
    reads: Reads,
    dialect: str,
    namespace: str,
    spec: MemoryFilterSpec,
    model: str,
    query: Sequence[float],
    pool: Sequence[Candidate],
    episodes: int,
) -> dict[str, float]:
    """Episode -> centroid cosine for the pool's best `episodes` episodes: one
    read of their members' vectors."""
    chosen = top_episodes(pool, episodes)
    if not chosen:
        return {}
    rows = await reads.fetch_all(
        queries.episode_vectors(namespace, chosen, model, spec, dialect=dialect)
    )
    return centroid_cosines(rows, query)
