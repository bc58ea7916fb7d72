"""AppendTurn, privacy levels and SummarizeSession on the store (issue 16, seed
001), through the public gRPC API; the summarize job is leased and completed
through the store's job queue as the pipeline's worker does (the worker itself
is tested in tests/pipeline/test_pipeline_summarize_worker.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from admin_helpers import AdminStore, admin_store
from engram.common.v1 import job_pb2, memory_pb2, privacy_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from services.common.clock import days_ago_text

USER, ASSISTANT = store_pb2.TURN_ROLE_USER, store_pb2.TURN_ROLE_ASSISTANT
TWELVE_HOURS = 12 * 3600
PARTIAL, FULL = privacy_pb2.PRIVACY_LEVEL_PARTIAL, privacy_pb2.PRIVACY_LEVEL_FULL


@pytest.fixture
def start(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> Callable[..., AdminStore]:
    return lambda **overrides: admin_store(start_store_server, make_config, **overrides)


@pytest.fixture
def st(start: Callable[..., AdminStore]) -> AdminStore:
    return start()


def turn(st: AdminStore, content: str, role: int = USER, **fields: Any) -> Any:
    fields.setdefault("session_id", "s1")
    return st.store.AppendTurn(store_pb2.AppendTurnRequest(content=content, role=role, **fields))


def lifetime(memory: memory_pb2.Memory) -> int:
    return memory.expire_time.seconds - memory.create_time.seconds


# ---- AppendTurn -----------------------------------------------------------------------------


def test_a_turn_is_short_term_memory_of_its_session_for_twelve_hours(st: AdminStore) -> None:
    response = turn(st, "I'm debugging the payment service", who="ada", source_id="msg-1")
    memory = response.memory
    assert response.captured and not response.promoted and not response.long_term_intent
    assert (memory.session_id, memory.type, memory.source_type) == ("s1", "episodic", "turn.user")
    assert (memory.who, memory.source_id) == ("ada", "msg-1")
    assert lifetime(memory) == TWELVE_HOURS
    assert response.notice == ""
    # durable: committed before the reply, and never extracted
    assert st.scalar("SELECT count(*) FROM memories WHERE id = ?", memory.id) == 1
    jobs = st.rows("SELECT job_type FROM memory_jobs WHERE memory_id = ?", memory.id)
    assert jobs == [("embed",)]


def test_a_turn_is_kept_as_said_a_leading_critical_is_no_pin(st: AdminStore) -> None:
    memory = turn(st, "critical: [prod]: the site is down").memory
    assert memory.content == "critical: [prod]: the site is down"
    assert not memory.pinned and list(memory.tags) == []


def test_the_role_names_the_speaker_when_who_is_empty(st: AdminStore) -> None:
    memory = turn(st, "The fix is in PR 42", role=ASSISTANT).memory
    assert (memory.who, memory.source_type) == ("assistant", "turn.assistant")


def test_the_turn_ttl_comes_from_the_request_or_the_settings(
    start: Callable[..., AdminStore],
) -> None:
    st = start(**{"sessions.turn_ttl_ms": 60_000})
    assert lifetime(turn(st, "a minute").memory) == 60
    ttl = duration_pb2.Duration(seconds=5)
    assert lifetime(turn(st, "five seconds", ttl=ttl).memory) == 5


def test_a_user_turn_that_asks_to_be_remembered_is_kept_long_term(st: AdminStore) -> None:
    response = turn(st, "Remember that Ada prefers dark roast coffee")
    memory = response.memory
    assert response.long_term_intent and response.promoted
    assert not memory.HasField("expire_time") and memory.session_id == "s1"
    assert memory.type == "preference"  # inferred, as Remember does
    jobs = st.rows("SELECT job_type FROM memory_jobs WHERE memory_id = ? ORDER BY 1", memory.id)
    assert jobs == [("embed",), ("extract",)]  # the pipeline is on in this store


def test_a_japanese_request_to_remember_is_kept_long_term(st: AdminStore) -> None:
    response = turn(st, "私はコーヒーが苦手です。覚えておいてください")
    assert response.promoted and not response.memory.HasField("expire_time")


def test_only_user_turns_pass_the_intent_gate(st: AdminStore) -> None:
    response = turn(st, "I will remember that you like tea. Remember: tea.", role=ASSISTANT)
    assert not response.long_term_intent and not response.promoted
    assert response.memory.HasField("expire_time")


def test_a_promoted_turn_makes_its_short_term_twin_long_term(st: AdminStore) -> None:
    first = turn(st, "don't forget the demo is on Tuesday").memory
    assert not first.HasField("expire_time")
    short = turn(st, "my cat is called Miso").memory
    again = turn(st, "Remember: my cat is called Miso")
    assert not again.deduplicated  # other content: a new long-term memory
    same = turn(st, "my cat is called Miso", role=ASSISTANT)
    assert same.deduplicated and same.memory.id == short.id


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"session_id": ""}, "session_id"),
        ({"session_id": "has space"}, "session_id"),
        ({"role": store_pb2.TURN_ROLE_UNSPECIFIED}, "role"),
        ({"content": "   "}, "content"),
        ({"ttl": duration_pb2.Duration(seconds=-1)}, "ttl"),
        ({"namespace": "bad namespace"}, "namespace"),
        ({"privacy": 9}, "privacy"),
    ],
)
def test_bad_turns_are_invalid_argument_naming_the_field_and_write_nothing(
    st: AdminStore, fields: dict[str, Any], bad_field: str
) -> None:
    request: dict[str, Any] = {"session_id": "s1", "role": USER, "content": "hello", **fields}
    before = st.snapshot()
    code, reason, names = error_of(
        lambda: st.store.AppendTurn(store_pb2.AppendTurnRequest(**request))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert names == [bad_field]
    assert st.snapshot() == before


# ---- privacy ----------------------------------------------------------------------------------


def test_full_privacy_captures_nothing_and_says_so(st: AdminStore) -> None:
    before = st.snapshot()
    response = turn(st, "Remember my PIN is 1234", privacy=FULL)
    assert not response.captured and not response.HasField("memory")
    assert response.long_term_intent and not response.promoted
    assert "not saved" in response.notice
    assert st.snapshot() == before


def test_partial_privacy_keeps_the_turn_short_term_and_says_why_it_was_not_kept(
    st: AdminStore,
) -> None:
    response = turn(st, "Remember that I live in Lyon", privacy=PARTIAL)
    assert response.captured and response.long_term_intent and not response.promoted
    assert response.memory.HasField("expire_time")
    assert "long-term memory" in response.notice


def test_partial_privacy_refuses_a_long_term_remember_with_a_sentence_to_relay(
    st: AdminStore,
) -> None:
    before = st.snapshot()
    request = store_pb2.RememberRequest(content="lives in Lyon", privacy=PARTIAL)
    with pytest.raises(grpc.RpcError) as caught:
        st.store.Remember(request)
    assert error_of(lambda: st.store.Remember(request))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PRIVACY_BLOCKED",
    )
    assert caught.value.details().startswith("Your privacy setting is partial")  # type: ignore[attr-defined]
    assert st.snapshot() == before
    # a short-term memory is still allowed at PARTIAL
    short = store_pb2.RememberRequest(
        content="lives in Lyon", privacy=PARTIAL, ttl=duration_pb2.Duration(seconds=60)
    )
    assert st.store.Remember(short).memory.HasField("expire_time")


def test_full_privacy_refuses_every_remember(st: AdminStore) -> None:
    request = store_pb2.RememberRequest(
        content="x", privacy=FULL, ttl=duration_pb2.Duration(seconds=60)
    )
    assert error_of(lambda: st.store.Remember(request))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PRIVACY_BLOCKED",
    )


def test_a_namespace_level_applies_and_a_request_cannot_loosen_it(
    start: Callable[..., AdminStore],
) -> None:
    st = start(**{"sessions.privacy": {"user:*": "partial", "user:secret": "full"}})
    loose = store_pb2.RememberRequest(
        namespace="user:ada", content="fact", privacy=privacy_pb2.PRIVACY_LEVEL_NONE
    )
    assert error_of(lambda: st.store.Remember(loose))[1] == "PRIVACY_BLOCKED"
    assert not turn(st, "hello", namespace="user:secret").captured
    summarize_secret = store_pb2.SummarizeSessionRequest(namespace="user:secret", session_id="s1")
    assert error_of(lambda: st.store.SummarizeSession(summarize_secret))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PRIVACY_BLOCKED",
    )
    assert turn(st, "hello", namespace="user:ada").captured
    assert st.store.Remember(store_pb2.RememberRequest(namespace="team", content="ok")).memory.id
    # import items of such a namespace fail alone, naming why
    batch = store_pb2.ImportMemoriesRequest(
        namespace="user:ada",
        items=[
            store_pb2.ImportItem(content="long-term item"),
            store_pb2.ImportItem(content="short item", ttl=duration_pb2.Duration(seconds=60)),
        ],
    )
    failed, created = st.store.ImportMemories(iter([batch])).results
    assert failed.status == store_pb2.IMPORT_STATUS_FAILED and "PRIVACY_BLOCKED" in failed.error
    assert created.status == store_pb2.IMPORT_STATUS_CREATED


def test_partial_privacy_refuses_changing_long_term_memory(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    long_id = st.remember("fact in a namespace turned partial later", namespace="user:bo")
    st.thread.stop()
    st = start(**{"sessions.privacy": {"user:bo": "partial"}})
    request = store_pb2.ModifyMemoriesRequest(
        namespace="user:bo",
        patches=[store_pb2.MemoryPatch(id=long_id, content="changed")],
        reason="edit",
    )
    assert error_of(lambda: st.store.ModifyMemories(request))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "PRIVACY_BLOCKED",
    )


# ---- SummarizeSession and the summarize job --------------------------------------------------


def summarize(st: AdminStore, session_id: str = "s1") -> store_pb2.SummarizeSessionResponse:
    return st.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id=session_id))


def lease_summary_job(st: AdminStore) -> list[jq.Job]:
    return list(
        st.jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_SUMMARIZE_SESSION, max_jobs=10)
        ).jobs
    )


def complete(st: AdminStore, job: jq.Job, summary: str) -> jq.CompleteSummarizeJobResponse:
    return st.jobs.CompleteSummarizeJob(
        jq.CompleteSummarizeJobRequest(
            lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
            summary=summary,
            model="test-llm",
        )
    )


def session_memories(st: AdminStore, session_id: str = "s1") -> list[memory_pb2.Memory]:
    request = store_pb2.ListMemoriesRequest(filter=memory_pb2.MemoryFilter(session_id=session_id))
    return list(st.store.ListMemories(request).memories)


def test_summarize_queues_one_job_per_session_and_leases_it_with_the_transcript(
    st: AdminStore,
) -> None:
    turn(st, "My laptop won't boot", who="ada")
    turn(st, "Try holding the power button", role=ASSISTANT)
    turn(st, "remember that my laptop is a ThinkPad")  # long-term: not in the transcript
    turn(st, "another session's turn", session_id="s2")
    first = summarize(st)
    assert not first.already_queued and first.turn_count == 2
    again = summarize(st)
    assert again.already_queued and again.job_id == first.job_id
    [job] = lease_summary_job(st)
    assert (job.id, job.session_id, job.memory_id) == (first.job_id, "s1", "")
    lines = job.content.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "ada: My laptop won't boot",
        "assistant: Try holding the power button",
    ]
    # a leased job does not hold back the next request
    assert not summarize(st).already_queued


def test_the_summary_is_a_24_hour_memory_of_the_session_and_replaces_the_previous(
    st: AdminStore,
) -> None:
    turn(st, "We chose Postgres for the ledger")
    summarize(st)
    [job] = lease_summary_job(st)
    done = complete(st, job, "The user chose Postgres for the ledger.")
    assert done.outcome == jq.LEASE_OUTCOME_OK and done.memory_id
    summary = st.store.GetMemory(store_pb2.GetMemoryRequest(id=done.memory_id)).memory
    assert (summary.type, summary.session_id, summary.who) == (
        "session_summary",
        "s1",
        "pipeline-summarizer",
    )
    assert lifetime(summary) == 24 * 3600 and summary.source_id == job.id

    turn(st, "And Redis for the cache")
    summarize(st)
    [second] = lease_summary_job(st)
    assert "Redis" in second.content and "Postgres" in second.content
    newer = complete(st, second, "Postgres for the ledger, Redis for the cache.")
    summaries = [m for m in session_memories(st) if m.type == "session_summary"]
    assert [m.id for m in summaries] == [newer.memory_id]
    history = st.rows(
        "SELECT event, changed_by, reason FROM memory_history WHERE memory_id = ? ORDER BY seq",
        done.memory_id,
    )
    assert history[-1] == ("deleted", "pipeline-summarizer", "replaced by a newer summary")
    assert st.scalar("SELECT status FROM memory_jobs WHERE id = ?", second.id) == "completed"


def test_an_older_summary_finishing_late_never_replaces_a_newer_one(st: AdminStore) -> None:
    turn(st, "first turn")
    summarize(st)
    [old_job] = lease_summary_job(st)
    # a newer turn arrives and its summary is leased and finishes first
    st.execute("UPDATE memories SET created_at = ? WHERE session_id = 's1'", days_ago_text(0.01))
    turn(st, "second turn")
    summarize(st)
    [new_job] = lease_summary_job(st)
    newer = complete(st, new_job, "first and second turns")
    late = complete(st, old_job, "only the first turn")
    assert late.outcome == jq.LEASE_OUTCOME_OK
    assert (late.memory_id, late.superseded_by) == ("", newer.memory_id)
    summaries = [m.id for m in session_memories(st) if m.type == "session_summary"]
    assert summaries == [newer.memory_id]


def test_a_lost_lease_writes_no_summary(st: AdminStore) -> None:
    turn(st, "some turn")
    summarize(st)
    [job] = lease_summary_job(st)
    forged = jq.Job(id=job.id, lease_token="not-the-token")
    before = st.snapshot()
    assert complete(st, forged, "a summary").outcome == jq.LEASE_OUTCOME_LEASE_LOST
    assert st.snapshot() == before


def test_summarize_errors(st: AdminStore) -> None:
    assert error_of(lambda: summarize(st, ""))[2] == ["session_id"]
    assert error_of(lambda: summarize(st, "empty-session"))[0] == grpc.StatusCode.NOT_FOUND
    turn(st, "x")
    summarize(st)
    [job] = lease_summary_job(st)
    assert error_of(lambda: complete(st, job, "  "))[2] == ["summary"]


def test_a_job_whose_turns_all_expired_completes_without_a_lease(st: AdminStore) -> None:
    memory = turn(st, "soon gone").memory
    summarize(st)
    st.execute(
        "UPDATE memories SET expire_at = ? WHERE id = ?", days_ago_text(1 / 86400), memory.id
    )
    assert lease_summary_job(st) == []
    assert st.scalar("SELECT result FROM memory_jobs WHERE job_type = 'summarize_session'") == (
        '{"skipped":"no live turns"}'
    )


def test_a_session_is_scoped_to_its_namespace(st: AdminStore) -> None:
    """The same session id in another namespace is another session: summarizing it there
    finds nothing (NOT_FOUND, no job), and the error says nothing of the other tenant's."""
    turn(st, "tenant a's private turn", namespace="tenant-a", session_id="shared")
    before = st.snapshot()
    code, _, _ = error_of(
        lambda: st.store.SummarizeSession(
            store_pb2.SummarizeSessionRequest(namespace="tenant-b", session_id="shared")
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert st.snapshot() == before
    assert lease_summary_job(st) == []
    listed = st.store.ListMemories(
        store_pb2.ListMemoriesRequest(
            namespace="tenant-b", filter=memory_pb2.MemoryFilter(session_id="shared")
        )
    )
    assert list(listed.memories) == []


def test_summarize_without_an_llm_is_refused_and_queues_nothing(
    start: Callable[..., AdminStore],
) -> None:
    """No LLM configured (Pipeline V2 off, no `providers.llm` key): no worker could write the
    summary, so SummarizeSession says how to configure one instead of queueing a job that
    would wait forever; once `providers.llm` is set, it queues as before."""
    st = start(**{"memory.pipelineV2.enabled": False})
    turn(st, "we booked the hotel in Porto")
    before = st.snapshot()
    code, reason, _ = error_of(lambda: summarize(st))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "LLM_NOT_CONFIGURED")
    with pytest.raises(grpc.RpcError) as caught:
        summarize(st)
    assert "providers.llm" in caught.value.details()
    assert st.snapshot() == before
    assert st.scalar("SELECT count(*) FROM memory_jobs WHERE job_type = 'summarize_session'") == 0

    configured = start(**{"memory.pipelineV2.enabled": False, "providers.llm.model": "qwen3:4b"})
    turn(configured, "and the train to Lisbon", session_id="s2")
    assert summarize(configured, "s2").job_id
