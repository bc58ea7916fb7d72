"""How Recall blends its keyword and vector channels per query (issue 19;
services/search/scoring.py fuse, vector_scores, query_alpha): the raw cosine,
or the pool's cosines on a per-query scale, and an alpha moved by the query's
keyword strength.

"zebra" embeds to QUERY_VECTOR; MATCHED holds the word, UNMATCHED does not,
and each memory's cosine with the query is chosen by the test. Each memory
has an episode of its own, so the boosts keep the blend's order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from http_fakes import VectorBook
from recall_helpers import Stack, ids, vec

MATCHED = "notes on the zebra crossing"
UNMATCHED = "a striped horse of the african plains"


def recall_order(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
    overrides: dict[str, Any],
    matched_cosine: float,
    unmatched_cosine: float,
) -> tuple[list[str], list[str], list[float]]:
    """(the ids Recall returns for "zebra", [matched id, unmatched id], scores)."""
    stack, _ = vector_stack(overrides)
    matched = stack.remember(MATCHED)
    unmatched = stack.remember(UNMATCHED)
    vectors = {MATCHED: vec(matched_cosine, axis=2), UNMATCHED: vec(unmatched_cosine, axis=3)}
    stack.embed_pending(lambda text: vectors[text])
    response = stack.recall("zebra")
    assert not response.degraded, list(response.warnings)
    return ids(response), [matched.id, unmatched.id], [r.score for r in response.results]


# Both cosines in a narrow band (0.5 and 0.6): raw, the keyword match's full
# keyword score outweighs the 0.1 the other leads by; on the pool's scale that
# 0.1 is the whole range, and the closer memory leads.
NARROW = (0.5, 0.6)


@pytest.mark.parametrize(
    ("overrides", "matched_first"),
    [
        ({}, True),
        ({"search.cosine_normalisation": "best"}, True),
        ({"search.cosine_normalisation": "pool_minmax"}, False),
        ({"search.cosine_normalisation": "top_minmax"}, False),
        ({"search.cosine_normalisation": "pool_z"}, False),
        ({"search.cosine_normalisation": "pool_minmax", "search.cosine_keep_best": True}, False),
        ({"search.cosine_normalisation": "pool_z", "search.cosine_keep_best": True}, False),
    ],
    ids=["raw", "best", "pool-minmax", "top-minmax", "pool-z", "pool-minmax-kept", "pool-z-kept"],
)
def test_a_narrow_cosine_band_weighs_as_much_as_the_normalisation_says(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
    overrides: dict[str, Any],
    matched_first: bool,
) -> None:
    order, (matched, unmatched), scores = recall_order(vector_stack, overrides, *NARROW)
    assert order == ([matched, unmatched] if matched_first else [unmatched, matched])
    assert all(0.0 < s < 1.0 for s in scores)


def test_kept_best_leaves_the_top_score_where_the_raw_cosine_puts_it(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """Scaled back to the best raw cosine, the normalised blend gives the
    vector-only memory the very score the raw blend gives it (min_score keeps
    its meaning); unscaled, it scores as if its cosine were 1."""
    kept = {"search.cosine_normalisation": "pool_minmax", "search.cosine_keep_best": True}
    _, _, raw_scores = recall_order(vector_stack, {}, *NARROW)
    _, _, kept_scores = recall_order(vector_stack, kept, *NARROW)
    unscaled = {"search.cosine_normalisation": "pool_minmax"}
    _, _, unscaled_scores = recall_order(vector_stack, unscaled, *NARROW)
    assert kept_scores[0] == pytest.approx(raw_scores[1], abs=1e-6)
    assert unscaled_scores[0] > kept_scores[0] + 0.1


@pytest.mark.parametrize(("alpha_strength", "matched_first"), [(0.0, False), (1.0, True)])
def test_a_query_whose_rare_word_matches_leans_on_keywords(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
    alpha_strength: float,
    matched_first: bool,
) -> None:
    """ "zebra" is the query's whole IDF mass and MATCHED holds it (keyword
    strength near 1): with alpha_strength the vector channel's weight drops,
    and the keyword match outranks a memory that is only close in meaning."""
    order, (matched, unmatched), _ = recall_order(
        vector_stack, {"search.alpha_strength": alpha_strength}, 0.1, 0.9
    )
    assert order == ([matched, unmatched] if matched_first else [unmatched, matched])
