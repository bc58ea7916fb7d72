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
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
# A month named without a year ("in July"): the latest such month by the time of asking.
_MONTH_ALONE = re.compile(rf"\b(?:in|during|since|of|last)\s+({_MONTH})\b(?!\.?,?\s*\d)", re.I)
_RELATIVE = re.compile(
    r"\b(yesterday|today|tonight|this morning|(?:last|past|this)[ _](?:week|month|year|weekend)"
    r"|(?:a|an|one|two|three|four|five|six|\d{1,3}) (?:day|week|month|year)s? ago)\b",
    re.I,
)
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
DAY_TOLERANCE = timedelta(days=3)


def time_windows(query: str, asked_at: datetime | None = None) -> list[tuple[datetime, datetime]]:
    """Half-open UTC windows for explicit dates in the query: a day (±3 days,
    also as YYYY-MM-DD), a month, or a year. The most specific reading of each
    phrase wins; dates that cannot exist ("31 February", "December 9999") are
    just words. With `asked_at` (the time of asking), relative ones too:
    yesterday, today, last/past/this week, month or year (`last_week` as
    well), "N days/weeks/months/years ago" (± a quarter of the span), and a
    month without a year (its latest occurrence by then)."""
    windows: list[tuple[datetime, datetime]] = []
    if asked_at is not None:
        windows.extend(relative_windows(query, asked_at))

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
    for match in _ISO_DAY.finditer(text):
        year, month, day = int(match[1]), int(match[2]), int(match[3])
        add((year, month, day), day_after(year, month, day), timedelta(0))
    text = _ISO_DAY.sub(" ", text)
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


def relative_windows(query: str, asked_at: datetime) -> list[tuple[datetime, datetime]]:
    """The windows relative phrases name, by the time of asking (time_windows)."""
    now = asked_at.astimezone(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    windows: list[tuple[datetime, datetime]] = []
    spans = {"day": 1, "week": 7, "weekend": 7, "month": 30, "year": 365}
    for match in _RELATIVE.finditer(query):
        phrase = match[1].lower().replace("_", " ")
        if phrase == "yesterday":
            windows.append((today - timedelta(days=1), today))
        elif phrase in ("today", "tonight", "this morning"):
            windows.append((today, today + timedelta(days=1)))
        elif phrase.endswith(" ago"):
            count_word, unit = phrase.split()[:2]
            count = int(count_word) if count_word.isdigit() else _COUNTS[count_word]
            span = timedelta(days=spans[unit.rstrip("s")])
            centre = now - count * span
            margin = max(span / 4, timedelta(days=1))
            windows.append((centre - margin, centre + margin))
        else:
            span = timedelta(days=spans[phrase.split()[1]])
            windows.append((now - span, now + timedelta(days=1)))
    for match in _MONTH_ALONE.finditer(query):
        month = _MONTHS[match[1].lower()]
        year = now.year if month <= now.month else now.year - 1
        windows.append(
            (
                datetime(year, month, 1, tzinfo=UTC),
                datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC),
            )
        )
    return windows
