"""GetStatus's provider states come from real probes of real servers (a
scripted Ollama LLM on a loopback port), not from "nothing has failed yet":
no LLM server means the LLM is not available; one that starts is seen within
the probe interval; an Extract that fails shows at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from engram.common.v1 import provider_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from grpc_helpers import error_of
from http_fakes import ScriptedHttpServer, VectorBook, ollama_server
from llm_fakes import LlmServer, extraction_answer
from recall_helpers import Stack, fake_embedding_overrides, wait_for

PROBE_WAIT_S = 15.0  # many probe intervals (0.2 s): only a missed probe exceeds it


def providers(stack: Stack) -> dict[str, pb.ProviderStatus]:
    response = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
    return {p.role: p for p in response.providers}


def extract(stack: Stack) -> pb.ExtractResponse:
    return stack.pipeline.Extract(pb.ExtractRequest(content="Alice likes tea"), timeout=10)


def pipeline_with(
    recall_stack: Callable[..., Stack],
    llm: ScriptedHttpServer,
    embeddings: ScriptedHttpServer,
    probe_interval_ms: int,
) -> Stack:
    return recall_stack(
        fake_embedding_overrides(
            embeddings.url,
            **{
                "providers.llm.base_url": llm.url,
                "providers.llm.model": "fake-llm",
                "providers.llm.timeout_ms": 2000,
                "providers.probe_interval_ms": probe_interval_ms,
            },
        ),
        search=False,
        pipeline=True,
    )


def test_the_llm_state_follows_a_probe_of_the_server(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(lambda _p: extraction_answer([])))
    llm.stop()  # nobody listens on its port until llm.start()
    embeddings = http_servers(ollama_server(VectorBook()))
    stack = pipeline_with(recall_stack, llm, embeddings, probe_interval_ms=200)

    down = providers(stack)["llm"]
    assert down.state == provider_pb2.PROVIDER_STATE_DEGRADED, "no LLM server is running"
    assert "unreachable" in down.last_error and llm.url in down.last_error
    assert down.HasField("check_time")
    assert providers(stack)["embedding"].state == provider_pb2.PROVIDER_STATE_AVAILABLE

    llm.start()
    up = wait_for(
        lambda: (p := providers(stack)["llm"]).state == provider_pb2.PROVIDER_STATE_AVAILABLE and p,
        timeout=PROBE_WAIT_S,
        what="LLM available after its server started",
    )
    assert up.last_error == ""
    assert llm.requests_to("GET", "/api/tags"), "a real probe of the server"
    assert llm.prompts() == [], "probing generates nothing"

    llm.stop()
    wait_for(
        lambda: providers(stack)["llm"].state == provider_pb2.PROVIDER_STATE_DEGRADED,
        timeout=PROBE_WAIT_S,
        what="LLM degraded after its server stopped",
    )


def test_an_extract_that_fails_or_succeeds_updates_the_llm_state_at_once(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(lambda _p: extraction_answer([])))
    embeddings = http_servers(ollama_server(VectorBook()))
    # one probe at start, the next in an hour: only the Extract calls can move it
    stack = pipeline_with(recall_stack, llm, embeddings, probe_interval_ms=3_600_000)
    assert providers(stack)["llm"].state == provider_pb2.PROVIDER_STATE_AVAILABLE

    llm.stop()
    code, reason, _ = error_of(lambda: extract(stack))
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "LLM_UNAVAILABLE")
    failed = providers(stack)["llm"]
    assert failed.state == provider_pb2.PROVIDER_STATE_DEGRADED
    assert "unreachable" in failed.last_error

    llm.start()
    assert extract(stack).facts == []
    recovered = providers(stack)["llm"]
    assert (recovered.state, recovered.last_error) == (provider_pb2.PROVIDER_STATE_AVAILABLE, "")


def test_an_embedding_server_that_is_down_is_not_available_before_any_job(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    llm = http_servers(LlmServer(lambda _p: extraction_answer([])))
    embeddings = http_servers(ollama_server(VectorBook()))
    embeddings.stop()
    stack = pipeline_with(recall_stack, llm, embeddings, probe_interval_ms=200)

    down = providers(stack)["embedding"]
    assert down.state == provider_pb2.PROVIDER_STATE_DEGRADED, (
        "no job has failed, but nobody listens"
    )
    assert "unreachable" in down.last_error

    embeddings.start()
    wait_for(
        lambda: providers(stack)["embedding"].state == provider_pb2.PROVIDER_STATE_AVAILABLE,
        timeout=PROBE_WAIT_S,
        what="embedding available after its server started",
    )
