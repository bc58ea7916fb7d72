"""Errors never carry a client's unbounded input (services.common.errors)."""

from __future__ import annotations

from services.common.errors import MAX_MESSAGE_CHARS, EngramError, InvalidArgument, echo


def test_echo_quotes_short_values_and_cuts_long_ones() -> None:
    assert echo("gossip") == "'gossip'"
    shown = echo("x" * 1_000_000)
    assert len(shown) < 100 and shown.endswith("(1000000 characters)")


def test_messages_descriptions_and_metadata_are_cut() -> None:
    huge = "y" * 1_000_000
    error = EngramError(huge, metadata={"k": huge})
    assert len(error.message) == MAX_MESSAGE_CHARS
    assert len(error.metadata["k"]) == MAX_MESSAGE_CHARS
    invalid = InvalidArgument("field", huge)
    assert len(invalid.description) == MAX_MESSAGE_CHARS
    assert len(invalid.message) == MAX_MESSAGE_CHARS
