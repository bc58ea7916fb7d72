"""Timestamps as stored: fixed-width ISO-8601 UTC text, so text order is time order.

The stored form is `YYYY-MM-DDTHH:MM:SS.fffffffffZ`, always 30 characters: the
year is zero-padded to four digits (strftime's `%Y` does not pad years before
1000, which once made such a row unreadable) and the fraction has nine digits,
so every google.protobuf.Timestamp (years 1 to 9999, any nanos) is kept exactly.
Older releases wrote six fraction digits (and, before that, unpadded years);
migration `timestamps_to_nanoseconds` rewrote those rows, and `from_text` still
reads them (a page token or job payload may hold one).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = [
    "MAX_SECONDS",
    "MIN_SECONDS",
    "UTC",
    "current_form",
    "days_ago_text",
    "epoch_from_text",
    "from_text",
    "now",
    "now_text",
    "plus_nanos",
    "text_from_epoch",
    "to_text",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# google.protobuf.Timestamp's range, which is also datetime's: 0001-01-01T00:00:00Z
# to 9999-12-31T23:59:59.999999999Z.
MIN_SECONDS = -62_135_596_800
MAX_SECONDS = 253_402_300_799
TEXT_LENGTH = 30

# Forms older releases wrote: six fraction digits, unpadded years
# (e.g. `1-01-01T00:00:00.000000Z`).
_LENIENT = re.compile(r"(\d{1,4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z")


def _text(moment: datetime, nanos: int) -> str:
    m = moment.astimezone(UTC)
    return (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}T"
        f"{m.hour:02d}:{m.minute:02d}:{m.second:02d}.{nanos:09d}Z"
    )


def to_text(moment: datetime) -> str:
    return _text(moment, moment.microsecond * 1000)


def text_from_epoch(seconds: int, nanos: int) -> str:
    """Stored text for seconds + nanos since the epoch, exactly (in range, see
    services.common.validation.check_timestamp)."""
    return _text(EPOCH + timedelta(seconds=seconds), nanos)


def _parts(text: str) -> tuple[datetime, int]:
    """The whole second and the nanos of a stored text."""
    if len(text) == TEXT_LENGTH:
        return datetime(
            int(text[0:4]), int(text[5:7]), int(text[8:10]),
            int(text[11:13]), int(text[14:16]), int(text[17:19]), tzinfo=UTC,
        ), int(text[20:29])  # fmt: skip
    match = _LENIENT.fullmatch(text)
    if match is None:
        raise ValueError(f"not a stored timestamp: {text[:40]!r}")
    year, month, day, hour, minute, second, fraction = match.groups()
    whole = datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC
    )
    return whole, int((fraction or "0").ljust(9, "0"))


def current_form(text: str) -> str:
    """A stored text (in any form `from_text` reads) in today's fixed-width
    form, so it compares with stored columns as its instant does. ValueError
    when it is not a stored time."""
    whole, nanos = _parts(text)
    return _text(whole, nanos)


def from_text(text: str) -> datetime:
    """Reads the stored form and the forms older releases wrote, as a datetime
    (which holds microseconds: finer nanos are dropped; epoch_from_text keeps
    them)."""
    whole, nanos = _parts(text)
    return whole + timedelta(microseconds=nanos // 1000)


def epoch_from_text(text: str) -> tuple[int, int]:
    """(seconds, nanos) since the epoch for stored text, exactly (no float)."""
    whole, nanos = _parts(text)
    delta = whole - EPOCH
    return delta.days * 86_400 + delta.seconds, nanos


def plus_nanos(text: str, nanos: int) -> str:
    """Stored text `nanos` nanoseconds after stored `text`, exactly."""
    seconds, fraction = epoch_from_text(text)
    total = seconds * 1_000_000_000 + fraction + nanos
    return text_from_epoch(total // 1_000_000_000, total % 1_000_000_000)


def now() -> datetime:
    return datetime.now(UTC)


def now_text() -> str:
    return to_text(now())


def days_ago_text(days: float, reference: datetime | None = None) -> str:
    return to_text((reference or now()) - timedelta(days=days))
