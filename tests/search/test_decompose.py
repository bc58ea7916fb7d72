"""The decomposition rules and merges (services/search/decompose.py), as pure functions."""

from __future__ import annotations

import numpy as np
import pytest

from services.search.decompose import (
    MAX_PARTS,
    merged_candidates,
    merged_keyword,
    part_cosines,
    parts,
)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        (  # 1: quoted spans
            "Which group did I join first, 'Page Turners' or 'Marketing Professionals'?",
            [
                "Which group did I join first, Page Turners",
                "Which group did I join first, Marketing Professionals",
            ],
        ),
        (  # 2: between A and B (the "and" that starts a phrase)
            "How many days passed between the day I fixed the old bike and the day I sold it?",
            [
                "How many days passed the day I fixed the old bike",
                "How many days passed the day I sold it",
            ],
        ),
        (  # 3: alternatives after a comma, a list of three
            "Which did I visit first, the museum, the zoo or the aquarium?",
            [
                "Which did I visit first, the museum",
                "Which did I visit first, the zoo",
                "Which did I visit first, the aquarium",
            ],
        ),
        (  # 4: two clauses
            "How long did I use my new binoculars before I saw the goldfinches return?",
            ["How long did I use my new binoculars", "I saw the goldfinches return"],
        ),
        (  # 5: coordinated noun phrases between boundary words
            "What is the total cost of Lola's vet visit and flea medication?",
            [
                "What is the total cost of Lola's vet visit",
                "What is the total cost of flea medication",
            ],
        ),
        (  # 5: two people named
            "What do Jon and Gina both have in common?",
            ["What do Jon both have in common", "What do Gina both have in common"],
        ),
        (  # 5: a name and someone of theirs; the verb after stays in both parts
            "What types of pottery have Melanie and her kids made?",
            ["What types of pottery have Melanie made", "What types of pottery have her kids made"],
        ),
    ],
)
def test_questions_about_several_things_are_split(question: str, expected: list[str]) -> None:
    assert parts(question) == expected


@pytest.mark.parametrize(
    "question",
    [
        "What book am I currently reading?",
        "Where did I redeem a $5 coupon on coffee creamer?",
        # a clause joined by "and I": not a list of things
        "I was reading about gardens, and I wondered which roses you recommended?",
        # context sentences before the question: a request, left whole
        "We talked about privacy and security. Which methods did you mention?",
        # a clause without words of its own ("how many days" names nothing)
        "How many days before the party did I order the gift?",
        "Was it this or that?",  # members of stop words only
    ],
)
def test_questions_about_one_thing_are_not_split(question: str) -> None:
    assert parts(question) == []


def test_at_most_max_parts() -> None:
    question = "Which came first, the a1, the b2, the c3, the d4, the e5 or the f6?"
    assert len(parts(question)) == MAX_PARTS


def test_keyword_scores_move_toward_the_best_parts_scaled_to_the_whole_query() -> None:
    whole = [(1, 10.0), (2, 4.0)]
    # part lists: each part's best scores what the whole query's best does (10)
    first, second = [(2, 3.0), (3, 1.5)], [(4, 6.0), (1, 0.6)]
    assert merged_keyword(whole, [first, second], 1.0, depth=20) == [
        (1, 10.0),
        (2, 10.0),
        (4, 10.0),
        (3, 5.0),
    ]
    half = dict(merged_keyword(whole, [first, second], 0.5, depth=20))
    assert half == {1: 10.0, 2: 7.0, 3: 2.5, 4: 5.0}
    # only each part's best `depth` count
    assert dict(merged_keyword(whole, [first], 1.0, depth=1)) == {1: 10.0, 2: 10.0}
    # no whole-query match: the parts' scale is their own best
    assert merged_keyword([], [first], 1.0, depth=20) == [(2, 1.0), (3, 0.5)]


def test_each_parts_nearest_join_the_vector_proposals_once() -> None:
    assert merged_candidates([5, 6], [[6, 7, 8], [9]], depth=2) == [5, 6, 7, 9]


def test_cosines_move_toward_the_best_part() -> None:
    matrix = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    cosine = {1: 0.9, 2: 0.1, 3: 0.5}
    parts_ = [np.array([0.0, 1.0], dtype=np.float32)]
    moved = part_cosines(cosine, [1, 2, 3], matrix, parts_, 0.5)
    assert moved == pytest.approx({1: 0.9, 2: 0.55, 3: 0.65})
    assert part_cosines(cosine, [1, 2, 3], matrix, [], 0.5) == {}


def test_rule_sets_choose_which_rules_split() -> None:
    alternatives = "Which did I visit first, the museum or the zoo?"
    clauses = "How long did I use my new binoculars before I saw the goldfinches return?"
    nouns = "What is the total cost of Lola's vet visit and flea medication?"
    assert [bool(parts(q, "alternatives")) for q in (alternatives, clauses, nouns)] == [
        True,
        False,
        False,
    ]
    assert [bool(parts(q, "no_clauses")) for q in (alternatives, clauses, nouns)] == [
        True,
        False,
        True,
    ]
