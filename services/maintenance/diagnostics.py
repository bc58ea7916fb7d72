"""The health score and its recommendations (seed 000 "Maintenance Worker").

Plain functions of the store's raw counts and the pipeline's provider states,
so every formula can be checked against hand-built numbers. The weights are
part of the contract (maintenance.proto documents them) and sum to 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

# The composite score is the weighted mean of these component scores.
WEIGHTS: dict[str, float] = {
    "dead_jobs": 0.20,
    "stale_leases": 0.10,
    "fts": 0.20,
    "vectors": 0.15,
    "tombstones": 0.15,
    "providers": 0.20,
}
HEALTHY_AT = 0.8
DEGRADED_AT = 0.5
DEAD_RATE_ZERO_AT = 0.10  # a dead rate of 10% scores 0
DEAD_RATE_RECOMMEND = 0.01  # seed: requeue dead jobs above 1%
TOMBSTONE_RATIO_RECOMMEND = 0.30  # seed: retention sweep above 30%
DEGRADED_PROVIDER_SCORE = 0.5

REQUEUE_DEAD_JOBS = "requeue_dead_jobs"
RELEASE_STALE_LEASES = "release_stale_leases"
REPAIR_FTS = "repair_fts"
REPAIR_VECTORS = "repair_vectors"
RETENTION_SWEEP = "retention_sweep"
ACTIONS = (REQUEUE_DEAD_JOBS, RELEASE_STALE_LEASES, REPAIR_FTS, REPAIR_VECTORS, RETENTION_SWEEP)


@dataclass(frozen=True)
class OrphanCounts:
    """Rows pointing at a memory that is gone, per table (the store's diagnostics)."""

    memory_links: int = 0
    entity_mentions: int = 0
    entities: int = 0
    document_chunks: int = 0
    vector_index: int = 0
    fts_entries: int = 0
    jobs: int = 0


@dataclass(frozen=True)
class StoreCounts:
    """The store's raw counts (StoreAdminService.GetStoreDiagnostics)."""

    total_jobs: int = 0
    dead_jobs: int = 0
    leased_jobs: int = 0
    stale_leases: int = 0
    active_memories: int = 0
    tombstones: int = 0
    expired_tombstones: int = 0
    fts_rows: int = 0
    fts_missing: int = 0
    fts_orphaned: int = 0
    index_model: str = ""
    vector_rows: int = 0
    embedded_memories: int = 0
    vector_missing: int = 0
    vector_orphaned: int = 0
    db_size_bytes: int = 0
    # Writes refused for a full disk since the store started, the last one's
    # time (None: none), and the free space where the database lives.
    storage_full_count: int = 0
    last_storage_full_time: datetime | None = None
    data_dir_free_bytes: int = 0
    orphans: OrphanCounts = OrphanCounts()
    weak_memories: int = 0  # seed 003: under decay_threshold now (ListWeakMemories)

    @property
    def total_memories(self) -> int:
        return self.active_memories + self.tombstones


@dataclass(frozen=True)
class Provider:
    role: str
    kind: str
    model: str
    state: str  # available | degraded | rate_limited | disabled (not configured)
    last_error: str = ""
    position: int = 0  # an LLM's place in the fallback chain


@dataclass(frozen=True)
class ProviderReport:
    """The pipeline's providers; `reachable` False when GetStatus failed."""

    reachable: bool
    error: str = ""
    providers: tuple[Provider, ...] = ()


@dataclass(frozen=True)
class Recommendation:
    action: str
    reason: str


@dataclass(frozen=True)
class Report:
    counts: StoreCounts
    providers: ProviderReport
    components: dict[str, float]
    score: float
    health: str  # healthy | degraded | unhealthy
    recommendations: tuple[Recommendation, ...] = field(default=())

    @property
    def dead_rate(self) -> float:
        return dead_rate(self.counts)

    @property
    def tombstone_ratio(self) -> float:
        return tombstone_ratio(self.counts)


def dead_rate(counts: StoreCounts) -> float:
    return counts.dead_jobs / counts.total_jobs if counts.total_jobs else 0.0


def tombstone_ratio(counts: StoreCounts) -> float:
    return counts.tombstones / counts.total_memories if counts.total_memories else 0.0


def _mismatch_score(mismatched: int, expected: int) -> float:
    return 1.0 - min(1.0, mismatched / max(1, expected))


def component_scores(counts: StoreCounts, providers: ProviderReport) -> dict[str, float]:
    """Each component in [0, 1]; maintenance.proto states the same formulas."""
    ratio = tombstone_ratio(counts)
    return {
        "dead_jobs": 1.0 - min(1.0, dead_rate(counts) / DEAD_RATE_ZERO_AT),
        "stale_leases": (
            1.0 - counts.stale_leases / counts.leased_jobs if counts.leased_jobs else 1.0
        ),
        "fts": _mismatch_score(counts.fts_missing + counts.fts_orphaned, counts.active_memories),
        "vectors": _mismatch_score(
            counts.vector_missing + counts.vector_orphaned, counts.embedded_memories
        ),
        "tombstones": (
            1.0
            if ratio <= TOMBSTONE_RATIO_RECOMMEND
            else 1.0 - (ratio - TOMBSTONE_RATIO_RECOMMEND) / (1.0 - TOMBSTONE_RATIO_RECOMMEND)
        ),
        "providers": provider_score(providers),
    }


def provider_score(report: ProviderReport) -> float:
    """Unreachable pipeline 0; otherwise the mean of 1 (available, or disabled:
    not configured, as the LLM of a default install) and 0.5 (degraded or rate
    limited: configured and failing) over its providers (1 when it reports none)."""
    if not report.reachable:
        return 0.0
    if not report.providers:
        return 1.0
    values = [
        DEGRADED_PROVIDER_SCORE if p.state in ("degraded", "rate_limited") else 1.0
        for p in report.providers
    ]
    return sum(values) / len(values)


def composite(components: dict[str, float]) -> float:
    score = sum(WEIGHTS[name] * value for name, value in components.items())
    return min(1.0, max(0.0, round(score, 9)))


def classify(score: float) -> str:
    if score >= HEALTHY_AT:
        return "healthy"
    if score >= DEGRADED_AT:
        return "degraded"
    return "unhealthy"


def recommendations(counts: StoreCounts) -> tuple[Recommendation, ...]:
    """The seed's rules, plus vector consistency next to FTS consistency."""
    found: list[Recommendation] = []
    rate = dead_rate(counts)
    if rate > DEAD_RATE_RECOMMEND:
        found.append(Recommendation(REQUEUE_DEAD_JOBS, f"dead rate {rate:.1%} exceeds 1%"))
    if counts.stale_leases:
        found.append(Recommendation(RELEASE_STALE_LEASES, f"{counts.stale_leases} stale lease(s)"))
    if counts.fts_missing or counts.fts_orphaned:
        found.append(
            Recommendation(
                REPAIR_FTS,
                f"full-text index: {counts.fts_missing} live memories missing, "
                f"{counts.fts_orphaned} stray entries",
            )
        )
    if counts.vector_missing or counts.vector_orphaned:
        found.append(
            Recommendation(
                REPAIR_VECTORS,
                f"vector index: {counts.vector_missing} embedded memories missing, "
                f"{counts.vector_orphaned} stray rows",
            )
        )
    ratio = tombstone_ratio(counts)
    if ratio > TOMBSTONE_RATIO_RECOMMEND:
        found.append(Recommendation(RETENTION_SWEEP, f"tombstones are {ratio:.1%} of memories"))
    return tuple(found)


def build_report(counts: StoreCounts, providers: ProviderReport) -> Report:
    components = component_scores(counts, providers)
    score = composite(components)
    return Report(
        counts=counts,
        providers=providers,
        components=components,
        score=score,
        health=classify(score),
        recommendations=recommendations(counts),
    )


def action_names(found: Sequence[Recommendation]) -> list[str]:
    return [r.action for r in found]
