"""Episode centroids (issue 19, services/search/episodes.py): the pool's best
episodes judged as a whole, by the cosine of their members' mean vector with
the query, beside the turns the channels found. Off by default; through gRPC
Recall on both backends, and the pure functions below.

"zebra" embeds to QUERY_VECTOR (axis 0); every memory's vector is chosen here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pytest

from http_fakes import VectorBook
from recall_helpers import Stack, ids, timestamp, vec
from services.search import episodes
from services.search.scoring import Candidate

# Episode A: three turns each only weakly like the question, each off in its
# own direction, so their mean points at it (centroid cosine 0.4 / sqrt(0.16 +
# 3 x 0.84 / 9) = 0.60). Episode B: three turns a little closer each, all off
# the same way, so their mean is no closer than any of them (0.45).
SPREAD = [vec(0.4, axis=axis) for axis in (2, 3, 4)]
ALIKE = [vec(0.45, axis=5)] * 3
EPISODE_A = timestamp(datetime(2023, 5, 1, tzinfo=UTC))
EPISODE_B = timestamp(datetime(2023, 6, 1, tzinfo=UTC))


@pytest.mark.parametrize("weight", [0.0, 1.0], ids=["off", "on"])
def test_an_episode_whose_turns_match_weakly_but_whose_centroid_matches_ranks_first(
    vector_stack: Callable[..., tuple[Stack, VectorBook]], weight: float
) -> None:
    # no diversity penalty: each episode's turns rank together
    overrides = {"search.episode_centroid_weight": weight, "search.diversity_penalty": 0.0}
    stack, _ = vector_stack(overrides)
    vectors: dict[str, list[float]] = {}
    spread, alike = [], []
    for i, vector in enumerate(SPREAD):
        vectors[f"spread turn {i}"] = vector
        spread.append(stack.remember(f"spread turn {i}", event_time=EPISODE_A).id)
    for i, vector in enumerate(ALIKE):
        vectors[f"alike turn {i}"] = vector
        alike.append(stack.remember(f"alike turn {i}", event_time=EPISODE_B).id)
    stack.embed_pending(lambda text: vectors[text])

    found = ids(stack.recall("zebra"))
    assert sorted(found) == sorted(spread + alike)
    first = spread if weight else alike
    assert sorted(found[:3]) == sorted(first)


# Episode A: four turns that each mention the word among others; episode B: one
# turn that is the word alone (the best single keyword match). The keyword mass
# of an episode is the sum of its members' scaled keyword scores.
SEVERAL = [f"the lighthouse trip, day {day}, with rain and wind and gulls" for day in range(4)]
ALONE = "lighthouse"


@pytest.mark.parametrize("weight", [0.0, 2.0], ids=["off", "on"])
def test_an_episode_whose_several_turns_match_outranks_one_better_turn_with_keyword_mass(
    recall_stack: Callable[..., Stack], weight: float
) -> None:
    stack = recall_stack(
        {
            "providers.embedding.kind": "none",
            "search.min_score": 0.0,
            "search.diversity_penalty": 0.0,
            "search.episode_keyword_weight": weight,
        }
    )
    several = [stack.remember(text, event_time=EPISODE_A).id for text in SEVERAL]
    alone = stack.remember(ALONE, event_time=EPISODE_B).id
    stack.remember("an unrelated note about bread")

    found = ids(stack.recall("lighthouse"))
    assert sorted(found) == sorted([*several, alone])
    assert (found[0] in several) == bool(weight)


# ---- the pure functions ------------------------------------------------------------


def rows(*members: tuple[int, str, list[float]]) -> list[tuple[int, str, bytes]]:
    return [(r, e, np.asarray(v, dtype=np.float32).tobytes()) for r, e, v in members]


def test_centroid_cosines_are_of_the_normalised_mean_vector() -> None:
    centroids = episodes.centroid_cosines(
        rows((1, "a", [0.6, 0.8, 0.0]), (2, "a", [0.6, -0.8, 0.0]), (3, "b", [0.0, 0.0, 1.0])),
        [2.0, 0.0, 0.0],
    )
    assert centroids == pytest.approx({"a": 1.0, "b": 0.0})
    assert episodes.centroid_cosines([], [1.0]) == {}


def test_top_episodes_rank_by_their_best_member() -> None:
    pool = [
        Candidate(1, event_time="a"),
        Candidate(2, event_time="b"),
        Candidate(3, event_time="a"),
    ]
    for c, score in zip(pool, (0.2, 0.5, 0.9), strict=True):
        c.score = score
    assert episodes.top_episodes(pool, 2) == ["a", "b"]
    assert episodes.top_episodes(pool, 1) == ["a"]


def test_keyword_mass_sums_an_episodes_scaled_keyword_scores() -> None:
    pool = [
        Candidate(1, event_time="a", keyword=0.5),
        Candidate(2, event_time="a", keyword=0.25),
        Candidate(3, event_time="b"),
    ]
    assert episodes.keyword_mass(pool) == pytest.approx({"a": math.tanh(0.75)})


def test_lift_adds_the_weighted_clamped_centroid_cosine() -> None:
    pool = [
        Candidate(1, event_time="a"),
        Candidate(2, event_time="b"),
        Candidate(3, event_time="c"),
    ]
    episodes.lift(pool, {"a": 0.5, "b": -0.3}, 0.4)
    assert [c.score for c in pool] == pytest.approx([0.2, 0.0, 0.0])
    assert "centroid" not in pool[2].boosts
