"""Ebbinghaus decay and access reinforcement (seed 003 "Ebbinghaus decay"):
the one home of both rules, for the store (weak memories, reinforcement) and
search (decay as a ranking factor).

    current confidence = confidence × e^(−λ · d^0.8)

- `confidence` is stored (column `memories.confidence`, 1.0 when written) and
  changes only by reinforcement: each recorded access adds
  0.05 · ln(1 + n / 20), n the memory's access count after that access,
  capped at 1.0.
- `λ` is the memory's own decay rate (column `decay_rate`), or
  `memory.decay_rate_default` (0.1) when it has none; 0 means protected.
- `d` is days since the last access, or since the memory was written
  (`created_at`, transaction time) when it was never accessed: decay models the
  store forgetting what it holds, so an old event recorded today is fresh,
  whatever its `event_time` says.
- Pinned memories are exempt: their current confidence is the stored one.

Why the decayed value is computed at read and not stored: the seed's nightly job
multiplied the stored confidence by e^(−λ·d^0.8) every night with d counted
from the same last access, so the result compounded (after n nights the factor
is Π e^(−λ·i^0.8), not the curve) and depended on how often the job ran. At
read, every reader sees exactly the curve at that instant, an access (which
resets d) needs no rewrite of the decayed value, and nothing has to run for a
memory to fade.
"""

from __future__ import annotations

import math
from typing import Any

from services.storage.dialect import SQLITE, Dialect

DECAY_EXPONENT = 0.8
REINFORCEMENT_STEP = 0.05
REINFORCEMENT_SCALE = 20.0
MAX_CONFIDENCE = 1.0


def reinforced(confidence: float, access_count: int) -> float:
    """Stored confidence after one access that brought the count to `access_count`."""
    boost = REINFORCEMENT_STEP * math.log1p(max(access_count, 0) / REINFORCEMENT_SCALE)
    return min(MAX_CONFIDENCE, confidence + boost)


def current_confidence_sql(
    alias: str, default_rate: float, now: str, *, dialect: Dialect = SQLITE
) -> tuple[str, list[Any]]:
    """SQL for a memory's current (decayed) confidence at `now` (stored time
    text), and its parameters. Only the day count differs by backend: SQLite's
    julianday reads the stored form, Postgres's timestamptz does (to the
    microsecond; the ninth-digit nanoseconds are far below a day's resolution).
    A last access in the future counts as now (d never negative)."""
    m = alias
    days = dialect.days_since("?", f"coalesce({m}.last_accessed, {m}.created_at)")
    exponent = dialect.exp_argument(f"-coalesce({m}.decay_rate, ?) * pow({days}, {DECAY_EXPONENT})")
    return (
        f"(CASE WHEN {m}.pinned <> 0 THEN {m}.confidence ELSE {m}.confidence * exp("
        f"{exponent}) END)",
        [default_rate, now],
    )
