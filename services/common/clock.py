"""Timestamps as stored: fixed-width ISO-8601 UTC text, so text order is time order.

The stored form is `YYYY-MM-DDTHH:MM:SS.ffffffZ`, always 27 characters: the year
is zero-padded to four digits (strftime's `%Y` does not pad years before 1000,
which once made such a row unreadable) and the fraction keeps microseconds.
Engram keeps time to the microsecond: a `google.protobuf.Timestamp` given with
finer nanos is truncated to its microsecond (services.common.convert).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = [
    "MAX_SECONDS",
    "MIN_SECONDS",
    "UTC",
    "days_ago_text",
    "epoch_from_text",
    "from_text",
    "now",
    "now_text",
    "text_from_epoch",
    "to_text",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# google.protobuf.Timestamp's range, which is also datetime's: 0001-01-01T00:00:00Z
# to 9999-12-31T23:59:59.999999999Z.
MIN_SECONDS = -62_135_596_800
MAX_SECONDS = 253_402_300_799
TEXT_LENGTH = 27

# Rows written before years were zero-padded (e.g. `1-01-01T00:00:00.000000Z`).
_LENIENT = re.compile(r"(\d{1,4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z")


def to_text(moment: datetime) -> str:
    m = moment.astimezone(UTC)
    return (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}T"
        f"{m.hour:02d}:{m.minute:02d}:{m.second:02d}.{m.microsecond:06d}Z"
    )


def text_from_epoch(seconds: int, nanos: int) -> str:
    """Stored text for seconds + nanos since the epoch (in range, see
    services.common.validation.check_timestamp); nanos below a microsecond are
    truncated."""
    return to_text(EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000))


def from_text(text: str) -> datetime:
    """Reads the stored form, and the unpadded years that older releases wrote."""
    if len(text) == TEXT_LENGTH:
        return datetime(
            int(text[0:4]), int(text[5:7]), int(text[8:10]),
            int(text[11:13]), int(text[14:16]), int(text[17:19]), int(text[20:26]),
            tzinfo=UTC,
        )  # fmt: skip
    match = _LENIENT.fullmatch(text)
    if match is None:
        raise ValueError(f"not a stored timestamp: {text[:40]!r}")
    year, month, day, hour, minute, second, fraction = match.groups()
    return datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second),
        int((fraction or "0").ljust(6, "0")[:6]), tzinfo=UTC,
    )  # fmt: skip


def epoch_from_text(text: str) -> tuple[int, int]:
    """(seconds, nanos) since the epoch for stored text, exactly (no float)."""
    delta = from_text(text) - EPOCH
    return delta.days * 86_400 + delta.seconds, delta.microseconds * 1000


def now() -> datetime:
    return datetime.now(UTC)


def now_text() -> str:
    return to_text(now())


def days_ago_text(days: float, reference: datetime | None = None) -> str:
    return to_text((reference or now()) - timedelta(days=days))
