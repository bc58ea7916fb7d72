"""Seed 000's backoff, the one formula for every retry: 1 s doubling per
consecutive failure, capped at 30 s, plus up to 0.5 s of random jitter (so
replicas that failed together do not retry together)."""

from __future__ import annotations

import email.utils
import random
import time

BASE_S = 1.0
MAX_S = 30.0
JITTER_S = 0.5


def backoff_s(failures: int) -> float:
    """Seconds to wait after `failures` consecutive failures (the first waits ~1 s)."""
    return min(BASE_S * 2 ** max(failures - 1, 0), MAX_S) + random.uniform(0, JITTER_S)


def retry_after_s(header: str | None) -> float | None:
    """An HTTP Retry-After value (seconds, or an HTTP date) in seconds from now;
    None when absent or unreadable."""
    if not header:
        return None
    text = header.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def wait_within(wait_s: float | None, deadline: float) -> float | None:
    """How long to wait before asking again when the answer said `wait_s`
    (Retry-After), or None when it said nothing or the wait would not end
    before `deadline` (time.monotonic()): a call never outlives its timeout."""
    if wait_s is None or time.monotonic() + wait_s >= deadline:
        return None
    return wait_s
