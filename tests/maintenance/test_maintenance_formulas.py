"""The health score, its classes and the recommendations, against hand-built
counts (services/maintenance/diagnostics.py; maintenance.proto states the same)."""

from __future__ import annotations

import pytest

from services.maintenance import diagnostics as dx

UP = dx.ProviderReport(reachable=True)


def test_weights_sum_to_one() -> None:
    assert sum(dx.WEIGHTS.values()) == pytest.approx(1.0)


def test_an_empty_store_with_a_reachable_pipeline_is_perfectly_healthy() -> None:
    report = dx.build_report(dx.StoreCounts(), UP)
    assert report.score == 1.0 and report.health == "healthy"
    assert report.recommendations == ()


def test_dead_rate_scores_linearly_to_zero_at_ten_percent() -> None:
    assert dx.component_scores(dx.StoreCounts(total_jobs=100, dead_jobs=5), UP)[
        "dead_jobs"
    ] == pytest.approx(0.5)
    assert dx.component_scores(dx.StoreCounts(total_jobs=100, dead_jobs=30), UP)["dead_jobs"] == 0


def test_stale_leases_score_is_the_share_of_leases_that_are_fresh() -> None:
    counts = dx.StoreCounts(total_jobs=4, leased_jobs=4, stale_leases=1)
    assert dx.component_scores(counts, UP)["stale_leases"] == pytest.approx(0.75)


def test_fts_and_vector_mismatches_count_both_directions() -> None:
    counts = dx.StoreCounts(
        active_memories=10,
        fts_missing=1,
        fts_orphaned=1,
        embedded_memories=4,
        vector_missing=1,
        vector_orphaned=0,
    )
    scores = dx.component_scores(counts, UP)
    assert scores["fts"] == pytest.approx(0.8)
    assert scores["vectors"] == pytest.approx(0.75)


def test_tombstones_cost_nothing_up_to_thirty_percent_then_fall_to_zero() -> None:
    def score(tombstones: int) -> float:
        counts = dx.StoreCounts(active_memories=100 - tombstones, tombstones=tombstones)
        return dx.component_scores(counts, UP)["tombstones"]

    assert score(30) == 1.0
    assert score(65) == pytest.approx(0.5)
    assert score(100) == pytest.approx(0.0)


def test_provider_score() -> None:
    assert dx.provider_score(dx.ProviderReport(reachable=False, error="down")) == 0.0
    providers = (
        dx.Provider("embedding", "ollama", "m", "available"),
        dx.Provider("llm", "ollama", "q", "degraded"),
        dx.Provider("rerank", "none", "", "disabled"),
    )
    assert dx.provider_score(dx.ProviderReport(True, providers=providers)) == pytest.approx(2.5 / 3)


def test_composite_is_the_weighted_sum_and_classes_follow_the_thresholds() -> None:
    counts = dx.StoreCounts(active_memories=10, fts_missing=10)  # fts component 0
    report = dx.build_report(counts, dx.ProviderReport(reachable=False))  # providers 0
    assert report.score == pytest.approx(1 - dx.WEIGHTS["fts"] - dx.WEIGHTS["providers"])
    assert report.health == "degraded"
    assert dx.classify(0.8) == "healthy"
    assert dx.classify(0.79) == "degraded"
    assert dx.classify(0.5) == "degraded"
    assert dx.classify(0.49) == "unhealthy"


def test_recommendations_follow_the_seed_thresholds() -> None:
    def actions(**counts: int) -> list[str]:
        return [r.action for r in dx.recommendations(dx.StoreCounts(**counts))]  # type: ignore[arg-type]

    assert actions(total_jobs=100, dead_jobs=1) == []  # exactly 1% is not above 1%
    assert actions(total_jobs=100, dead_jobs=2) == [dx.REQUEUE_DEAD_JOBS]
    assert actions(leased_jobs=1, stale_leases=1) == [dx.RELEASE_STALE_LEASES]
    assert actions(active_memories=3, fts_orphaned=1) == [dx.REPAIR_FTS]
    assert actions(embedded_memories=3, vector_missing=1) == [dx.REPAIR_VECTORS]
    assert actions(active_memories=70, tombstones=30) == []  # exactly 30% is not above
    assert actions(active_memories=69, tombstones=31) == [dx.RETENTION_SWEEP]
