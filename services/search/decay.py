"""Importance decay (seed 002 "Importance Decay") and its use as a ranking factor.

importance(t) = base_importance × decay_rate ^ days_since_access

Days are counted from the last access (recall records it, so an access resets
the clock), falling back to creation for a memory never recalled. Pinned
memories carry importance 1.0 and never decay. With `search.decay_ranking`
on, recall multiplies each candidate's score by its effective importance, so
a stale, unimportant memory ranks below an equally relevant fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from services.common import clock
from services.common.db import Reads
from services.common.importance import effective_importance
from services.search import queries
from services.search.scoring import Candidate

SECONDS_PER_DAY = 86400.0


def days_since(moment: str, now: datetime) -> float:
    """Whole and fractional days from `moment` (stored text) to `now`; never negative."""
    return max(0.0, (now - clock.from_text(moment)).total_seconds() / SECONDS_PER_DAY)


def decayed_importance(
    base: float,
    pinned: bool,
    last_accessed: str | None,
    created_at: str,
    now: datetime,
    decay_rate: float,
) -> float:
    if pinned:
        return effective_importance(True, base)
    return base * decay_rate ** days_since(last_accessed or created_at, now)


async def apply_decay(
    reads: Reads, namespace: str, candidates: Sequence[Candidate], decay_rate: float
) -> None:
    """Multiply each candidate's score by its effective importance (recorded in
    `boosts["decay"]`); candidates not found in the namespace are left as they are."""
    if not candidates:
        return
    now = clock.now()
    rows = await reads.fetch_all(queries.decay_inputs(namespace, [c.rowid for c in candidates]))
    by_rowid = {row[0]: row for row in rows}
    for candidate in candidates:
        row = by_rowid.get(candidate.rowid)
        if row is None:
            continue
        factor = decayed_importance(row[1], bool(row[2]), row[3], row[4], now, decay_rate)
        candidate.score *= factor
        candidate.boosts["decay"] = factor
