"""Query text understanding without an LLM: keyword terms and calendar references."""

from __future__ import annotations

import calendar
import contextlib
import re
from datetime import UTC, datetime, timedelta

# One rule for a keyword query's terms, shared with ForgetMemories' query.
from services.common.fts import keyword_terms as keyword_terms

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s*(\d{{4}})\b", re.I
)
_MONTH_DAY_YEAR = re.compile(
    rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s*(\d{{4}})\b", re.I
)
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
DAY_TOLERANCE = timedelta(days=3)


def time_windows(query: str) -> list[tuple[datetime, datetime]]:
    """Half-open UTC windows for explicit dates in the query: a day (±3 days),
    a month, or a year. The most specific reading of each phrase wins; dates
    that cannot exist ("31 February", "December 9999") are just words."""
    windows: list[tuple[datetime, datetime]] = []

    def add(start: tuple[int, int, int], end: tuple[int, int, int], margin: timedelta) -> None:
        with contextlib.suppress(ValueError, OverflowError):
            windows.append(
                (datetime(*start, tzinfo=UTC) - margin, datetime(*end, tzinfo=UTC) + margin)
            )

    def day_after(year: int, month: int, day: int) -> tuple[int, int, int]:
        try:
            following = datetime(year, month, day) + timedelta(days=1)
        except (ValueError, OverflowError):
            return (0, 0, 0)  # not a date: `add` drops it
        return (following.year, following.month, following.day)

    text = query
    for match in _DAY_MONTH_YEAR.finditer(text):
        year, month, day = int(match[3]), _MONTHS[match[2].lower()], int(match[1])
        add((year, month, day), day_after(year, month, day), DAY_TOLERANCE)
    text = _DAY_MONTH_YEAR.sub(" ", text)
    for match in _MONTH_DAY_YEAR.finditer(text):
        year, month, day = int(match[3]), _MONTHS[match[1].lower()], int(match[2])
        add((year, month, day), day_after(year, month, day), DAY_TOLERANCE)
    text = _MONTH_DAY_YEAR.sub(" ", text)
    for match in _MONTH_YEAR.finditer(text):
        year, month = int(match[2]), _MONTHS[match[1].lower()]
        add((year, month, 1), (year + (month == 12), month % 12 + 1, 1), timedelta(0))
    text = _MONTH_YEAR.sub(" ", text)
    for match in _YEAR.finditer(text):
        year = int(match[1])
        add((year, 1, 1), (year + 1, 1, 1), timedelta(0))
    return windows
