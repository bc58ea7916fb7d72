"""OpenTelemetry tracing (services/common/tracing.py), checked with the SDK's
in-memory exporter. Store, search and pipeline are real gRPC servers on real
ports, here in this process (one tracer provider sees every service's spans);
every hop between them is a real gRPC call carrying W3C trace context in its
metadata, as between processes.

- A Remember continues the caller's trace; the pipeline's embed span links to the
  Remember's span, and the store's CompleteEmbedJobs is a child of the embed span.
- A Recall continues the caller's trace, with a child span per channel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.propagate import inject
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from http_fakes import VectorBook, ollama_server
from recall_helpers import QUERY_VECTOR, fake_embedding_overrides
from services.common import tracing

REMEMBER = "engram.store.v1.MemoryStoreService/Remember"
RECALL = "engram.search.v1.SearchService/Recall"
COMPLETE = "engram.store.internal.v1.JobQueueService/CompleteEmbedJobs"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield provider, exporter
    finally:
        tracing.install(None)
        provider.shutdown()


def caller_metadata(provider: TracerProvider, name: str) -> tuple[Any, list[tuple[str, str]]]:
    """A client span and the metadata that carries it (what an instrumented caller sends)."""
    span = provider.get_tracer("test").start_span(name, kind=SpanKind.CLIENT)
    from opentelemetry.trace import set_span_in_context

    carrier: dict[str, str] = {}
    inject(carrier, context=set_span_in_context(span))
    return span, list(carrier.items())


def wait_for(exporter: InMemorySpanExporter, found: Callable[[list[ReadableSpan]], Any]) -> Any:
    deadline = time.monotonic() + 30
    while True:
        result = found(list(exporter.get_finished_spans()))
        if result:
            return result
        assert time.monotonic() < deadline, [s.name for s in exporter.get_finished_spans()]
        time.sleep(0.1)


def test_off_by_default_no_span_and_no_metadata() -> None:
    assert not tracing.enabled()
    assert tracing.outgoing() == []
    assert tracing.lease_metadata(["m1"]) == []


def test_one_trace_follows_a_remember_through_its_embed_job_and_a_recall_through_its_channels(
    spans: tuple[TracerProvider, InMemorySpanExporter],
    recall_stack: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    provider, exporter = spans
    embeddings = http_servers(ollama_server(VectorBook(default=QUERY_VECTOR)))
    stack = recall_stack(fake_embedding_overrides(embeddings.url), pipeline=True)

    client, metadata = caller_metadata(provider, "client remember")
    memory = stack.store.Remember(
        store_pb2.RememberRequest(namespace="t", content="Alice surfs on weekends"),
        metadata=metadata,
        timeout=10,
    ).memory
    client.end()
    trace_id = client.get_span_context().trace_id
    [remember] = [s for s in exporter.get_finished_spans() if s.name == REMEMBER]
    assert remember.kind == SpanKind.SERVER
    assert remember.context.trace_id == trace_id
    assert (
        remember.parent is not None and remember.parent.span_id == client.get_span_context().span_id
    )

    def embed_linked_to_remember(found: list[ReadableSpan]) -> ReadableSpan | None:
        for span in found:
            if span.name == "pipeline.embed" and any(
                link.context.span_id == remember.context.span_id for link in span.links
            ):
                return span
        return None

    embed = wait_for(exporter, embed_linked_to_remember)
    # the embed span's context went to the store with CompleteEmbedJobs (channel helper)
    complete = wait_for(
        exporter,
        lambda found: [
            s
            for s in found
            if s.name == COMPLETE
            and s.parent is not None
            and s.parent.span_id == embed.context.span_id
        ],
    )[0]
    assert complete.context.trace_id == embed.context.trace_id

    def vectors_ready() -> bool:
        return not stack.recall("surfs", namespace="t").degraded and any(
            r.memory.id == memory.id for r in stack.recall("surfs", namespace="t").results
        )

    deadline = time.monotonic() + 30
    while not vectors_ready():
        assert time.monotonic() < deadline
        time.sleep(0.1)

    exporter.clear()
    client, metadata = caller_metadata(provider, "client recall")
    response = stack.search.Recall(
        search_pb2.RecallRequest(namespace="t", query="Alice surfs"), metadata=metadata, timeout=30
    )
    client.end()
    assert [r.memory.id for r in response.results] == [memory.id]
    finished = exporter.get_finished_spans()
    [recall] = [s for s in finished if s.name == RECALL]
    assert recall.context.trace_id == client.get_span_context().trace_id
    assert recall.parent is not None and recall.parent.span_id == client.get_span_context().span_id
    channels = {
        s.name
        for s in finished
        if s.parent is not None and s.parent.span_id == recall.context.span_id
    }
    assert {"recall.keyword", "recall.vector"} <= channels
