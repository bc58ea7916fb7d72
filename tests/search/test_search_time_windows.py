"""The ranges a question names (services.search.text.time_windows): absolute
dates as before, and relative ones by the time of asking (RecallRequest.asked_at)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.search.text import time_windows

ASKED = datetime(2023, 10, 5, 12, tzinfo=UTC)


def day(y: int, m: int, d: int, h: int = 0) -> datetime:
    return datetime(y, m, d, h, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "windows"),
    [
        ("what happened yesterday", [(day(2023, 10, 4), day(2023, 10, 5))]),
        ("anything today?", [(day(2023, 10, 5), day(2023, 10, 6))]),
        ("what did I do last week", [(day(2023, 9, 28, 12), day(2023, 10, 6, 12))]),
        ("after: last_week", [(day(2023, 9, 28, 12), day(2023, 10, 6, 12))]),
        ("bills from last_month", [(day(2023, 9, 5, 12), day(2023, 10, 6, 12))]),
        ("three days ago", [(day(2023, 10, 1, 12), day(2023, 10, 3, 12))]),
        ("camping in July", [(day(2023, 7, 1), day(2023, 8, 1))]),
        ("the party in December", [(day(2022, 12, 1), day(2023, 1, 1))]),  # the latest December
        ("in May 2023", [(day(2023, 5, 1), day(2023, 6, 1))]),
        ("notes from 2023-05-08", [(day(2023, 5, 8), day(2023, 5, 9))]),
        ("2023-02-30 is no date", []),
        ("I may go", []),
        ("green tea", []),
    ],
)
def test_windows_by_the_time_of_asking(
    query: str, windows: list[tuple[datetime, datetime]]
) -> None:
    assert time_windows(query, ASKED) == windows


def test_relative_phrases_need_the_time_of_asking() -> None:
    assert time_windows("what happened yesterday") == []
    assert time_windows("in May 2023") == [(day(2023, 5, 1), day(2023, 6, 1))]
