"""Rate limits (cooldown, hourly budget) and the halt tracker, with explicit times."""

from __future__ import annotations

from services.maintenance.limits import HOUR_S, HaltTracker, RateLimiter, RatePolicy


def test_cooldown_refuses_until_it_has_passed() -> None:
    limiter = RateLimiter({"a": RatePolicy(cooldown_s=60, hourly_budget=100)})
    assert limiter.refusal("a", 1000) is None
    limiter.record("a", 1000)
    assert limiter.refusal("a", 1059) == "cooldown"
    assert limiter.refusal("a", 1060) is None


def test_hourly_budget_refuses_until_the_oldest_run_leaves_the_hour() -> None:
    limiter = RateLimiter({"a": RatePolicy(cooldown_s=0, hourly_budget=2)})
    limiter.record("a", 0)
    limiter.record("a", 10)
    assert limiter.refusal("a", 20) == "budget"
    assert limiter.refusal("a", HOUR_S) is None


def test_actions_are_limited_independently() -> None:
    limiter = RateLimiter({"a": RatePolicy(cooldown_s=60, hourly_budget=1), "b": RatePolicy(60, 1)})
    limiter.record("a", 0)
    assert limiter.refusal("a", 1) == "cooldown"
    assert limiter.refusal("b", 1) is None


def test_an_action_halts_after_three_consecutive_non_improving_runs() -> None:
    halts = HaltTracker()
    assert [halts.record("a", improved=False) for _ in range(2)] == [1, 2]
    assert not halts.halted("a")
    assert halts.record("a", improved=False) == 3
    assert halts.halted("a")
    assert not halts.halted("b")


def test_an_improving_run_restarts_the_count() -> None:
    halts = HaltTracker()
    halts.record("a", improved=False)
    halts.record("a", improved=False)
    assert halts.record("a", improved=True) == 0
    assert halts.record("a", improved=False) == 1
    assert not halts.halted("a")


def test_reset_lifts_every_halt() -> None:
    halts = HaltTracker()
    for _ in range(3):
        halts.record("a", improved=False)
    halts.reset()
    assert not halts.halted("a")
