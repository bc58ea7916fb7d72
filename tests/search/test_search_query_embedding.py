"""The query embedding under trouble and under concurrency, through Recall: a
provider that stalls past the timeout gives a keyword answer whose warning names
the timeout, and concurrent Recalls' queries share provider calls.

The scripted Ollama server holds its answers until the test opens a gate, so
"stalled" and "busy" are states the test sets, not durations it guesses."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from http_fakes import ScriptedHttpServer, VectorBook, ollama_server
from recall_helpers import QUERY_VECTOR, Stack, fake_embedding_overrides, ids, vec, wait_for
from services.search.query_intent import EXAMPLES

GATE_CAP_S = 20.0  # a forgotten gate must not hold server threads for ever
INTENT_EXAMPLES = {
    text for by_intent in EXAMPLES.values() for texts in by_intent.values() for text in texts
}


def query_calls(server: ScriptedHttpServer) -> list[Any]:
    """The provider calls for queries (not the intent examples' one)."""
    calls = server.requests_to("POST", "/api/embed")
    return [c for c in calls if not set(c.json["input"]) <= INTENT_EXAMPLES]


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    opened = threading.Event()
    yield opened
    opened.set()


def gated_stack(
    recall_stack: Callable[..., Stack],
    http_servers: Callable[[Any], Any],
    gate: threading.Event,
    **overrides: Any,
) -> tuple[Stack, ScriptedHttpServer]:
    book = VectorBook({"zebra": QUERY_VECTOR})

    def embed(text: str) -> list[float]:
        if text not in INTENT_EXAMPLES:  # those embed at startup, in a call of their own
            gate.wait(GATE_CAP_S)
        return book(text)

    server = http_servers(ollama_server(embed))
    return recall_stack(fake_embedding_overrides(server.url, **overrides)), server


def test_a_query_embedding_past_its_timeout_answers_from_keywords_and_names_the_timeout(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any], gate: threading.Event
) -> None:
    stack, _ = gated_stack(
        recall_stack, http_servers, gate, **{"search.query_embedding_timeout_ms": 200}
    )
    memory = stack.remember("zebra crossing")
    stack.embed_pending(lambda _text: vec(0.9))

    response = stack.recall("zebra")  # the provider never answers in time

    assert ids(response) == [memory.id]
    assert response.degraded
    assert list(response.warnings) == ["query embedding timed out after 0.2 s"]


def test_concurrent_recalls_share_provider_calls_for_their_queries(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any], gate: threading.Event
) -> None:
    stack, server = gated_stack(
        recall_stack, http_servers, gate, **{"search.query_embedding_timeout_ms": 15000}
    )
    stack.remember("zebra crossing")
    stack.embed_pending(lambda _text: vec(0.9))
    queries = [f"zebra number {i}" for i in range(7)]

    with ThreadPoolExecutor(len(queries)) as pool:
        first = pool.submit(stack.recall, queries[0])
        wait_for(lambda: query_calls(server), what="the first query call")
        rest = [pool.submit(stack.recall, query) for query in queries[1:]]
        time.sleep(0.5)  # let the other six reach the search service (not a threshold)
        gate.set()
        responses = [first.result(), *(future.result() for future in rest)]

    assert not any(response.degraded for response in responses)
    calls = query_calls(server)
    embedded = [text for call in calls for text in call.json["input"]]
    assert sorted(embedded) == sorted(queries)  # each query embedded once
    assert len(calls) < len(queries)  # and the six that waited shared calls
