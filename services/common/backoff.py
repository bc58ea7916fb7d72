"""Seed 000's backoff, the one formula for every retry: 1 s doubling per
consecutive failure, capped at 30 s, plus up to 0.5 s of random jitter (so
replicas that failed together do not retry together)."""

from __future__ import annotations

import random

BASE_S = 1.0
MAX_S = 30.0
JITTER_S = 0.5


def backoff_s(failures: int) -> float:
    """Seconds to wait after `failures` consecutive failures (the first waits ~1 s)."""
    return min(BASE_S * 2 ** max(failures - 1, 0), MAX_S) + random.uniform(0, JITTER_S)
