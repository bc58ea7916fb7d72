"""A fact stated again (issue 35): a write whose content a live memory already holds
is deduplicated into that memory, but when its valid time is later than the memory's
latest statement it is a restatement, recorded as a `restated` history event on the
memory (its valid time in the metadata, its recording time the event's).

A write names its valid time (event_time or valid_from) to restate; one that names
none is a retry and records nothing. A yes/no state flipped back ("Ravi has a car" /
"Ravi does not have a car" / "Ravi has a car") otherwise leaves the first memory with
its first valid time, and the middle state reads as the newest. Recall's current-value rule
(services/search/current_value.py) orders one fact's values by their latest
statement as of the read's instant; the store decides what to record. Both read the
rule here; each service keeps its own SQL."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from services.common import clock

RESTATED_EVENT = "restated"  # HISTORY_EVENT_TYPE_RESTATED
REASON = "stated again"


def metadata(valid_time: str) -> dict[str, Any]:
    return {"valid_time": valid_time}


def valid_time_of(metadata_json: str) -> str | None:
    try:
        value = json.loads(metadata_json or "{}").get("valid_time")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


def latest_statement(
    valid_from: str, restatements: Iterable[tuple[str, str]], at: str | None = None
) -> tuple[int, int]:
    """When the memory was last stated, as (seconds, nanos): its own valid time, or
    the latest restatement (`(metadata JSON, recorded at)` rows) recorded and valid by
    `at` (None: now, every restatement)."""
    latest = clock.epoch_from_text(valid_from)
    limit = None if at is None else clock.epoch_from_text(at)
    for metadata_json, recorded_at in restatements:
        stated = valid_time_of(metadata_json)
        if stated is None:
            continue
        when = clock.epoch_from_text(stated)
        if limit is not None and (clock.epoch_from_text(recorded_at) > limit or when > limit):
            continue
        latest = max(latest, when)
    return latest


def is_restatement(new_valid_time: str, latest: tuple[int, int]) -> bool:
    """A write of the same content restates the memory when it is valid later."""
    return clock.epoch_from_text(new_valid_time) > latest
