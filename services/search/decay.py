"""Decay as a ranking factor (`search.decay_ranking`, off by default: bench/README.md
"Decay as a ranking factor" has the measurement). With it on, recall multiplies
each candidate's score by one of two factors (`search.decay_model`):

- `ebbinghaus` (default; seed 003): the memory's current confidence,
  confidence × e^(−λ·d^0.8) (services/common/forgetting.py, the one home of the
  rule), computed in SQL where the candidates are read. A memory recall keeps
  returning stays near its stored confidence; one nobody recalls fades.
- `importance` (seed 002 "Importance Decay"): importance × rate^days, rate
  `memory.decay_rate`, days since the last access (else since creation).

Both exempt pinned memories and count days from the last access, so an access
(recall records it) resets the clock. Why Ebbinghaus is the one that ranks:
seed 002's factor multiplies by `importance`, so with no access pattern at all
(LoCoMo) it reorders by importance alone, which is not relevance; Ebbinghaus
leaves a store where nothing has aged exactly as it was and only acts on age
and use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from services.common import clock
from services.common.config import MemorySettings, SearchSettings
from services.common.importance import effective_importance
from services.search.scoring import Candidate
from services.storage.db import Reads
from services.storage.dialect import SQLITE, Dialect
from services.storage.search import queries

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class DecayRanking:
    model: Literal["ebbinghaus", "importance"]  # search.decay_model
    importance_rate: float  # memory.decay_rate (seed 002)
    default_rate: float  # memory.decay_rate_default (seed 003)

    @classmethod
    def configured(cls, search: SearchSettings, memory: MemorySettings) -> DecayRanking | None:
        """The ranking `search.decay_ranking` turns on (None: off)."""
        if not search.decay_ranking:
            return None
        return cls(search.decay_model, memory.decay_rate, memory.decay_rate_default)


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
    """Seed 002: importance × rate^days since the last access (else creation)."""
    if pinned:
        return effective_importance(True, base)
    return base * decay_rate ** days_since(last_accessed or created_at, now)


async def apply_decay(
    reads: Reads,
    namespace: str,
    candidates: Sequence[Candidate],
    ranking: DecayRanking,
    *,
    dialect: Dialect = SQLITE,
) -> None:
    """Multiply each candidate's score by its decay factor (recorded in
    `boosts["decay"]`); candidates not found in the namespace are left as they are."""
    if not candidates:
        return
    now = clock.now()
    rows = await reads.fetch_all(
        queries.decay_inputs(
            namespace,
            [c.rowid for c in candidates],
            ranking.default_rate,
            clock.to_text(now),
            dialect=dialect,
        )
    )
    by_rowid = {row["rowid"]: row for row in rows}
    for candidate in candidates:
        row = by_rowid.get(candidate.rowid)
        if row is None:
            continue
        if ranking.model == "ebbinghaus":
            factor = float(row["current_confidence"])
        else:
            factor = decayed_importance(
                row["importance"],
                bool(row["pinned"]),
                row["last_accessed"],
                row["created_at"],
                now,
                ranking.importance_rate,
            )
        candidate.score *= factor
        candidate.boosts["decay"] = factor
