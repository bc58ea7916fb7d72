"""The session summary worker through real servers: store + search + pipeline on
port 0 over one SQLite file, and a scripted LLM (Ollama and OpenAI-compatible)
on a loopback port. SummarizeSession's job is leased, the LLM writes the
summary from the session's transcript, and the store keeps it as the session's
24-hour `session_summary`; a bad answer or a 5xx is a failed attempt, retried,
and dead after `workerMaxRetries`, with no summary written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram.common.v1 import memory_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.store.v1 import store_pb2
from http_fakes import Reply
from llm_fakes import LlmServer, is_summary, transcript_of
from recall_helpers import Stack, wait_for
from store_helpers import rows

WORKER = {
    "memory.pipelineV2.workerPollMs": 100,
    "memory.pipelineV2.workerMaxRetries": 2,
    "providers.embedding.kind": "none",
    "providers.llm.timeout_ms": 2000,
}


def summarizer(prompt: str) -> str | Reply:
    if not is_summary(prompt):
        return Reply(500, {"error": "only summaries are expected"})
    lines = transcript_of(prompt).splitlines()
    return json.dumps({"summary": f"The session had {len(lines)} turns; last: {lines[-1][22:]}"})


def make_stack_with(
    recall_stack: Callable[..., Stack], start_pipeline_server: Callable[..., Any]
) -> Callable[..., Stack]:
    def make(llm: LlmServer, **overrides: Any) -> Stack:
        stack = recall_stack({**WORKER, "providers.llm.base_url": llm.url, **overrides})
        stack.config = stack.config.with_overrides(
            {"clients.search_address": f"127.0.0.1:{stack.search_thread.app.port}"}
        )
        stack.pipeline_thread, stack.pipeline = start_pipeline_server(stack.config)
        return stack

    return make


@pytest.fixture
def make_stack(
    recall_stack: Callable[..., Stack], start_pipeline_server: Callable[..., Any]
) -> Callable[..., Stack]:
    return make_stack_with(recall_stack, start_pipeline_server)


def turn(stack: Stack, content: str, role: int = store_pb2.TURN_ROLE_USER) -> Any:
    return stack.store.AppendTurn(
        store_pb2.AppendTurnRequest(session_id="chat-1", role=role, content=content)
    )


def summaries(stack: Stack) -> list[memory_pb2.Memory]:
    request = store_pb2.ListMemoriesRequest(filter=memory_pb2.MemoryFilter(session_id="chat-1"))
    return [m for m in stack.store.ListMemories(request).memories if m.type == "session_summary"]


def summarize_job(stack: Stack) -> dict[str, Any]:
    names = ("id", "status", "attempts", "error", "result")
    [row] = rows(
        Path(stack.config.storage.path),
        f"SELECT {', '.join(names)} FROM memory_jobs WHERE job_type = 'summarize_session'",
    )
    return dict(zip(names, row, strict=True))


def worker_status(stack: Stack) -> Any:
    status = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
    [worker] = [w for w in status.workers if w.name == "summarize"]
    return worker


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_the_llm_summarises_the_session_into_its_24_hour_summary(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any], protocol: str
) -> None:
    llm = http_servers(LlmServer(summarizer, protocol=protocol))
    stack = make_stack(llm, **{"providers.llm.kind": protocol})
    turn(stack, "My build fails with a linker error")
    turn(stack, "Which compiler version do you use?", role=store_pb2.TURN_ROLE_ASSISTANT)
    queued = stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="chat-1"))
    assert queued.turn_count == 2
    [summary] = wait_for(lambda: summaries(stack), what="the session summary")
    assert summary.content == (
        "The session had 2 turns; last: assistant: Which compiler version do you use?"
    )
    assert (summary.who, summary.session_id) == ("pipeline-summarizer", "chat-1")
    assert summary.expire_time.seconds - summary.create_time.seconds == 24 * 3600
    [prompt] = llm.prompts()
    assert "user: My build fails with a linker error" in transcript_of(prompt)
    job = summarize_job(stack)
    assert (job["status"], job["attempts"]) == ("completed", 1)
    assert json.loads(job["result"]) == {"memory_id": summary.id}
    assert wait_for(lambda: worker_status(stack).completed_count == 1, what="status")


def test_shadow_mode_records_the_summary_and_writes_no_memory(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    """Seed 000: shadow mode makes no writes to the memories table; the summary the
    model wrote is in the job's result (found with the real model, whose summary
    was written in shadow mode)."""
    llm = http_servers(LlmServer(summarizer))
    stack = make_stack(llm, **{"memory.pipelineV2.shadowMode": True})
    turn(stack, "My build fails with a linker error")
    stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="chat-1"))
    wait_for(lambda: summarize_job(stack)["status"] == "completed", what="the summarize job")
    result = json.loads(summarize_job(stack)["result"])
    assert result["mode"] == "shadow"
    assert (
        result["summary"]
        == "The session had 1 turns; last: user: My build fails with a linker error"
    )
    assert summaries(stack) == []


def test_a_second_summary_replaces_the_first(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    stack = make_stack(http_servers(LlmServer(summarizer)))
    turn(stack, "first question")
    stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="chat-1"))
    [first] = wait_for(lambda: summaries(stack), what="the first summary")
    turn(stack, "second question")
    stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="chat-1"))
    [second] = wait_for(
        lambda: (found := summaries(stack)) and found[0].id != first.id and found,
        what="the second summary",
    )
    assert "2 turns" in second.content
    got = stack.store.GetMemory(store_pb2.GetMemoryRequest(id=first.id)).memory
    assert got.deleted


def test_a_bad_answer_is_a_failed_attempt_and_the_retry_succeeds(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    answers = iter(["this is not json at all", json.dumps({"summary": ""})])

    def flaky(prompt: str) -> str | Reply:
        return next(answers, None) or str(summarizer(prompt))

    stack = make_stack(http_servers(LlmServer(flaky)), **{"memory.pipelineV2.workerMaxRetries": 3})
    turn(stack, "hello there")
    stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="chat-1"))
    wait_for(lambda: summaries(stack), what="the summary after two failed attempts")
    job = summarize_job(stack)
    assert (job["status"], job["attempts"]) == ("completed", 3)
    assert worker_status(stack).failed_count == 2


def test_an_llm_that_always_fails_leaves_a_dead_job_and_no_summary(
    make_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(lambda prompt: Reply(500, {"error": "boom"})))
    stack = make_stack(llm)
    turn(stack, "hello there")
    stack.store.SummarizeSession(store_pb2.SummarizeSessionRequest(session_id="chat-1"))
    job = wait_for(lambda: (j := summarize_job(stack))["status"] == "dead" and j, what="a dead job")
    assert job["attempts"] == 2 and job["error"]
    assert summaries(stack) == []
