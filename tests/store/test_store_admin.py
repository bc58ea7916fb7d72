"""StoreAdminService: raw diagnostics counts against hand-built states, and
repairs that change what they claim and nothing else (table snapshots).

States the API cannot reach (a corrupted index, an old lease) are written to
the SQLite file directly: that is the real component, not a patch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

import backend_db
from admin_helpers import DIM, MODEL, AdminStore, admin_store
from backend_db import FTS5_ONLY
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import admin_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2 as jq
from grpc_helpers import error_of


@pytest.fixture
def st(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(start_store_server, make_config, **{"memory.pipelineV2.workerMaxRetries": 1})


def diag(st: AdminStore) -> pb.GetStoreDiagnosticsResponse:
    return st.admin.GetStoreDiagnostics(pb.GetStoreDiagnosticsRequest())


def three_memories(st: AdminStore) -> tuple[str, str, str]:
    """a and b live and embedded; c embedded, then tombstoned."""
    a = st.remember("alpha likes green tea")
    b = st.remember("bravo owns a red bicycle")
    c = st.remember("charlie moved to lisbon")
    assert st.embed_all() == 3
    st.delete(c)
    return a, b, c


def lease_extract(st: AdminStore, n: int = 10) -> list[jq.Job]:
    request = jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=n)
    return list(st.jobs.LeaseJobs(request).jobs)


def audit_actions(st: AdminStore) -> list[str]:
    return st.audit_actions()


# ---- diagnostics ----------------------------------------------------------------------


def test_diagnostics_of_a_consistent_store(st: AdminStore) -> None:
    three_memories(st)
    d = diag(st)
    assert (d.active_memories, d.tombstones, d.total_memories) == (2, 1, 3)
    assert (d.fts_rows, d.fts_missing, d.fts_orphaned) == (2, 0, 0)
    assert (d.index_model, d.vector_rows, d.embedded_memories) == (MODEL, 2, 2)
    assert (d.vector_missing, d.vector_orphaned) == (0, 0)
    assert d.total_jobs == 6 and d.dead_jobs == 0 and d.leased_jobs == 0
    counts = {(j.job_type, j.status): j.count for j in d.jobs}
    assert counts == {
        (job_pb2.JOB_TYPE_EMBED, job_pb2.JOB_STATUS_COMPLETED): 3,
        (job_pb2.JOB_TYPE_EXTRACT, job_pb2.JOB_STATUS_PENDING): 3,
    }
    assert d.db_size_bytes == st.scalar(backend_db.DB_SIZE[st.dialect.name])
    assert d.db_size_bytes > 0


@FTS5_ONLY
def test_a_tombstone_is_not_an_fts_mismatch_but_missing_and_stray_entries_are(
    st: AdminStore,
) -> None:
    a, _, c = three_memories(st)
    assert (diag(st).fts_missing, diag(st).fts_orphaned) == (0, 0)
    content_a = st.scalar("SELECT content FROM memories WHERE id = ?", a)
    st.execute(
        "INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', ?, ?)",
        st.rowid(a),
        content_a,
    )
    d = diag(st)
    assert (d.fts_rows, d.fts_missing, d.fts_orphaned) == (1, 1, 0)
    content_c = st.scalar("SELECT content FROM memories WHERE id = ?", c)
    st.execute("INSERT INTO memories_fts(rowid, content) VALUES (?, ?)", st.rowid(c), content_c)
    d = diag(st)
    assert (d.fts_rows, d.fts_missing, d.fts_orphaned) == (2, 1, 1)
    assert d.active_memories == 2


def test_vector_index_mismatches_are_counted_both_ways(st: AdminStore) -> None:
    a, _, c = three_memories(st)
    st.execute("DELETE FROM memory_vectors WHERE memory_rowid = ?", st.rowid(a))
    d = diag(st)
    assert (d.vector_rows, d.embedded_memories, d.vector_missing, d.vector_orphaned) == (1, 2, 1, 0)
    st.index_stray_vector(st.rowid(c), b"\x00" * (DIM // 8))
    d = diag(st)
    assert (d.vector_rows, d.vector_missing, d.vector_orphaned) == (2, 1, 1)


def test_stale_leases_are_measured_from_leased_at(st: AdminStore) -> None:
    three_memories(st)
    jobs = lease_extract(st)
    assert len(jobs) == 3
    st.age("memory_jobs", "leased_at", 1, "id = ?", jobs[0].id)
    d = diag(st)
    assert (d.leased_jobs, d.stale_leases, d.lease_timeout_ms) == (3, 1, 300000)


def test_dead_jobs_and_expired_tombstones_are_counted(st: AdminStore) -> None:
    _, _, c = three_memories(st)
    [job, *_] = lease_extract(st, 1)
    st.jobs.FailJobs(
        jq.FailJobsRequest(
            failures=[
                jq.JobFailure(
                    lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token), error="boom"
                )
            ]
        )
    )
    assert diag(st).expired_tombstones == 0
    st.age("memories", "deleted_at", 31, "id = ?", c)
    d = diag(st)
    assert (d.dead_jobs, d.total_jobs, d.expired_tombstones) == (1, 6, 1)


# ---- repairs ------------------------------------------------------------------------------


def changed_tables(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {t for t in before if before[t] != after[t]}


def test_requeue_dead_jobs_changes_only_the_dead_jobs(st: AdminStore) -> None:
    three_memories(st)
    jobs = lease_extract(st, 2)
    st.jobs.FailJobs(
        jq.FailJobsRequest(
            failures=[
                jq.JobFailure(lease=jq.JobLease(job_id=j.id, lease_token=j.lease_token), error="x")
                for j in jobs
            ]
        )
    )
    before = st.snapshot()
    response = st.admin.RequeueDeadJobs(pb.RequeueDeadJobsRequest())
    assert (response.requeued, response.skipped) == (2, 0)
    after = st.snapshot()
    assert changed_tables(before, after) == {"memory_jobs"}
    old = {r[0]: r for r in before["memory_jobs"]}
    moved = {r[0] for r in after["memory_jobs"] if r != old[r[0]]}
    assert moved == {j.id for j in jobs}
    rows = st.rows(
        "SELECT status, attempts, failed_at, lease_token FROM memory_jobs WHERE job_type = 'extract'"
    )
    assert sorted(rows) == [("pending", 0, None, None)] * 3
    assert st.admin.RequeueDeadJobs(pb.RequeueDeadJobsRequest()).requeued == 0
    assert st.snapshot() == after
    assert audit_actions(st) == ["requeue_dead_jobs", "requeue_dead_jobs"]


def test_release_stale_leases_releases_only_stale_ones(st: AdminStore) -> None:
    three_memories(st)
    jobs = lease_extract(st)
    st.age("memory_jobs", "leased_at", 1, "id = ?", jobs[0].id)
    before = st.snapshot()
    assert st.admin.RepairStaleLeases(pb.RepairStaleLeasesRequest()).released == 1
    after = st.snapshot()
    assert changed_tables(before, after) == {"memory_jobs"}
    statuses = dict(st.rows("SELECT id, status FROM memory_jobs WHERE job_type = 'extract'"))
    # workerMaxRetries 1: the expired lease was the job's last attempt (issue 34)
    assert statuses == {jobs[0].id: "dead", jobs[1].id: "leased", jobs[2].id: "leased"}
    assert st.admin.RepairStaleLeases(pb.RepairStaleLeasesRequest()).released == 0
    assert diag(st).stale_leases == 0


@FTS5_ONLY
def test_fts_repair_rebuilds_live_entries_only_and_nothing_else(st: AdminStore) -> None:
    a, b, c = three_memories(st)
    consistent = st.snapshot()
    st.execute(
        "INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', ?, ?)",
        st.rowid(a),
        st.scalar("SELECT content FROM memories WHERE id = ?", a),
    )
    st.execute(
        "INSERT INTO memories_fts(rowid, content) VALUES (?, ?)",
        st.rowid(c),
        st.scalar("SELECT content FROM memories WHERE id = ?", c),
    )
    response = st.admin.RepairFtsIndex(pb.RepairFtsIndexRequest())
    assert (response.missing_before, response.orphaned_before, response.fts_rows) == (1, 1, 2)
    assert st.snapshot() == consistent
    d = diag(st)
    assert (d.fts_rows, d.fts_missing, d.fts_orphaned) == (2, 0, 0)
    matched = {
        r[0]
        for r in st.rows(
            "SELECT m.id FROM memories_fts f JOIN memories m ON m.rowid = f.rowid "
            "WHERE memories_fts MATCH 'alpha OR bravo OR charlie'"
        )
    }
    assert matched == {a, b}
    again = st.admin.RepairFtsIndex(pb.RepairFtsIndexRequest())
    assert (again.missing_before, again.orphaned_before) == (0, 0)
    assert st.snapshot() == consistent


def test_vector_repair_removes_strays_and_adds_missing_rows_only(st: AdminStore) -> None:
    a, _, c = three_memories(st)
    consistent = st.snapshot()
    st.execute("DELETE FROM memory_vectors WHERE memory_rowid = ?", st.rowid(a))
    st.index_stray_vector(st.rowid(c), b"\x00")
    response = st.admin.RepairVectorIndex(pb.RepairVectorIndexRequest())
    assert (response.removed, response.added) == (1, 1)
    assert st.snapshot() == consistent
    again = st.admin.RepairVectorIndex(pb.RepairVectorIndexRequest())
    assert (again.removed, again.added) == (0, 0)
    assert st.snapshot() == consistent
    assert audit_actions(st) == ["repair_vectors", "repair_vectors"]


def test_frozen_store_refuses_every_repair_and_writes_nothing(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> None:
    st = admin_store(start_store_server, make_config, **{"memory.pipelineV2.mutationsFrozen": True})
    calls = [
        lambda: st.admin.RequeueDeadJobs(pb.RequeueDeadJobsRequest()),
        lambda: st.admin.RepairStaleLeases(pb.RepairStaleLeasesRequest()),
        lambda: st.admin.RepairFtsIndex(pb.RepairFtsIndexRequest()),
        lambda: st.admin.RepairVectorIndex(pb.RepairVectorIndexRequest()),
        lambda: st.admin.SweepRetention(pb.SweepRetentionRequest()),
    ]
    for call in calls:
        assert error_of(call)[:2] == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert diag(st).audit_rows == 0
