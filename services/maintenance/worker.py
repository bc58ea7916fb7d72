"""The maintenance worker (seed 000 "Maintenance Worker" and "Retention Worker").

A cycle is: diagnostics → recommendations → (execute mode) each repair through
its rate limit and halt tracker, with the score measured again after each one
so the halt tracker judges the action that ran → the health delta. Cycles run
one at a time. The cycle's schedule only starts when autonomous maintenance is
enabled and not frozen; the retention sweep's always does (services/maintenance/
app.py `schedules`). `cycle()` and `retention()` stay callable on demand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from services.common.config import Config
from services.common.errors import EngramError
from services.maintenance import diagnostics as dx
from services.maintenance.clients import PipelineStatusClient, StoreAdminClient, SweptStep
from services.maintenance.limits import HaltTracker, RateLimiter, RatePolicy

log = logging.getLogger("engram.maintenance")

EXECUTED, COOLDOWN, BUDGET, HALTED, FAILED = "executed", "cooldown", "budget", "halted", "failed"
IMPROVEMENT_EPSILON = 1e-9


@dataclass(frozen=True)
class ActionResult:
    action: str
    status: str
    changed: int = 0
    score_before: float = 0.0
    score_after: float = 0.0
    non_improving_runs: int = 0
    detail: str = ""


@dataclass(frozen=True)
class CycleResult:
    mode: str
    before: dx.Report
    actions: tuple[ActionResult, ...]
    after: dx.Report

    @property
    def health_delta(self) -> float:
        return self.after.score - self.before.score


def rate_policies(config: Config) -> dict[str, RatePolicy]:
    p = config.memory.pipelineV2
    return {
        dx.REQUEUE_DEAD_JOBS: RatePolicy(
            p.repairRequeueCooldownMs / 1000, p.repairRequeueHourlyBudget
        ),
        dx.RELEASE_STALE_LEASES: RatePolicy(
            p.repairLeasesCooldownMs / 1000, p.repairLeasesHourlyBudget
        ),
        dx.REPAIR_FTS: RatePolicy(p.repairFtsCooldownMs / 1000, p.repairFtsHourlyBudget),
        dx.REPAIR_VECTORS: RatePolicy(
            p.repairReembedCooldownMs / 1000, p.repairReembedHourlyBudget
        ),
        dx.RETENTION_SWEEP: RatePolicy(
            p.repairRetentionCooldownMs / 1000, p.repairRetentionHourlyBudget
        ),
    }


def schedule_enabled(config: Config) -> bool:
    """Seed 000: the maintenance cycle's interval never starts unless
    autonomousEnabled and not autonomousFrozen (retention does not depend on it)."""
    return bool(
        config.memory.pipelineV2.autonomousEnabled and not config.memory.pipelineV2.autonomousFrozen
    )


class MaintenanceWorker:
    def __init__(
        self,
        store: StoreAdminClient,
        pipeline: PipelineStatusClient,
        *,
        limiter: RateLimiter,
        halts: HaltTracker | None = None,
        configured_mode: str = "observe",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._pipeline = pipeline
        self._limiter = limiter
        self._halts = halts or HaltTracker()
        self._mode = configured_mode
        self._clock = clock
        self._lock = asyncio.Lock()
        self.retention_runs = 0  # sweeps attempted (scheduled or asked for), done or failed
        self._repairs: dict[str, Callable[[], Awaitable[int]]] = {
            dx.REQUEUE_DEAD_JOBS: store.requeue_dead_jobs,
            dx.RELEASE_STALE_LEASES: store.release_stale_leases,
            dx.REPAIR_FTS: store.repair_fts,
            dx.REPAIR_VECTORS: store.repair_vectors,
            dx.RETENTION_SWEEP: self._sweep_count,
        }

    async def diagnose(self) -> dx.Report:
        counts, providers = await asyncio.gather(self._store.counts(), self._pipeline.providers())
        return dx.build_report(counts, providers)

    async def cycle(self, mode: str | None = None) -> CycleResult:
        mode = mode or self._mode
        async with self._lock:
            before = await self.diagnose()
            if not before.recommendations:
                self._halts.reset()
            if mode != "execute":
                return CycleResult(mode, before, (), before)
            results = []
            current = before
            for recommendation in before.recommendations:
                result, current = await self._run(recommendation.action, current)
                results.append(result)
            return CycleResult(mode, before, tuple(results), current)

    async def retention(self) -> list[SweptStep]:
        try:
            return await self._store.sweep_retention()
        finally:
            self.retention_runs += 1

    async def _run(self, action: str, current: dx.Report) -> tuple[ActionResult, dx.Report]:
        """One guarded repair; returns its result and the report after it."""
        if self._halts.halted(action):
            return ActionResult(action, HALTED, score_before=current.score), current
        now = self._clock()
        refusal = self._limiter.refusal(action, now)
        if refusal is not None:
            status = COOLDOWN if refusal == "cooldown" else BUDGET
            return ActionResult(action, status, score_before=current.score), current
        try:
            changed = await self._repairs[action]()
        except EngramError as exc:
            if exc.reason == "STORE_UNAVAILABLE":
                raise
            detail = f"{exc.reason}: {exc.message}"
            return ActionResult(action, FAILED, score_before=current.score, detail=detail), current
        self._limiter.record(action, now)
        after = await self.diagnose()
        improved = after.score > current.score + IMPROVEMENT_EPSILON
        runs = self._halts.record(action, improved)
        log.info(
            "maintenance action ran",
            extra={"action": action, "changed": changed, "delta": after.score - current.score},
        )
        return (
            ActionResult(action, EXECUTED, changed, current.score, after.score, runs),
            after,
        )

    async def _sweep_count(self) -> int:
        return sum(step.removed for step in await self._store.sweep_retention())


async def run_every(interval_s: float, tick: Callable[[], Awaitable[Any]], name: str) -> None:
    """Run `tick` now and then every `interval_s`; a failed tick is logged, not fatal."""
    while True:
        try:
            await tick()
        except Exception:
            log.exception("scheduled maintenance task failed", extra={"task": name})
        await asyncio.sleep(interval_s)
