"""bench/longmemeval.py's metrics follow the official retrieval script's definitions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

QUESTION = {
    "haystack_session_ids": ["s1", "s2", "s3"],
    "haystack_dates": [
        "2023/05/30 (Tue) 23:42",
        "2023/06/01 (Thu) 08:05",
        "2023/06/02 (Fri) 10:00",
    ],
    "haystack_sessions": [
        [
            {"role": "user", "content": "a", "has_answer": True},
            {"role": "assistant", "content": "b"},
        ],
        [{"role": "user", "content": "c"}],
        [{"role": "user", "content": "d", "has_answer": True}],
    ],
    "answer_session_ids": ["s1", "s3"],
}


def test_session_dates_parse_with_their_weekday_and_clock(runner) -> None:  # type: ignore[no-untyped-def]
    assert runner.session_time("2023/05/30 (Tue) 23:42") == datetime(
        2023, 5, 30, 23, 42, tzinfo=UTC
    )


def test_turn_and_session_metrics(runner) -> None:  # type: ignore[no-untyped-def]
    ranked = ["s2:0", "s1:1", "s1:0"] + [f"x{i}:0" for i in range(3)] + ["s3:0"]
    metrics = runner.score(ranked, QUESTION)
    assert metrics["turn R@5"] == 0.5  # s1:0 at rank 3; s3:0 at rank 7
    assert metrics["turn R@10"] == 1.0
    ideal = 1 + 1 / 1.584962500721156
    assert metrics["nDCG@10"] == pytest.approx((1 / 2 + 1 / 3) / ideal)
    # sessions by first appearance: s2, s1, x0, x1, x2, s3
    assert metrics["any@5"] == 1.0
    assert metrics["all@5"] == 0.0
    assert metrics["all@10"] == 1.0


def test_a_ranking_without_evidence_scores_zero(runner) -> None:  # type: ignore[no-untyped-def]
    metrics = runner.score(["s2:0"], QUESTION)
    assert metrics == {
        "turn R@5": 0.0,
        "turn R@10": 0.0,
        "nDCG@10": 0.0,
        "any@5": 0.0,
        "all@5": 0.0,
        "all@10": 0.0,
    }


def test_questions_interleave_the_types_and_leave_abstention_out(runner, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [
        {"question_id": "a1", "question_type": "a"},
        {"question_id": "a2", "question_type": "a"},
        {"question_id": "a3_abs", "question_type": "a"},
        {"question_id": "b1", "question_type": "b"},
    ]
    path = tmp_path / "q.json"
    path.write_text(__import__("json").dumps(rows))
    assert [q["question_id"] for q in runner.scored_questions(path)] == ["a1", "b1", "a2"]


def test_blank_turns_are_not_imported_nor_embedded(runner) -> None:  # type: ignore[no-untyped-def]
    question = {
        "haystack_session_ids": ["s1"],
        "haystack_dates": ["2023/05/30 (Tue) 23:42"],
        "haystack_sessions": [
            [{"role": "user", "content": "  two\n spaces "}, {"role": "user", "content": "\u200b"}]
        ],
    }
    assert list(runner.haystack_texts([question])) == ["two spaces"]  # as the store keeps it


def test_folds_depend_on_the_question_id_alone(runner) -> None:  # type: ignore[no-untyped-def]
    folds = [runner.fold_of(f"q{i}", 5) for i in range(200)]
    assert folds == [runner.fold_of(f"q{i}", 5) for i in range(200)]
    assert set(folds) == {0, 1, 2, 3, 4}


def test_baselines_rank_by_words_meaning_and_both(baselines) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    docs = ["the cat sat", "dogs bark loudly", "a cat and a dog", "nothing here"]
    assert baselines.bm25("cat dog", docs)[0] == 2  # the only one with both words
    assert baselines.bm25("cat", docs)[:2] in ([0, 2], [2, 0])
    vectors = np.eye(4, dtype=np.float32)
    assert baselines.dense(vectors[3], vectors)[0] == 3
    # RRF: second and first beats first and third, which beats third and second
    assert baselines.rrf([0, 1, 2], [1, 2, 0]) == [1, 0, 2]
    assert baselines.rrf([0, 1], [1, 0]) == [0, 1]  # a tie: the lower index first
