"""Guards around repair actions (seed 000 "Maintenance Worker"): a cooldown and
an hourly budget per action, and the halt tracker that stops an action after
consecutive runs that did not improve the health score.

Time is passed in (monotonic seconds), so the rules are plain and testable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

HOUR_S = 3600.0
HALT_AFTER = 3  # consecutive non-improving runs


@dataclass(frozen=True)
class RatePolicy:
    cooldown_s: float
    hourly_budget: int


class RateLimiter:
    def __init__(self, policies: Mapping[str, RatePolicy]) -> None:
        self._policies = dict(policies)
        self._runs: dict[str, deque[float]] = {name: deque() for name in policies}

    def refusal(self, action: str, now: float) -> str | None:
        """None when `action` may run at `now`; else "cooldown" or "budget"."""
        policy = self._policies[action]
        runs = self._runs[action]
        while runs and runs[0] <= now - HOUR_S:
            runs.popleft()
        if runs and now - runs[-1] < policy.cooldown_s:
            return "cooldown"
        if len(runs) >= policy.hourly_budget:
            return "budget"
        return None

    def record(self, action: str, now: float) -> None:
        self._runs[action].append(now)


class HaltTracker:
    """An action halts after HALT_AFTER consecutive runs that do not improve the
    score, for the worker's lifetime, unless a cycle with no recommendations
    (health is good) resets the tracker."""

    def __init__(self, halt_after: int = HALT_AFTER) -> None:
        self._halt_after = halt_after
        self._non_improving: dict[str, int] = {}

    def halted(self, action: str) -> bool:
        return self._non_improving.get(action, 0) >= self._halt_after

    def record(self, action: str, improved: bool) -> int:
        """Count one run; returns the action's consecutive non-improving runs."""
        count = 0 if improved else self._non_improving.get(action, 0) + 1
        self._non_improving[action] = count
        return count

    def reset(self) -> None:
        self._non_improving.clear()
