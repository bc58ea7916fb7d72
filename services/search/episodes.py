"""Episode-level evidence beside turn-level (issue 19).

An episode (memories of a namespace sharing an event time: one conversation
session) is otherwise judged only by the pool members the turn channels found
(scoring.boost's episode term). Here the pool's best episodes are also judged
as a whole: the normalised mean of ALL their members' vectors (the centroid),
its cosine with the query lifting each pool member of the episode by
`weight` x that cosine (clamped to [0, 1]); and the best members of those
episodes by their own cosine that no channel returned can join the pool.

Off by default (search.episode_centroid_weight 0): measured in bench/README.md
("Episode centroids").
"""

from __future__ import annotations

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


def centroid_cosines(
    rows: Sequence[Any], query: Sequence[float], top_members: int = 0
) -> tuple[dict[str, float], dict[int, tuple[str, float]]]:
    """From (rowid, event_time, float32 vector) rows: episode -> the cosine of its
    members' normalised mean vector with the query (or, `top_members` k > 0, the
    mean of its best k members' own cosines: a long episode's mean vector is
    mostly about something else), and rowid -> (episode, its own cosine)."""
    if not rows:
        return {}, {}
    q = np.asarray(query, dtype=np.float32)
    q = q / (float(np.linalg.norm(q)) or 1.0)
    matrix = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype=np.float32)
    matrix = matrix.reshape(len(rows), -1)
    members: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        members[row[1]].append(index)
    own = (matrix @ q).tolist()
    centroids: dict[str, float] = {}
    for episode, indices in members.items():
        if top_members > 0:
            best = sorted((own[i] for i in indices), reverse=True)[:top_members]
            centroids[episode] = sum(best) / len(best)
            continue
        mean = matrix[indices].mean(axis=0)
        norm = float(np.linalg.norm(mean))
        centroids[episode] = float(mean @ q) / norm if norm > 0 else 0.0
    return centroids, {row[0]: (row[1], float(own[i])) for i, row in enumerate(rows)}


def unseen_members(
    members: dict[int, tuple[str, float]], pool: Sequence[Candidate], per_episode: int
) -> list[Candidate]:
    """Each episode's best `per_episode` members by their own cosine that are not
    in the pool, as candidates no channel returned."""
    present = {c.rowid for c in pool}
    by_episode: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for rowid, (episode, cosine) in members.items():
        if rowid not in present:
            by_episode[episode].append((cosine, rowid))
    added: list[Candidate] = []
    for episode, ranked in sorted(by_episode.items()):
        for cosine, rowid in sorted(ranked, key=lambda t: (-t[0], t[1]))[:per_episode]:
            added.append(Candidate(rowid, cosine=cosine, event_time=episode))
    return added


def lift(pool: Sequence[Candidate], centroids: dict[str, float], weight: float) -> None:
    """Add `weight` x the clamped centroid cosine to each member's score (after
    scoring.boost, which sets the score afresh); recorded in boosts["centroid"]."""
    for c in pool:
        if c.event_time in centroids:
            value = weight * clamped(centroids[c.event_time])
            c.score += value
            c.boosts["centroid"] = value


async def centroids(
    reads: Reads,
    dialect: str,
    namespace: str,
    spec: MemoryFilterSpec,
    model: str,
    query: Sequence[float],
    pool: Sequence[Candidate],
    episodes: int,
    per_episode: int,
    top_members: int = 0,
) -> tuple[dict[str, float], list[Candidate]]:
    """(episode -> centroid cosine, unseen members to add) for the pool's best
    `episodes` episodes: one read of their members' vectors."""
    chosen = top_episodes(pool, episodes)
    if not chosen:
        return {}, []
    rows = await reads.fetch_all(
        queries.episode_vectors(namespace, chosen, model, spec, dialect=dialect)
    )
    cosines, members = centroid_cosines(rows, query, top_members)
    added = unseen_members(members, pool, per_episode) if per_episode > 0 else []
    return cosines, added
