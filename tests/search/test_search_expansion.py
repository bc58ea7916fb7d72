"""Second-hop expansion (issue 19, services/search/expansion.py): the first
pass's best hits lead to memories that share no word with the question, through
their most distinctive terms run through the keyword channel again. Off by
default; through gRPC Recall on both backends, and the pure functions below.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import numpy as np
import pytest

from http_fakes import VectorBook
from recall_helpers import Stack, ids, vec
from services.search import expansion
from services.search.scoring import Candidate

QUESTION = "which musical instruments does Dana own?"
# Found by the question's words: it names the instruments.
NAMED = "Dana owns musical instruments: a Yamaha guitar and an old upright piano."
# Shares no word with the question; only the hit's terms (yamaha, guitar) lead to it.
RESTRUNG = "Restrung the Yamaha guitar last night, it sounds bright again."
UNRELATED = (
    "The bakery on the corner sells rye bread.",
    "Booked a dentist appointment for Thursday.",
    "The train to Porto was late again.",
)


@pytest.fixture
def keywords_only(recall_stack: Callable[..., Stack]) -> Callable[..., Stack]:
    def build(**search: object) -> Stack:
        overrides = {f"search.{key}": value for key, value in search.items()}
        return recall_stack({"providers.embedding.kind": "none", **overrides})

    return build


@pytest.mark.parametrize("neighbour", [False, True], ids=["whole-index", "beside-another"])
@pytest.mark.parametrize("terms", [0, 4], ids=["off", "on"])
def test_a_memory_sharing_no_word_with_the_question_is_found_only_with_expansion(
    keywords_only: Callable[..., Stack], terms: int, neighbour: bool
) -> None:
    """The namespace alone in the index (SQLite's whole-index statistics) or
    beside another one (the namespace's own counts)."""
    stack = keywords_only(expansion_terms=terms, expansion_docs=1, min_score=0.0)
    ns = f"hop-{uuid.uuid4().hex[:8]}"
    if neighbour:
        stack.remember("A Yamaha guitar for sale, barely played.", namespace=f"{ns}-other")
    named = stack.remember(NAMED, namespace=ns)
    restrung = stack.remember(RESTRUNG, namespace=ns)
    for text in UNRELATED:
        stack.remember(text, namespace=ns)

    found = ids(stack.recall(QUESTION, namespace=ns))
    assert found[0] == named.id
    if terms:
        assert found == [named.id, restrung.id]
    else:
        assert found == [named.id]


# The moved query (Rocchio): the best hit leans the query toward axis 1, where a
# memory far from the question itself lies; a shallow exact vector channel
# (10 nearest) holds only the hit and decoys unless the second scan runs.
HIT, FAR, DECOYS = vec(0.9, axis=1), vec(0.1, axis=1), 12
SHALLOW_EXACT = {"search.channel_depth": 10, "search.vector_candidates": 0}


@pytest.mark.parametrize("weight", [0.0, 2.0], ids=["off", "on"])
def test_the_moved_query_vector_brings_a_memory_the_first_scan_missed(
    vector_stack: Callable[..., tuple[Stack, VectorBook]], weight: float
) -> None:
    overrides = {"search.expansion_vector_weight": weight, "search.expansion_docs": 1}
    stack, _ = vector_stack({**SHALLOW_EXACT, **overrides})
    hit = stack.remember("the best match")
    far = stack.remember("a memory the question alone misses")
    vectors = {"the best match": HIT, "a memory the question alone misses": FAR}
    for i in range(DECOYS):  # cosine 0.35 with the query, nothing in common with the hit
        vectors[f"decoy {i}"] = vec(0.35, axis=2 + i % 6)
        stack.remember(f"decoy {i}")
    stack.embed_pending(lambda text: vectors[text])

    found = ids(stack.recall("zebra", limit=20))
    assert found[0] == hit.id
    if weight:
        assert found[1] == far.id
    else:
        assert far.id not in found


# ---- the pure functions ------------------------------------------------------------


def test_shortlist_weighs_terms_by_their_share_of_each_hit_and_skips_the_question() -> None:
    model = expansion.shortlist(
        ["guitar guitar piano", "the guitar and 2024 ok"], "which guitar?", size=10
    )
    assert "guitar" not in model, "the question's own term"
    assert "the" not in model and "and" not in model, "stop words"
    assert "2024" not in model and "ok" not in model, "numbers and short fragments"
    assert model == pytest.approx({"piano": 1 / 3})


def test_pick_terms_prefers_rare_terms_and_drops_terms_only_the_hits_hold() -> None:
    model = {"guitar": 0.5, "really": 0.5, "yamaha": 0.1, "fg800": 0.5}
    counts = {"guitar": 5, "really": 900, "yamaha": 2, "fg800": 1}
    held = {"guitar": 1, "really": 1, "yamaha": 1, "fg800": 1}
    assert expansion.pick_terms(model, counts, 1000, held, 2) == ["guitar", "yamaha"]


def test_merge_keywords_adds_the_weighted_expansion_in_the_first_lists_units() -> None:
    first = [(1, 10.0), (2, 5.0)]
    extra = [(3, 4.0), (2, 2.0)]
    merged = dict(expansion.merge_keywords(first, extra, 0.5))
    assert merged == pytest.approx({1: 10.0, 2: 5.0 + 2.5, 3: 5.0})
    assert expansion.merge_keywords(first, extra, 0.0) == first
    assert expansion.merge_keywords([], extra, 0.5) == [(3, 0.5), (2, 0.25)]


def test_moved_vector_leans_toward_the_hits() -> None:
    query = [1.0, 0.0, 0.0]
    hit = np.array([0.0, 2.0, 0.0], dtype=np.float32).tobytes()
    moved = expansion.moved_vector(query, [hit], 1.0)
    assert moved == pytest.approx([2**-0.5, 2**-0.5, 0.0])
    assert expansion.moved_vector(query, [], 1.0) == query


def test_feedback_rowids_are_the_best_scored() -> None:
    pool = [Candidate(1, score=0.2), Candidate(2, score=0.9), Candidate(3, score=0.5)]
    assert expansion.feedback_rowids(pool, 2) == [2, 3]
