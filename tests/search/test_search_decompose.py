"""Question decomposition through Recall (issue 19, services/search/decompose.py):
a question about two things ("..., the red kayak or the blue tent?") also
searches each part, so the memory only the second part meets reaches the top
results. Every vector is chosen by the test (a scripted Ollama server)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from http_fakes import VectorBook
from recall_helpers import Stack, ids, vec
from services.search.decompose import parts

QUESTION = "Which did I buy first, the red kayak or the blue tent?"
KAYAK = "Picked up a paddle boat at the lake shop"
TENT = "A camping shelter for two arrived today"
OTHERS = [
    "Booked a table at the noodle place",
    "Watched the rowing final on television",
    "Cleaned the garage on a rainy afternoon",
]
KAYAK_VECTOR, TENT_VECTOR = vec(0.6, axis=2), vec(0.1, axis=3)


def vectors(book: VectorBook) -> None:
    """The question sits near the kayak and far from the tent; each part is
    its own memory's vector; the others are nearer the question than the tent."""
    book.vectors[QUESTION] = vec(1.0)
    first, second = parts(QUESTION)
    book.vectors[first], book.vectors[second] = KAYAK_VECTOR, TENT_VECTOR
    book.vectors[KAYAK], book.vectors[TENT] = KAYAK_VECTOR, TENT_VECTOR
    for axis, text in enumerate(OTHERS, start=4):
        book.vectors[text] = vec(0.5, axis=axis)


@pytest.mark.parametrize("weight", [0.0, 1.0], ids=["off", "on"])
def test_the_second_parts_memory_reaches_the_top_only_with_decomposition(
    vector_stack: Callable[..., tuple[Stack, VectorBook]], weight: float
) -> None:
    stack, book = vector_stack({"search.decompose_weight": weight})
    vectors(book)
    kayak, tent = stack.remember(KAYAK), stack.remember(TENT)
    for text in OTHERS:
        stack.remember(text)
    stack.embed_pending(book)

    response = stack.recall(QUESTION, limit=3)
    assert not response.degraded, list(response.warnings)
    top = ids(response)
    assert top[0] == kayak.id
    if weight:
        assert top[1] == tent.id
        assert response.results[1].vector.score == pytest.approx(1.0, abs=1e-3)
    else:
        assert tent.id not in top
        assert tent.id in ids(stack.recall(QUESTION, limit=10))


def test_a_question_about_one_thing_is_searched_as_before(
    vector_stack: Callable[..., tuple[Stack, VectorBook]],
) -> None:
    """No split: the setting changes nothing (the same ranking and scores,
    the same database read with decomposition off, then on)."""
    query = "what did I buy at the lake"
    assert parts(query) == []
    answers = []
    for weight in (0.0, 1.0):
        stack, book = vector_stack({"search.decompose_weight": weight})
        book.vectors[query] = vec(1.0)
        for axis, text in enumerate([KAYAK, TENT, *OTHERS], start=2):
            book.vectors[text] = vec(0.1 * axis, axis=axis)
            if not weight:
                stack.remember(text)
        stack.embed_pending(book)
        response = stack.recall(query)
        answers.append([(r.memory.content, round(r.score, 6)) for r in response.results])
        stack.search_thread.stop()
        stack.store_thread.stop()
    assert len(answers[0]) == 5
    assert answers[0] == answers[1]
