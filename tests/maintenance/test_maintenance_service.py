"""MaintenanceService over gRPC against a real store (and pipeline): the
diagnostics report, observe vs execute, rate limits, the halt tracker, the
health delta, retention, frozen and unreachable dependencies, the schedule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from admin_helpers import AdminStore
from backend_db import FTS5_ONLY
from engram.common.v1 import job_pb2, provider_pb2
from engram.maintenance.v1 import maintenance_pb2 as pb
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import wait_for
from services.common import provider_state
from services.common.config import load_config
from services.maintenance import diagnostics as dx
from services.maintenance.worker import schedule_enabled

OBSERVE, EXECUTE = pb.MAINTENANCE_MODE_OBSERVE, pb.MAINTENANCE_MODE_EXECUTE
FTS, SWEEP = pb.MAINTENANCE_ACTION_REPAIR_FTS, pb.MAINTENANCE_ACTION_RETENTION_SWEEP
LEASES = pb.MAINTENANCE_ACTION_RELEASE_STALE_LEASES
Build = Callable[..., Any]  # tests/maintenance/conftest.py `maintained`
Maintained = Any


def corrupt_fts(st: AdminStore, memory_id: str) -> None:
    """Drop a live memory's full-text entry, as a crash or a bug could."""
    st.execute(
        "INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', ?, ?)",
        st.rowid(memory_id),
        st.scalar("SELECT content FROM memories WHERE id = ?", memory_id),
    )


def run(m: Maintained, mode: pb.MaintenanceMode.ValueType = EXECUTE) -> pb.RunMaintenanceResponse:
    return m.maintenance.RunMaintenance(pb.RunMaintenanceRequest(mode=mode))


def diagnostics(m: Maintained) -> pb.GetDiagnosticsResponse:
    return m.maintenance.GetDiagnostics(pb.GetDiagnosticsRequest())


@FTS5_ONLY  # corrupt_fts
def test_report_components_and_weights_match_the_store_state(maintained: Build) -> None:
    m = maintained()
    ids = [m.st.remember(f"note {word} for the report") for word in ("one", "two", "three", "four")]
    m.st.delete(ids[3])
    corrupt_fts(m.st, ids[0])
    report = diagnostics(m)
    assert (report.index.active_memories, report.index.fts_rows) == (3, 2)
    assert (report.index.fts_missing, report.index.fts_orphaned) == (1, 0)
    assert (report.storage.tombstones, report.storage.total_memories) == (1, 4)
    assert report.storage.tombstone_ratio == pytest.approx(0.25)
    assert report.storage.db_size_bytes > 0
    assert not report.providers.pipeline_reachable and report.providers.error
    components = {c.name: (c.score, c.weight) for c in report.components}
    assert components["fts"] == (pytest.approx(2 / 3), 0.20)
    assert components["providers"] == (0.0, 0.20)
    expected = sum(score * weight for score, weight in components.values())
    assert report.score == pytest.approx(expected)
    assert report.score == pytest.approx(1 - 0.2 / 3 - 0.2)
    assert report.health == pb.HEALTH_CLASS_DEGRADED  # 0.73: at least 0.5, under 0.8
    assert [r.action for r in report.recommendations] == [FTS]


def test_the_report_carries_the_stores_orphan_counts(maintained: Build) -> None:
    m = maintained()
    memory_id = m.st.remember("a note with jobs")
    assert diagnostics(m).storage.orphans == pb.OrphanCounts()
    m.st.execute("DELETE FROM memories WHERE id = ?", memory_id)  # as a bug could
    orphans = diagnostics(m).storage.orphans
    assert orphans == pb.OrphanCounts(jobs=2)  # its embed and extract jobs


def test_provider_health_comes_from_the_pipeline(maintained: Build) -> None:
    m = maintained(pipeline=True)
    report = diagnostics(m)
    assert report.providers.pipeline_reachable
    states = [p.state for p in report.providers.providers]
    assert states and set(states) <= {
        provider_pb2.PROVIDER_STATE_AVAILABLE,
        provider_pb2.PROVIDER_STATE_DEGRADED,
        provider_pb2.PROVIDER_STATE_DISABLED,
    }
    expected = dx.provider_score(
        dx.ProviderReport(
            True,
            providers=tuple(
                dx.Provider(p.role, p.kind, p.model, provider_state.from_proto(p.state))
                for p in report.providers.providers
            ),
        )
    )
    assert {c.name: c.score for c in report.components}["providers"] == pytest.approx(expected)


@FTS5_ONLY  # corrupt_fts
def test_observe_recommends_and_writes_nothing(maintained: Build) -> None:
    m = maintained()
    memory = m.st.remember("observe mode must not write")
    corrupt_fts(m.st, memory)
    before = m.st.snapshot()
    audited = m.st.scalar("SELECT count(*) FROM maintenance_audit")  # the start-up sweep's
    result = run(m, OBSERVE)
    assert result.mode == OBSERVE
    assert [r.action for r in result.recommendations] == [FTS]
    assert list(result.actions) == []
    assert result.health_delta == 0 and result.score_after == result.score_before
    assert m.st.snapshot() == before
    assert m.st.scalar("SELECT count(*) FROM maintenance_audit") == audited


@FTS5_ONLY  # corrupt_fts
def test_the_configured_mode_applies_when_the_request_names_none(maintained: Build) -> None:
    m = maintained()
    memory = m.st.remember("default mode is observe")
    corrupt_fts(m.st, memory)
    result = m.maintenance.RunMaintenance(pb.RunMaintenanceRequest())
    assert result.mode == OBSERVE and list(result.actions) == []


def test_a_mode_no_version_defines_is_invalid_argument(maintained: Build) -> None:
    m = maintained()
    code, _, fields = error_of(lambda: run(m, pb.MaintenanceMode.ValueType(7)))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["mode"])


@FTS5_ONLY  # corrupt_fts
def test_execute_repairs_and_reports_the_health_delta(maintained: Build) -> None:
    m = maintained()
    memory = m.st.remember("execute mode repairs the index")
    m.st.remember("another memory to keep")
    corrupt_fts(m.st, memory)
    result = run(m)
    [action] = result.actions
    assert (action.action, action.status, action.changed) == (FTS, pb.ACTION_STATUS_EXECUTED, 1)
    assert action.score_after > action.score_before
    assert result.score_after > result.score_before
    assert result.health_delta == pytest.approx(result.score_after - result.score_before)
    after = diagnostics(m)
    assert (after.index.fts_missing, after.index.fts_orphaned) == (0, 0)
    assert list(after.recommendations) == []
    assert list(run(m).recommendations) == []


@FTS5_ONLY  # corrupt_fts
def test_cooldown_skips_a_repeat_within_the_window(maintained: Build) -> None:
    m = maintained()  # repairFtsCooldownMs defaults to 5 minutes
    memory = m.st.remember("cooldown applies to repeats")
    corrupt_fts(m.st, memory)
    assert run(m).actions[0].status == pb.ACTION_STATUS_EXECUTED
    corrupt_fts(m.st, memory)
    snapshot = m.st.snapshot()
    assert run(m).actions[0].status == pb.ACTION_STATUS_COOLDOWN
    assert m.st.snapshot() == snapshot


@FTS5_ONLY  # corrupt_fts
def test_hourly_budget_skips_once_used(maintained: Build) -> None:
    m = maintained(
        **{
            "memory.pipelineV2.repairFtsCooldownMs": 0,
            "memory.pipelineV2.repairFtsHourlyBudget": 1,
        }
    )
    memory = m.st.remember("budget applies per hour")
    corrupt_fts(m.st, memory)
    assert run(m).actions[0].status == pb.ACTION_STATUS_EXECUTED
    corrupt_fts(m.st, memory)
    assert run(m).actions[0].status == pb.ACTION_STATUS_BUDGET_EXHAUSTED


@FTS5_ONLY  # corrupt_fts
def test_an_action_that_does_not_help_halts_after_three_runs_until_health_is_good(
    maintained: Build,
) -> None:
    m = maintained(**{"memory.pipelineV2.repairRetentionCooldownMs": 0})
    ids = [m.st.remember(f"recent tombstone number {n}") for n in range(3)]
    m.st.remember("the one live memory")
    for memory_id in ids:  # 75% tombstones, none past the window: sweeping cannot help
        m.st.delete(memory_id)
    runs = [run(m).actions[0] for _ in range(4)]
    assert [(a.action, a.status) for a in runs[:3]] == [(SWEEP, pb.ACTION_STATUS_EXECUTED)] * 3
    assert [a.non_improving_runs for a in runs[:3]] == [1, 2, 3]
    assert runs[3].status == pb.ACTION_STATUS_HALTED
    for memory_id in ids:  # health is good again: a cycle with no recommendations
        m.st.store.RecoverMemory(store_pb2.RecoverMemoryRequest(id=memory_id, reason="back"))
    assert list(run(m).recommendations) == []
    for memory_id in ids:
        m.st.delete(memory_id)
    assert run(m).actions[0].status == pb.ACTION_STATUS_EXECUTED


def test_stale_leases_are_released_by_execute(maintained: Build) -> None:
    from engram.store.internal.v1 import job_queue_pb2 as jq

    m = maintained()
    m.st.remember("a memory whose extract job is leased")
    [job] = m.st.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=1)
    ).jobs
    m.st.age("memory_jobs", "leased_at", 1, "id = ?", job.id)
    assert diagnostics(m).queue.stale_leases == 1
    [action] = run(m).actions
    assert (action.action, action.status, action.changed) == (LEASES, pb.ACTION_STATUS_EXECUTED, 1)
    assert m.st.scalar("SELECT status FROM memory_jobs WHERE id = ?", job.id) == "pending"


def test_run_retention_sweeps_in_order_and_recovery_then_fails(maintained: Build) -> None:
    m = maintained()
    gone = m.st.remember("expired tombstone to sweep")
    m.st.delete(gone)
    m.st.age("memories", "deleted_at", 31, "id = ?", gone)
    steps = m.maintenance.RunRetention(pb.RunRetentionRequest()).steps
    assert [s.step for s in steps] == [
        "expired_memories",
        "graph_links",
        "embeddings",
        "tombstones",
        "history",
        "completed_jobs",
        "dead_jobs",
    ]
    assert {s.step: s.removed for s in steps}["tombstones"] == 1
    recover = store_pb2.RecoverMemoryRequest(id=gone, reason="undo")
    assert error_of(lambda: m.st.store.RecoverMemory(recover))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RETENTION_EXPIRED",
    )


@FTS5_ONLY  # corrupt_fts
def test_a_frozen_store_refuses_retention_and_repairs(maintained: Build) -> None:
    m = maintained(**{"memory.pipelineV2.mutationsFrozen": True})
    assert error_of(lambda: m.maintenance.RunRetention(pb.RunRetentionRequest()))[:2] == (
        grpc.StatusCode.UNAVAILABLE,
        "MUTATIONS_FROZEN",
    )
    m.st.execute(  # a stray FTS entry (a frozen store takes no new memories)
        "INSERT INTO memories_fts(rowid, content) VALUES (42, 'stray words')"
    )
    [action] = run(m).actions
    assert (action.action, action.status) == (FTS, pb.ACTION_STATUS_FAILED)
    assert "MUTATIONS_FROZEN" in action.detail
    assert m.st.scalar("SELECT count(*) FROM maintenance_audit") == 0


def test_an_unreachable_store_is_unavailable(maintained: Build) -> None:
    m = maintained()
    m.st.thread.stop()
    assert error_of(lambda: diagnostics(m))[:2] == (
        grpc.StatusCode.UNAVAILABLE,
        "STORE_UNAVAILABLE",
    )


@pytest.mark.parametrize(
    ("enabled", "frozen", "runs"),
    [(False, False, False), (True, False, True), (True, True, False), (False, True, False)],
)
def test_the_schedule_honours_autonomous_enabled_and_frozen(
    enabled: bool, frozen: bool, runs: bool
) -> None:
    config = load_config(
        environ={},
        overrides={
            "memory.pipelineV2.autonomousEnabled": enabled,
            "memory.pipelineV2.autonomousFrozen": frozen,
        },
    )
    assert schedule_enabled(config) is runs


def test_without_autonomy_only_the_retention_schedule_runs(maintained: Build) -> None:
    assert len(maintained().app.background) == 1
    frozen = maintained(
        **{
            "memory.pipelineV2.autonomousEnabled": True,
            "memory.pipelineV2.autonomousFrozen": True,
        }
    )
    assert len(frozen.app.background) == 1


def test_retention_sweeps_on_its_own_with_autonomous_maintenance_off(maintained: Build) -> None:
    """Seeds 000 and 002: the retention worker runs on its own schedule
    (`retention.interval_ms`, first at start), whatever autonomousEnabled says."""
    expired: list[str] = []

    def tombstones(st: AdminStore) -> None:
        old, recent = st.remember("a tombstone past its window"), st.remember("a fresh tombstone")
        st.delete(old)
        st.delete(recent)
        st.age("memories", "deleted_at", 31, "id = ?", old)
        st.age("memory_history", "created_at", 181, "memory_id = ?", old)
        expired.extend([old, recent])

    m = maintained(prepare=tombstones)  # autonomousEnabled defaults to false
    old, recent = expired
    wait_for(
        lambda: (
            m.st.scalar("SELECT count(*) FROM maintenance_audit WHERE action LIKE 'retention:%'")
            == 7
        ),
        what="the retention sweep that nobody asked for",
    )
    assert m.st.scalar("SELECT count(*) FROM memories WHERE id = ?", old) == 0
    assert m.st.scalar("SELECT count(*) FROM memories WHERE id = ?", recent) == 1
    events = "SELECT event FROM memory_history WHERE memory_id = ? ORDER BY seq"
    assert [row[0] for row in m.st.rows(events, old)] == ["purged"]  # aged history went
    assert len(m.st.rows(events, recent)) == 2


def test_the_autonomous_schedule_runs_a_cycle_in_the_configured_mode(maintained: Build) -> None:
    m = maintained(
        **{
            "memory.pipelineV2.autonomousEnabled": True,
            "memory.pipelineV2.maintenanceMode": "execute",
        }
    )
    assert len(m.app.background) == 2
    # The first cycle runs at start; the store was empty, so nothing to do yet.
    # The retention schedule swept too (its audit rows prove it ran).
    wait_for(
        lambda: (
            m.st.scalar("SELECT count(*) FROM maintenance_audit WHERE action LIKE 'retention:%'")
            == 7
        ),
        what="the scheduled retention sweep",
    )
