"""Every Prometheus metric Engram exports, defined once (docs/observability.md "Metrics").

Each process has one registry (prometheus_client's default); `engram serve`
publishes it over HTTP on `server.metrics_ports.<service>` (`serve_metrics`).
Services in one process (tests) share it, which is harmless: labels say which
method, channel or provider a sample belongs to.

The queue depth is read when Prometheus scrapes (`queue_depth_source`), not
refreshed on a timer: a scrape always sees the queue as it is.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("engram.metrics")

P = ParamSpec("P")
T = TypeVar("T")

# Latency buckets from a fast unary call (sub-millisecond) to a slow LLM answer.
_SECONDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

RPC_REQUESTS = Counter(
    "engram_rpc_requests_total",
    "RPCs handled, by full method name and status code",
    ["method", "code"],
)
RPC_SECONDS = Histogram(
    "engram_rpc_duration_seconds",
    "Time from handler start to the last response, by method and status code",
    ["method", "code"],
    buckets=_SECONDS,
)
WRITER_GROUP_SIZE = Histogram(
    "engram_writer_group_size",
    "Writes committed together in one store transaction",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
WRITER_COMMIT_SECONDS = Histogram(
    "engram_writer_commit_duration_seconds",
    "Time to run and commit one group of writes in the store",
    buckets=_SECONDS,
)
WRITER_WAL_BYTES = Gauge(
    "engram_writer_wal_bytes",
    "Size of the store's SQLite WAL file after the last group (bounded by storage.wal_restart_mb)",
)
WRITER_WAL_RESTARTS = Counter(
    "engram_writer_wal_restarts_total",
    "Checkpoints the store's writer forced past storage.wal_restart_mb, by outcome: restarted "
    "(the WAL starts over), gave_up (older read snapshots outlasted the wait; tried again "
    "later), failed (an error, logged)",
    ["outcome"],
)
EMBEDDING_SECONDS = Histogram(
    "engram_embedding_request_duration_seconds",
    "Embedding provider calls (a batch of texts), by provider kind and outcome",
    ["kind", "outcome"],
    buckets=_SECONDS,
)
EMBEDDING_ERRORS = Counter(
    "engram_embedding_errors_total",
    "Embedding provider calls that failed, by provider kind and error class",
    ["kind", "error"],
)
EMBED_WORKER_SECONDS = Histogram(
    "engram_embed_worker_stage_seconds",
    "The pipeline's embedding worker, per batch and stage: lease (the LeaseJobs call, long "
    "poll included), tokenise and model (the local model), complete (CompleteEmbedJobs), "
    "and the time the model thread waited for a lease or a completion slot",
    ["stage"],
    buckets=_SECONDS,
)
LLM_SECONDS = Histogram(
    "engram_llm_request_duration_seconds",
    "LLM provider calls, by provider kind and outcome",
    ["kind", "outcome"],
    buckets=_SECONDS,
)
LLM_ERRORS = Counter(
    "engram_llm_errors_total",
    "LLM provider calls that failed, by provider kind and error class",
    ["kind", "error"],
)
READ_POOL_CONNECTIONS = Gauge(
    "engram_read_pool_connections",
    "Read connections open in this process's SQLite read pool (at most storage.read_connections)",
)
VECTOR_CACHE_ROWS = Gauge(
    "engram_vector_cache_rows",
    "Vectors held in search's in-memory sign-bit cache",
)
RECALL_CHANNEL_SECONDS = Histogram(
    "engram_recall_channel_duration_seconds",
    "Time of each Recall channel (keyword, vector, graph, rerank)",
    ["channel"],
    buckets=_SECONDS,
)


_rpc_children: dict[tuple[str, str], tuple[Any, Any]] = {}


def rpc_done(method: str, code: str, seconds: float) -> None:
    """Count and time one finished RPC. The labelled children are looked up once per
    (method, code): `labels()` on every call cost several times the update itself."""
    children = _rpc_children.get((method, code))
    if children is None:
        children = _rpc_children[(method, code)] = (
            RPC_REQUESTS.labels(method, code),
            RPC_SECONDS.labels(method, code),
        )
    children[0].inc()
    children[1].observe(seconds)


@contextlib.contextmanager
def timed(histogram: Histogram, *labels: str) -> Iterator[None]:
    """Observe the block's wall time in `histogram` (with `labels`)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        target = histogram.labels(*labels) if labels else histogram
        target.observe(time.perf_counter() - started)


def measured_call(
    seconds: Histogram, errors: Counter
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """Decorate a provider's call method (`self.kind` names the provider): its
    latency by outcome, and its failures by error class."""

    def decorate(
        method: Callable[P, Coroutine[Any, Any, T]],
    ) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            kind = str(getattr(args[0], "kind", ""))
            started = time.perf_counter()
            try:
                result = await method(*args, **kwargs)
            except Exception as exc:
                seconds.labels(kind, "error").observe(time.perf_counter() - started)
                errors.labels(kind, type(exc).__name__).inc()
                raise
            seconds.labels(kind, "ok").observe(time.perf_counter() - started)
            return result

        return call

    return decorate


class _QueueDepth(Collector):
    """engram_queue_jobs{type,state}, read from the store's database at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._source: Callable[[], dict[tuple[str, str], int]] | None = None

    def set_source(self, source: Callable[[], dict[tuple[str, str], int]] | None) -> None:
        with self._lock:
            self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "engram_queue_jobs",
            "Jobs in the store's queue, by job type and state",
            labels=["type", "state"],
        )
        with self._lock:
            source = self._source
        if source is not None:
            try:
                counts = source()
            except Exception:  # a scrape never fails because the database is busy
                log.warning("queue depth unreadable", exc_info=True)
                counts = {}
            for (job_type, state), count in sorted(counts.items()):
                family.add_metric([job_type, state], count)
        yield family


queue_depth_source = _QueueDepth()
REGISTRY.register(queue_depth_source)


def serve_metrics(host: str, port: int) -> Any:
    """Serve the registry at http://host:port/metrics; None when `port` is 0 (off)."""
    if port == 0:
        return None
    server, _thread = start_http_server(port, addr=host)
    log.info("metrics served", extra={"address": f"{host}:{port}"})
    return server
