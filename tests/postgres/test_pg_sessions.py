"""Conversation sessions' SQL (services/storage/store/session_sql.py), their lifecycle
(session_lifecycle.py) and the summarize job's transcript (sessions.py) on both
backends: a migrated SQLite file and a migrated PostgreSQL database, the same
assertions (the `conn` fixture is tests/postgres/conftest.py's)."""

from __future__ import annotations

from typing import Any

from pg_rows import T0, T1, T2, T3, insert, memory

from services.storage.store import repository as repo
from services.storage.store import session_sql as sql
from services.store import session_lifecycle as lifecycle
from services.store.sessions import transcript

FUTURE = "9999-01-01T00:00:00.000000000Z"


def _turn(memory_id: str, session: str, at: str, **overrides: Any) -> Any:
    fields = {"session_id": session, "expire_at": FUTURE, "type": "episodic", "who": "user"}
    fields.update(overrides)
    return memory(memory_id, f"turn {memory_id}", created_at=at, event_time=at, **fields)


def test_turns_summaries_and_the_summarize_job_found_by_its_payload(conn: Any) -> None:
    insert(
        conn,
        _turn("t1", "s", T0),
        _turn("t2", "s", T1),
        _turn("t3", "s", T2),
        _turn("long", "s", T2, expire_at=None),  # long-term: not a turn
        _turn("sum", "s", T3, type=sql.SUMMARY_TYPE),
        _turn("x", "other", T0),
    )
    assert [r["id"] for r in sql.turns(conn, "ns", "s", 2)] == ["t2", "t3"]
    assert sql.turn_count(conn, "ns", "s") == 3
    assert [r["id"] for r in sql.summaries(conn, "ns", "s")] == ["sum"]

    assert sql.pending_summarize_job(conn, "ns", "s") is None
    job = sql.enqueue_session_job(conn, sql.SUMMARIZE_JOB, "ns", "s", 3, T0)
    sql.enqueue_session_job(conn, sql.SUMMARIZE_JOB, "ns", "other", 3, T0)
    assert sql.pending_summarize_job(conn, "ns", "s") == job
    assert sql.pending_summarize_job(conn, "elsewhere", "s") is None
    assert sql.job_payload(conn, job) == {"session_id": "s"}

    session_id, text = transcript(conn, job, "ns")
    assert session_id == "s"
    assert text.splitlines() == [
        "[2026-01-01T00:00:00Z] user: turn t1",
        "[2026-01-01T00:00:01Z] user: turn t2",
        "[2026-01-01T00:00:02Z] user: turn t3",
    ]
    assert sql.job_payload(conn, job) == {"session_id": "s", "through": T2}


def test_a_new_session_ends_the_namespaces_open_ones_once(conn: Any) -> None:
    lifecycle.track(conn, [("ns", "a"), ("ns", "a")], T0, 3)
    lifecycle.track(conn, [("ns", "b"), ("other", "c")], T1, 3)
    a = sql.consolidation_row(conn, "ns", "a")
    assert (a["ended_at"], a["end_reason"], a["job_status"]) == (
        T1,
        lifecycle.NEW_SESSION,
        "pending",
    )
    assert sql.job_payload(conn, a["job_id"]) == {"session_id": "a"}
    assert sql.consolidation_row(conn, "other", "c")["ended_at"] is None

    # a memory for a ended session whose job is still open: seen, not reopened
    lifecycle.track(conn, [("ns", "a")], T3, 3)
    a = sql.consolidation_row(conn, "ns", "a")
    assert (a["last_seen_at"], a["ended_at"]) == (T3, T1)
    lifecycle.track(conn, [("ns", "a")], T2, 3)  # last seen only moves forward
    assert sql.consolidation_row(conn, "ns", "a")["last_seen_at"] == T3

    # its job done, a new memory reopens it (and ends b, open meanwhile)
    repo.complete_job(conn, a["job_id"], T3)
    lifecycle.track(conn, [("ns", "a")], T3, 3)
    a = sql.consolidation_row(conn, "ns", "a")
    assert (a["ended_at"], a["job_id"]) == (None, None)
    assert sql.consolidation_row(conn, "ns", "b")["end_reason"] == lifecycle.NEW_SESSION

    # the idle check ends what has been quiet since the cut-off
    assert sql.idle_sessions(conn, T2, 10) == [("other", "c")]
    assert lifecycle.end_idle(conn, T2, T3, 3) == 1
    c = sql.consolidation_query("other", "c")
    row = repo.fetch_one(conn, c)
    assert (row["end_reason"], row["job_status"], row["job_attempts"]) == (
        lifecycle.IDLE,
        "pending",
        0,
    )


def test_consolidation_reads_and_marks_progress_forward_only(conn: Any) -> None:
    insert(
        conn,
        _turn("m1", "s", T0, expire_at=None),
        _turn("m2", "s", T1),
        _turn("m3", "s", T2),
        _turn("sum", "s", T3, type=sql.SUMMARY_TYPE),
    )
    assert [r["id"] for r in sql.session_memories(conn, "ns", "s", None, 9)] == ["m1", "m2", "m3"]
    assert [r["id"] for r in sql.session_memories(conn, "ns", "s", T0, 1)] == ["m2"]
    live = sql.live_session_memories(conn, "ns", "s", ["m1", "m3", "sum", "nope"])
    assert sorted(live) == ["m1", "m3", "sum"]
    assert sql.live_session_memories(conn, "ns", "s", []) == {}

    sql.register_session(conn, "ns", "s", T0)
    job = lifecycle.end(conn, "ns", "s", lifecycle.IDLE, T1, 3)
    sql.mark_consolidated(conn, "ns", "s", job, None, T1)
    assert sql.consolidation_row(conn, "ns", "s")["consolidated_through"] == ""
    sql.mark_consolidated(conn, "ns", "s", job, T2, T2)
    sql.mark_consolidated(conn, "ns", "s", job, T1, T3)  # never backwards
    sql.mark_consolidated(conn, "ns", "s", "another job", T3, T3)  # not its job: nothing
    row = sql.consolidation_row(conn, "ns", "s")
    assert (row["consolidated_through"], row["consolidated_at"]) == (T2, T3)

    sql.requeue_session(conn, "ns", "s", job, "next")
    assert sql.consolidation_row(conn, "ns", "s")["job_id"] == "next"
    sql.set_job_payload(conn, job, {"session_id": "s", "through": T2})
    assert sql.job_payload(conn, job) == {"session_id": "s", "through": T2}
    assert sql.other_open_sessions(conn, "ns", "x") == []
