"""The repository's job queue on a real PostgreSQL (through SqliteApi), with
services/storage/store/repository.py's claim: the queue's semantics (lease tokens, fencing,
the reaper, retries, burying), now with claimers that really run at once on
separate connections."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from services.storage.pg import SqliteApi, open_read_write
from services.storage.store import pg_jobs, repository
from services.storage.store.repository import job_row

T0 = "2026-01-01T00:00:00.000000000Z"
T1 = "2026-01-01T00:00:01.000000000Z"
T2 = "2026-01-01T00:00:02.000000000Z"
T3 = "2026-01-01T00:00:03.000000000Z"


def _enqueue(pg_conn: Any, count: int, job_type: str = "embed", namespace: str = "ns") -> list[str]:
    rows = [job_row(namespace, f"{namespace}-m{i}", job_type, 3, T0) for i in range(count)]
    with pg_conn.transaction():
        repository.enqueue_jobs(pg_conn, rows)
    return [row.id for row in rows]


def _job(pg_conn: Any, job_id: str) -> Any:
    row = pg_conn.execute(
        "SELECT status, lease_token, attempts, lease_worker, lease_instance, error, available_at"
        " FROM memory_jobs WHERE id = ?",
        (job_id,),
    ).fetchone()
    return row


def _if_held(
    pg_conn: Any, job_id: str, token: str, action: Callable[[Any, str, str], None]
) -> bool:
    """jobs.py's _for_held_leases for one job: the action only under a held lease."""
    with pg_conn.transaction():
        held = repository.leased_job(pg_conn, job_id, token) is not None
        if held:
            action(pg_conn, job_id, T2)
        return held


def test_a_claim_leases_due_jobs_oldest_first_with_a_token_and_its_holder(pg_conn: Any) -> None:
    ids = _enqueue(pg_conn, 3)
    claimed = pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 2, ("worker", "instance-1"))
    assert [row["id"] for row, _ in claimed] == ids[:2]
    for row, token in claimed:
        job = _job(pg_conn, row["id"])
        assert (job["status"], job["lease_token"], job["attempts"]) == ("leased", token, 1)
        assert (job["lease_worker"], job["lease_instance"]) == ("worker", "instance-1")
    assert [row["id"] for row, _ in pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 5)] == ids[2:]
    assert pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 5) == []


def test_a_claim_takes_only_its_type_namespaces_and_due_jobs(pg_conn: Any) -> None:
    _enqueue(pg_conn, 1, namespace="a")
    (other,) = _enqueue(pg_conn, 1, namespace="b")
    _enqueue(pg_conn, 1, job_type="extract", namespace="b")
    assert pg_jobs.claim(pg_conn, "embed", ["b"], "2025-01-01T00:00:00.000000000Z", 5) == []
    assert [row["id"] for row, _ in pg_jobs.claim(pg_conn, "embed", ["b"], T1, 5)] == [other]
    assert len(pg_jobs.claim(pg_conn, "embed", [], T1, 5)) == 1  # no namespaces: any


def test_concurrent_claimers_never_get_the_same_job(pg_dsn: str, pg_conn: Any) -> None:
    """Eight claimers, each on its own connection, start together and claim in
    small batches until the queue is empty: every job is leased exactly once."""
    ids = _enqueue(pg_conn, 300)
    claimers = 8
    start = threading.Barrier(claimers)
    claimed: list[list[str]] = [[] for _ in range(claimers)]
    errors: list[BaseException] = []

    def run(index: int) -> None:
        own = SqliteApi(open_read_write(pg_dsn))
        try:
            start.wait()
            while batch := pg_jobs.claim(own, "embed", ["ns"], T1, 3, (f"w{index}", "i")):
                claimed[index].extend(row["id"] for row, _ in batch)
        except BaseException as error:
            errors.append(error)
        finally:
            own.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    every = [job_id for batch in claimed for job_id in batch]
    assert len(every) == len(set(every)) == len(ids)
    assert set(every) == set(ids)
    counts = dict(((r[0], r[1]), r[2]) for r in pg_conn.execute(*repository.queue_counts_query()))
    assert counts == {("embed", "leased"): 300}


def test_a_stale_token_is_fenced_out(pg_conn: Any) -> None:
    """The reaper takes back a lease its holder let lapse; the job is leased
    again; the first holder's late completion changes nothing."""
    (job_id,) = _enqueue(pg_conn, 1)
    [(_, stale)] = pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 1)
    with pg_conn.transaction():
        assert repository.release_stale_leases(pg_conn, T2, T2) == (1, 0)
    [(_, fresh)] = pg_jobs.claim(pg_conn, "embed", ["ns"], T2, 1)
    assert not _if_held(pg_conn, job_id, stale, repository.complete_job)
    assert not _if_held(pg_conn, job_id, stale, repository.release_job)
    job = _job(pg_conn, job_id)
    assert (job["status"], job["lease_token"], job["attempts"]) == ("leased", fresh, 2)
    assert _if_held(pg_conn, job_id, fresh, repository.complete_job)
    assert _job(pg_conn, job_id)["status"] == "completed"
    assert not _if_held(pg_conn, job_id, fresh, repository.complete_job)  # once


def test_the_reaper_waits_for_a_completion_in_flight_and_leaves_the_job_completed(
    pg_dsn: str, pg_conn: Any
) -> None:
    """leased_job locks the job: a reaper arriving between the token check and
    the completion waits, then finds the job completed, not stale."""
    (job_id,) = _enqueue(pg_conn, 1)
    [(_, token)] = pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 1)
    reaper = SqliteApi(open_read_write(pg_dsn))
    reaper_pid = reaper.execute("SELECT pg_backend_pid()").fetchone()[0]
    released: list[int] = []
    with pg_conn.transaction():
        assert repository.leased_job(pg_conn, job_id, token) is not None

        def reap() -> None:
            with reaper.transaction():
                released.append(repository.release_stale_leases(reaper, T3, T3).released)

        thread = threading.Thread(target=reap)
        thread.start()
        _wait_until_blocked(pg_dsn, reaper_pid)
        repository.complete_job(pg_conn, job_id, T2)
    thread.join()
    reaper.close()
    assert released == [0]
    assert _job(pg_conn, job_id)["status"] == "completed"


def _wait_until_blocked(dsn: str, pid: int) -> None:
    """Until `pid` waits on a lock (no time limit: the test's timeout is the bound)."""
    with open_read_write(dsn) as watcher:
        while True:
            row = watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            watcher.rollback()
            if row is not None and row[0] == "Lock":
                return
            watcher.execute("SELECT pg_sleep(0.01)")


def test_a_failed_attempt_is_retried_later_and_a_last_one_is_buried(pg_conn: Any) -> None:
    (job_id,) = _enqueue(pg_conn, 1)
    [(_, token)] = pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 1)
    with pg_conn.transaction():
        assert repository.leased_job(pg_conn, job_id, token) is not None
        repository.retry_job(pg_conn, job_id, "boom", T3, T1)
    job = _job(pg_conn, job_id)
    assert (job["status"], job["lease_token"], job["error"]) == ("pending", None, "boom")
    assert pg_jobs.claim(pg_conn, "embed", ["ns"], T2, 1) == []  # not before its retry time
    [(_, token)] = pg_jobs.claim(pg_conn, "embed", ["ns"], T3, 1)
    with pg_conn.transaction():
        assert repository.leased_job(pg_conn, job_id, token) is not None
        repository.bury_job(pg_conn, job_id, "boom again", T3)
    job = _job(pg_conn, job_id)
    assert (job["status"], job["attempts"], job["error"]) == ("dead", 2, "boom again")
    assert pg_jobs.claim(pg_conn, "embed", ["ns"], "9999-01-01T00:00:00.000000000Z", 1) == []


def test_a_release_returns_the_attempt_and_a_renewal_keeps_the_lease_fresh(pg_conn: Any) -> None:
    first, second = _enqueue(pg_conn, 2)
    claimed = dict(
        (row["id"], token) for row, token in pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 2)
    )
    assert _if_held(pg_conn, first, claimed[first], repository.release_job)
    job = _job(pg_conn, first)
    assert (job["status"], job["attempts"], job["lease_token"]) == ("pending", 0, None)
    assert _if_held(pg_conn, second, claimed[second], repository.renew_lease)  # leased_at = T2
    with pg_conn.transaction():
        assert repository.release_stale_leases(pg_conn, T2, T3) == (0, 0)  # renewed: not stale
    assert _job(pg_conn, second)["status"] == "leased"


def test_a_restarted_worker_takes_back_what_its_previous_instance_held(pg_conn: Any) -> None:
    ids = _enqueue(pg_conn, 4)
    old = pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 2, ("worker", "old"))
    pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 1, ("worker", "new"))
    pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 1, ("someone-else", "old"))
    with pg_conn.transaction():
        assert repository.release_prior_instance_leases(pg_conn, "worker", "new", T2) == (2, 0)
    for row, token in old:
        job = _job(pg_conn, row["id"])
        assert (job["status"], job["attempts"], job["lease_token"]) == ("pending", 1, None)
        assert job["error"] == repository.WORKER_LOST
        assert not _if_held(pg_conn, row["id"], token, repository.complete_job)  # fenced
    assert [_job(pg_conn, i)["status"] for i in ids[2:]] == ["leased", "leased"]


def test_an_open_job_absorbs_a_second_of_its_type_for_the_same_memory(pg_conn: Any) -> None:
    with pg_conn.transaction():
        repository.enqueue_jobs(pg_conn, [job_row("ns", "m", "embed", 3, T0)])
        repository.enqueue_jobs(
            pg_conn, [job_row("ns", "m", "embed", 3, T0), job_row("ns", "m", "extract", 3, T0)]
        )
    assert pg_conn.execute("SELECT count(*) FROM memory_jobs").fetchone()[0] == 2
    [(row, token)] = pg_jobs.claim(pg_conn, "embed", ["ns"], T1, 1)
    assert _if_held(pg_conn, row["id"], token, repository.complete_job)
    with pg_conn.transaction():
        repository.enqueue_jobs(pg_conn, [job_row("ns", "m", "embed", 3, T2)])  # none open now
    assert pg_conn.execute("SELECT count(*) FROM memory_jobs").fetchone()[0] == 3
    assert pg_conn.execute(*repository.due_job_query("embed", ["ns"], T3)).fetchone() is not None
    assert pg_conn.execute(*repository.oldest_pending_query()).fetchone()[0] == T0


def test_a_due_job_carries_its_memorys_content_and_whether_its_document_exists(
    pg_conn: Any,
) -> None:
    """What jobs.py's lease reads from the row to skip a gone memory's or
    document's job (tests/postgres/test_pg_repository.py runs it on both)."""
    with pg_conn.transaction():
        pg_conn.execute(
            "INSERT INTO memories (id, namespace, content, normalized_content, content_hash,"
            " type, importance, created_at, updated_at, event_time, is_deleted)"
            " VALUES ('live', 'ns', 'hello', 'hello', 'h1', 'fact', 0.5, ?, ?, ?, 0),"
            " ('gone', 'ns', 'bye', 'bye', 'h2', 'fact', 0.5, ?, ?, ?, 1)",
            [T0] * 6,
        )
        repository.enqueue_jobs(
            pg_conn,
            [
                job_row("ns", "live", "embed", 3, T0),
                job_row("ns", "gone", "embed", 3, T0),
                job_row("ns", "purged", "embed", 3, T0),
            ],
        )
        pg_conn.execute(
            "INSERT INTO memory_jobs (id, namespace, document_id, job_type, available_at,"
            " created_at, updated_at) VALUES ('doc-job', 'ns', 'no-such-document',"
            " 'document_ingest', ?, ?, ?)",
            [T0] * 3,
        )
    with pg_conn.transaction():
        rows = {r["memory_id"]: r for r in repository.due_jobs(pg_conn, "embed", ["ns"], T1, 10)}
        assert (rows["live"]["content"], rows["live"]["is_deleted"]) == ("hello", 0)
        assert (rows["gone"]["content"], rows["gone"]["is_deleted"]) == ("bye", 1)
        assert rows["purged"]["content"] is None
        [document_job] = repository.due_jobs(pg_conn, "document_ingest", ["ns"], T1, 10)
        assert document_job["has_document"] is False
