"""Timestamps as stored: fixed-width ISO-8601 UTC text, so text order is time order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["UTC", "days_ago_text", "from_text", "now", "now_text", "to_text"]

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def to_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_FORMAT)


def from_text(text: str) -> datetime:
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC)


def now() -> datetime:
    return datetime.now(UTC)


def now_text() -> str:
    return to_text(now())


def days_ago_text(days: float, reference: datetime | None = None) -> str:
    return to_text((reference or now()) - timedelta(days=days))
