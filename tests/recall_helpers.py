"""Helpers for the recall tests (job queue, search, pipeline): chosen vectors,
bounded polling, queue counts, and the Stack that the `recall_stack` fixture builds.

Deterministic vector tests need no model: memories get the vectors the test
chooses through JobQueueService.CompleteEmbedJobs, and the search service's
query embedder is pointed at a scripted Ollama server (tests/http_fakes.py)
that answers the query text with a chosen vector. Store and search share one
configuration, so the index model is the same `MODEL` on both sides.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import grpc
from google.protobuf import timestamp_pb2

from engram.common.v1 import job_pb2, memory_pb2
from engram.search.v1 import search_pb2
from engram.store.internal.v1 import access_pb2_grpc, job_queue_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from services.common.config import Config

MODEL = "fake-embed"
DIM = 8
QUERY_VECTOR = [1.0] + [0.0] * (DIM - 1)
WAIT_S = 30.0

T = TypeVar("T")


def vec(cosine: float, axis: int = 1) -> list[float]:
    """A unit vector whose cosine with QUERY_VECTOR is `cosine` (the rest on `axis`)."""
    vector = [0.0] * DIM
    vector[0] = cosine
    vector[axis] = math.sqrt(max(0.0, 1.0 - cosine * cosine))
    return vector


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float = WAIT_S,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


def count(stats: Any, job_type: int, status: int) -> int:
    """A queue depth from GetQueueStats (0 when absent)."""
    return sum(c.count for c in stats.counts if c.job_type == job_type and c.status == status)


def timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(moment)
    return ts


_EPOCH = datetime(2001, 3, 1, tzinfo=UTC)


@dataclass(repr=False)
class Stack:
    """A running store (and search / pipeline) over one file, with terse calls."""

    config: Config
    store: Any
    jobs_channel: grpc.Channel  # the store's internal listener
    store_thread: Any
    search: Any = None
    search_thread: Any = None
    pipeline: Any = None
    pipeline_thread: Any = None
    _events: int = field(default=0, repr=False)

    def __repr__(self) -> str:
        return f"Stack(storage.path={self.config.storage.path!r})"

    @property
    def jobs(self) -> job_queue_pb2_grpc.JobQueueServiceStub:
        return job_queue_pb2_grpc.JobQueueServiceStub(self.jobs_channel)

    @property
    def access(self) -> access_pb2_grpc.AccessServiceStub:
        return access_pb2_grpc.AccessServiceStub(self.jobs_channel)

    def remember(self, content: str, namespace: str = "default", **fields: Any) -> Any:
        """Remember with its own event time, so no two memories share an episode."""
        if "event_time" not in fields:
            self._events += 1
            fields["event_time"] = timestamp(_EPOCH + timedelta(minutes=self._events))
        return self.store.Remember(
            store_pb2.RememberRequest(namespace=namespace, content=content, **fields)
        ).memory

    def recall(
        self,
        query: str,
        namespace: str = "default",
        limit: int = 10,
        **filter_fields: Any,
    ) -> search_pb2.RecallResponse:
        request = search_pb2.RecallRequest(namespace=namespace, query=query, limit=limit)
        if filter_fields:
            request.filter.CopyFrom(memory_pb2.MemoryFilter(**filter_fields))
        return self.search.Recall(request, timeout=30)

    def stats(self) -> jq.GetQueueStatsResponse:
        return self.jobs.GetQueueStats(jq.GetQueueStatsRequest())

    def embed_pending(
        self,
        vectors: Mapping[str, Sequence[float]] | Callable[[str], Sequence[float]],
        *,
        model: str = MODEL,
        namespaces: Sequence[str] = (),
    ) -> int:
        """Lease every due embed job and complete it with the chosen vector for its
        content; returns how many were completed."""
        lookup = vectors if callable(vectors) else (lambda text: vectors[text])
        done = 0
        while True:
            leased = self.jobs.LeaseJobs(
                jq.LeaseJobsRequest(
                    job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=500, namespaces=list(namespaces)
                )
            ).jobs
            if not leased:
                return done
            response = self.jobs.CompleteEmbedJobs(
                jq.CompleteEmbedJobsRequest(
                    model=model,
                    results=[
                        jq.EmbedResult(
                            lease=jq.JobLease(job_id=j.id, lease_token=j.lease_token),
                            content_hash=j.content_hash,
                            vector=list(lookup(j.content)),
                        )
                        for j in leased
                    ],
                )
            )
            assert list(response.outcomes) == [jq.LEASE_OUTCOME_OK] * len(leased)
            done += len(leased)


def ids(response: search_pb2.RecallResponse) -> list[str]:
    return [r.memory.id for r in response.results]


def fake_embedding_overrides(base_url: str, **more: Any) -> dict[str, Any]:
    """Store + search configuration for chosen-vector tests: the index model is MODEL,
    the query embedder is a scripted Ollama server, and no score floor interferes."""
    return {
        "providers.embedding.kind": "ollama",
        "providers.embedding.model": MODEL,
        "providers.embedding.base_url": base_url,
        "providers.embedding.timeout_ms": 5000,
        "search.min_score": 0.0,
        "search.access_flush_ms": 50,
        **more,
    }
