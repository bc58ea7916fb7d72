"""Session consolidation on the store (issue 17, seed 003): when a session ends
(a new session starts in its namespace, or it idles) the store queues exactly
one consolidate_session job, in the write that ends it; the job is leased and
completed through the store's job queue as the pipeline's worker does (the
worker with a scripted LLM is tested in
tests/pipeline/test_pipeline_consolidate_worker.py), and the result shows
through the public API: the facts, their `derived_from` links, `causal` links
and GetSession's state."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from admin_helpers import AdminStore, admin_store
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import wait_for

USER = store_pb2.TURN_ROLE_USER
CONSOLIDATE = job_pb2.JOB_TYPE_CONSOLIDATE_SESSION
S = store_pb2


@pytest.fixture
def start(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> Callable[..., AdminStore]:
    return lambda **overrides: admin_store(start_store_server, make_config, **overrides)


@pytest.fixture
def st(start: Callable[..., AdminStore]) -> AdminStore:
    return start()


def turn(st: AdminStore, session: str, content: str, namespace: str = "") -> str:
    response = st.store.AppendTurn(
        S.AppendTurnRequest(namespace=namespace, session_id=session, role=USER, content=content)
    )
    return str(response.memory.id)


def session(st: AdminStore, session_id: str, namespace: str = "") -> S.GetSessionResponse:
    return st.store.GetSession(S.GetSessionRequest(namespace=namespace, session_id=session_id))


def consolidate_jobs(st: AdminStore) -> list[tuple[str, str, str, str]]:
    """(id, namespace, session id, status) of every consolidate_session job."""
    return [
        (r[0], r[1], json.loads(r[2])["session_id"], r[3])
        for r in st.rows(
            "SELECT id, namespace, payload, status FROM memory_jobs "
            "WHERE job_type = 'consolidate_session' ORDER BY created_at"
        )
    ]


def lease(st: AdminStore) -> list[jq.Job]:
    return list(st.jobs.LeaseJobs(jq.LeaseJobsRequest(job_type=CONSOLIDATE, max_jobs=10)).jobs)


def complete(st: AdminStore, job: jq.Job, **fields: Any) -> jq.CompleteConsolidateJobResponse:
    fields.setdefault("model", "fake-llm")
    return st.jobs.CompleteConsolidateJob(
        jq.CompleteConsolidateJobRequest(
            lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token), **fields
        )
    )


def fact(content: str, *sources: str, confidence: float = 0.9, **more: Any) -> jq.ConsolidatedFact:
    return jq.ConsolidatedFact(
        fact=jq.ProposedFact(content=content, type="semantic", confidence=confidence),
        source_memory_ids=list(sources),
        **more,
    )


# ---- when a session ends --------------------------------------------------------------


def test_a_new_session_ends_the_previous_one_with_exactly_one_job(st: AdminStore) -> None:
    first = [turn(st, "s1", "I moved to Lisbon last week"), turn(st, "s1", "The flat is nice")]
    assert session(st, "s1").state == S.SESSION_CONSOLIDATION_STATE_OPEN
    assert consolidate_jobs(st) == []
    turn(st, "s2", "Hello again")
    turn(st, "s2", "Another turn of the new session")
    [(job_id, namespace, sid, status)] = consolidate_jobs(st)
    assert (namespace, sid, status) == ("default", "s1", "pending")
    ended = session(st, "s1")
    assert ended.state == S.SESSION_CONSOLIDATION_STATE_QUEUED
    assert (ended.end_reason, ended.job_id) == ("new_session", job_id)
    assert ended.end_time.seconds > 0 and not ended.HasField("consolidate_time")
    assert session(st, "s2").state == S.SESSION_CONSOLIDATION_STATE_OPEN
    [job] = lease(st)
    assert (job.session_id, job.namespace) == ("s1", "default")
    memories = json.loads(job.content)["memories"]
    assert [m["id"] for m in memories] == first
    assert memories[0]["content"] == "I moved to Lisbon last week"
    assert (memories[0]["who"], memories[0]["type"]) == ("user", "episodic")


def test_a_second_trigger_does_nothing(start: Callable[..., AdminStore]) -> None:
    st = start(**{"sessions.consolidate_check_interval_ms": 100})
    turn(st, "s1", "first session")
    turn(st, "s2", "second session")
    turn(st, "s1", "back in the first while its job waits")  # no second job, no reopen
    turn(st, "s3", "third session")  # ends s2 only
    assert [(j[2], j[3]) for j in consolidate_jobs(st)] == [("s1", "pending"), ("s2", "pending")]
    # every session idles past consolidate_after_idle_ms: the idle check ends
    # the one still open (s3) and nothing else
    st.age("session_consolidations", "last_seen_at", 1, "1 = 1")
    wait_for(lambda: len(consolidate_jobs(st)) == 3, what="s3 ended by the idle check")
    assert [j[2] for j in consolidate_jobs(st)] == ["s1", "s2", "s3"]
    assert session(st, "s3").end_reason == "idle"
    assert session(st, "s1").end_reason == "new_session"


def test_the_same_session_id_in_two_namespaces_is_two_sessions(st: AdminStore) -> None:
    turn(st, "chat", "in team a", namespace="team-a")
    turn(st, "chat", "in team b", namespace="team-b")
    turn(st, "next", "team a moves on", namespace="team-a")
    [(_, namespace, sid, _)] = consolidate_jobs(st)
    assert (namespace, sid) == ("team-a", "chat")
    assert session(st, "chat", "team-a").state == S.SESSION_CONSOLIDATION_STATE_QUEUED
    assert session(st, "chat", "team-b").state == S.SESSION_CONSOLIDATION_STATE_OPEN
    [job] = lease(st)
    assert [m["content"] for m in json.loads(job.content)["memories"]] == ["in team a"]
    with pytest.raises(grpc.RpcError) as caught:
        session(st, "next", "team-b")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_an_idle_session_ends_after_the_configured_time(start: Callable[..., AdminStore]) -> None:
    st = start(
        **{
            "sessions.consolidate_after_idle_ms": 3_600_000,
            "sessions.consolidate_check_interval_ms": 100,
        }
    )
    turn(st, "quiet", "a session that goes quiet")
    turn(st, "recent", "a session seen half an hour ago", namespace="other")
    st.age("session_consolidations", "last_seen_at", 2 / 24, "session_id = ?", "quiet")
    st.age("session_consolidations", "last_seen_at", 0.5 / 24, "session_id = ?", "recent")
    ended = wait_for(
        lambda: (s := session(st, "quiet")).state == S.SESSION_CONSOLIDATION_STATE_QUEUED and s,
        what="the idle session ended",
    )
    assert ended.end_reason == "idle"
    assert [j[2] for j in consolidate_jobs(st)] == ["quiet"]
    assert session(st, "recent", "other").state == S.SESSION_CONSOLIDATION_STATE_OPEN


def test_consolidation_off_tracks_nothing(start: Callable[..., AdminStore]) -> None:
    st = start(**{"sessions.consolidate": "off"})
    turn(st, "s1", "first")
    turn(st, "s2", "second")
    assert consolidate_jobs(st) == []
    code, reason, _ = error_of(lambda: session(st, "s1"))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONSOLIDATION_DISABLED")
    with pytest.raises(grpc.RpcError) as caught:
        session(st, "s1")
    assert "sessions.consolidate is off" in caught.value.details()


def test_get_session_rejects_a_bad_session_id(st: AdminStore) -> None:
    for bad in ("", "has space", "x" * 129):
        code, _, fields = error_of(lambda bad=bad: session(st, bad))
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["session_id"])


# ---- the job's result ---------------------------------------------------------------


def test_the_result_is_written_and_visible_through_the_public_api(st: AdminStore) -> None:
    moved = turn(st, "s1", "I moved to Lisbon because of my new job")
    job_turn = turn(st, "s1", "I started at Acme Corp on Monday")
    elsewhere = turn(st, "s2", "a turn of the next session")  # not a source of s1's facts
    other_ns = turn(st, "s1", "same id, other namespace", namespace="team-b")
    [job] = lease(st)
    response = complete(
        st,
        job,
        facts=[
            fact(
                "The user lives in Lisbon",
                moved,
                entities=[jq.EntityTriple(source="user", relationship="lives_in", target="Lisbon")],
            ),
            fact("The user works at Acme Corp", job_turn, moved),
            fact("Borrowed from the next session", elsewhere),
            fact("Borrowed from another namespace", other_ns),
            fact("Not sure about this one", moved, confidence=0.3),
        ],
        causal_links=[
            jq.CausalLink(cause_memory_id=job_turn, effect_memory_id=moved),
            jq.CausalLink(cause_memory_id=elsewhere, effect_memory_id=moved),
        ],
        warnings=["facts[9]: dropped"],
    )
    assert response.outcome == jq.LEASE_OUTCOME_OK
    assert (response.skipped_facts, response.causal_links) == (3, 1)
    lives, works = response.memory_ids
    listed = st.store.ListMemories(S.ListMemoriesRequest()).memories
    facts = {m.id: m for m in listed if m.source_type == "consolidation"}
    assert set(facts) == {lives, works}
    assert facts[lives].content == "The user lives in Lisbon"
    assert (facts[lives].who, facts[lives].type, facts[lives].session_id) == (
        "pipeline-consolidator",
        "semantic",
        "",
    )
    explained = st.store.ExplainMemory(S.ExplainMemoryRequest(id=works))
    assert {m.id for m in explained.derived_from} == {job_turn, moved}
    links = st.store.ListMemoryLinks(
        S.ListMemoryLinksRequest(memory_id=moved, link_types=["causal"])
    ).links
    assert [(link.from_memory_id, link.to_memory_id, link.job_id) for link in links] == [
        (job_turn, moved, job.id)
    ]
    [causal] = links
    assert causal.confidence == pytest.approx(0.7) and not causal.HasField("valid_until")
    assert list(causal.evidence_memory_ids) == [job_turn, moved]
    derived = st.store.ListMemoryLinks(
        S.ListMemoryLinksRequest(memory_id=works, link_types=["derived_from"])
    ).links
    assert {(link.to_memory_id, round(link.confidence, 2)) for link in derived} == {
        (job_turn, 0.9),
        (moved, 0.9),
    }
    done = session(st, "s1")
    assert done.state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    assert done.consolidate_time.seconds > 0
    [(status, result)] = st.rows("SELECT status, result FROM memory_jobs WHERE id = ?", job.id)
    result = json.loads(result)
    assert status == "completed" and result["causal_confidence"] == 0.7
    assert result["warnings"] == ["facts[9]: dropped"]
    assert sorted(s["reason"] for s in result["skipped"] if "fact" in s) == [
        "low_fact_confidence",
        "no_live_source_in_session",
        "no_live_source_in_session",
    ]
    # a consolidated fact is never extracted, and is embedded like any memory
    assert (
        st.scalar(
            "SELECT count(*) FROM memory_jobs WHERE memory_id = ? AND job_type = 'extract'", lives
        )
        == 0
    )
    assert (
        st.scalar(
            "SELECT count(*) FROM memory_jobs WHERE memory_id = ? AND job_type = 'embed'", lives
        )
        == 1
    )


def test_bad_results_are_rejected_and_write_nothing(st: AdminStore) -> None:
    source = turn(st, "s1", "a turn")
    turn(st, "s2", "next session")
    [job] = lease(st)
    before = st.snapshot()
    bad: list[dict[str, Any]] = [
        {"model": ""},
        {"facts": [fact("no sources at all")]},
        {"facts": [fact("", source)]},
        {"facts": [fact("x" * 2001, source)]},
        {"facts": [fact("bad confidence", source, confidence=1.5)]},
        {"facts": [fact("bad source id", "x" * 200)]},
        {"causal_links": [jq.CausalLink(cause_memory_id=source, effect_memory_id=source)]},
        {"causal_links": [jq.CausalLink(cause_memory_id=source)]},
        {"facts": [fact("f", source)] * 51},
        {"named_entities": [jq.NamedEntity(name="")]},
        {"named_entities": [jq.NamedEntity(name="Lisbon", entity_type="city")]},
        {"named_entities": [jq.NamedEntity(name="Lisbon", aliases=["a"] * 11)]},
    ]
    for fields in bad:
        code, _, _ = error_of(lambda fields=fields: complete(st, job, **fields))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, fields
    assert st.snapshot() == before
    lost = jq.Job(id=job.id, lease_token="not-the-token")
    assert complete(st, lost, facts=[fact("a fact", source)]).outcome == jq.LEASE_OUTCOME_LEASE_LOST
    assert st.snapshot() == before


def test_a_partial_privacy_level_writes_nothing_long_term(
    start: Callable[..., AdminStore],
) -> None:
    st = start(**{"sessions.privacy": {"private*": "partial"}})
    source = turn(st, "s1", "a private turn", namespace="private-1")
    turn(st, "s2", "next", namespace="private-1")
    [job] = lease(st)
    response = complete(st, job, facts=[fact("A private fact", source)])
    assert response.privacy_blocked and not response.memory_ids
    listed = st.store.ListMemories(S.ListMemoriesRequest(namespace="private-1")).memories
    assert all(m.source_type != "consolidation" for m in listed)
    assert session(st, "s1", "private-1").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED


def test_a_consolidated_session_reopens_and_its_next_job_reads_only_what_is_new(
    st: AdminStore,
) -> None:
    turn(st, "s1", "old turn")
    turn(st, "s2", "switch")
    [job] = lease(st)
    complete(st, job)
    assert session(st, "s1").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    late = turn(st, "s1", "a late turn")
    reopened = session(st, "s1")
    assert reopened.state == S.SESSION_CONSOLIDATION_STATE_OPEN
    assert reopened.consolidate_time.seconds > 0
    # s1 (re)started: s2 ended
    assert session(st, "s2").state == S.SESSION_CONSOLIDATION_STATE_QUEUED
    turn(st, "s3", "switch again")
    jobs = {j.session_id: j for j in lease(st)}
    assert set(jobs) == {"s1", "s2"}
    assert [m["id"] for m in json.loads(jobs["s1"].content)["memories"]] == [late]


def test_memories_that_arrive_while_the_job_runs_get_the_next_job(st: AdminStore) -> None:
    turn(st, "s1", "before")
    turn(st, "s2", "switch")
    [job] = lease(st)
    during = turn(st, "s1", "while the job runs")
    complete(st, job)
    assert session(st, "s1").state == S.SESSION_CONSOLIDATION_STATE_QUEUED
    [following] = lease(st)
    assert following.session_id == "s1"
    assert [m["id"] for m in json.loads(following.content)["memories"]] == [during]


def test_shadow_mode_records_the_result_and_writes_nothing_else(
    start: Callable[..., AdminStore],
) -> None:
    st = start(**{"memory.pipelineV2.shadowMode": True})
    source = turn(st, "s1", "a turn in shadow mode")
    turn(st, "s2", "next")
    [job] = lease(st)
    before = st.snapshot()
    response = complete(st, job, facts=[fact("A shadow fact", source)])
    assert response.outcome == jq.LEASE_OUTCOME_OK and not response.memory_ids
    after = st.snapshot()
    assert {t: rows for t, rows in after.items() if t != "memory_jobs"} == {
        t: rows for t, rows in before.items() if t != "memory_jobs"
    }
    result = json.loads(st.scalar("SELECT result FROM memory_jobs WHERE id = ?", job.id))
    assert result["mode"] == "shadow"
    assert result["facts"] == [{"content": "A shadow fact", "source_memory_ids": [source]}]
    assert session(st, "s1").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED


def test_a_session_stays_consolidated_after_retention_removes_its_job(st: AdminStore) -> None:
    turn(st, "s1", "a turn")
    turn(st, "s2", "next")
    [job] = lease(st)
    complete(st, job)
    # as the retention sweep does after retention.completed_job_days
    st.execute("DELETE FROM memory_jobs WHERE id = ?", job.id)
    assert session(st, "s1").state == S.SESSION_CONSOLIDATION_STATE_CONSOLIDATED
    turn(st, "s1", "a late turn")  # and a late memory still reopens it
    assert session(st, "s1").state == S.SESSION_CONSOLIDATION_STATE_OPEN
