"""The stored time form (services.common.clock): fixed width at every year, so
text order is time order, and exact to the nanosecond."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from services.common import clock

_moments = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999)
).map(lambda moment: moment.replace(tzinfo=UTC))


def test_years_before_1000_are_zero_padded() -> None:
    assert clock.to_text(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000000000Z"
    assert clock.to_text(datetime(999, 12, 31, 23, 59, 59, 5, tzinfo=UTC)) == (
        "0999-12-31T23:59:59.000005000Z"
    )


@given(_moments, _moments)
def test_text_order_is_time_order_and_text_reads_back_exactly(a: datetime, b: datetime) -> None:
    text_a, text_b = clock.to_text(a), clock.to_text(b)
    assert len(text_a) == clock.TEXT_LENGTH
    assert (text_a < text_b) == (a < b)
    assert clock.from_text(text_a) == a


def test_epoch_seconds_cover_timestamps_whole_range() -> None:
    assert clock.text_from_epoch(clock.MIN_SECONDS, 0) == "0001-01-01T00:00:00.000000000Z"
    assert clock.text_from_epoch(clock.MAX_SECONDS, 999_999_999) == (
        "9999-12-31T23:59:59.999999999Z"
    )
    assert clock.epoch_from_text("0001-01-01T00:00:00.000000000Z") == (clock.MIN_SECONDS, 0)
    assert clock.epoch_from_text("1969-12-31T23:59:59.500000001Z") == (-1, 500_000_001)


_seconds = st.integers(min_value=clock.MIN_SECONDS, max_value=clock.MAX_SECONDS)
_nanos = st.integers(min_value=0, max_value=999_999_999)


@given(_seconds, _nanos, _seconds, _nanos)
def test_every_timestamp_round_trips_exactly_and_sorts_as_text(
    seconds_a: int, nanos_a: int, seconds_b: int, nanos_b: int
) -> None:
    text_a = clock.text_from_epoch(seconds_a, nanos_a)
    text_b = clock.text_from_epoch(seconds_b, nanos_b)
    assert len(text_a) == clock.TEXT_LENGTH
    assert clock.epoch_from_text(text_a) == (seconds_a, nanos_a)
    assert (text_a < text_b) == ((seconds_a, nanos_a) < (seconds_b, nanos_b))


def test_six_digit_fractions_written_by_older_releases_still_read() -> None:
    assert clock.epoch_from_text("1970-01-01T00:00:01.000002Z") == (1, 2000)


def test_unpadded_years_written_by_older_releases_still_read() -> None:
    assert clock.from_text("1-01-01T00:00:00.000000Z") == datetime(1, 1, 1, tzinfo=UTC)
    assert clock.from_text("999-06-01T12:00:00.25Z") == datetime(
        999, 6, 1, 12, 0, 0, 250000, tzinfo=UTC
    )
