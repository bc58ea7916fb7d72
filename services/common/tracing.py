"""Optional OpenTelemetry tracing (docs/observability.md "Tracing"), off unless
`tracing.otlp_endpoint` is set (or a test installs its own tracer provider).

W3C trace context travels in gRPC metadata (`traceparent`, `tracestate`): the
server interceptor (services/common/interceptors.py) continues the caller's
trace in a span per RPC, and the channel helper (services/common/channels.py)
sends the current span's context on every call between services. Recall adds a
span per channel. While tracing is off, every hook here is a test of one
module global: no OpenTelemetry import, no span, no metadata.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from services.common.config import Config, ConfigError

_tracer: Any = None  # an opentelemetry Tracer while tracing is on
_provider: Any = None
_NO_SPAN = contextlib.nullcontext()
TRACE_KEYS = ("traceparent", "tracestate")


def enabled() -> bool:
    return _tracer is not None


def configure_tracing(config: Config, service: str) -> None:
    """Export spans over OTLP/gRPC to `tracing.otlp_endpoint`, as `engram-<service>`."""
    if not config.tracing.otlp_endpoint:
        return
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(
            f"tracing.otlp_endpoint is set but OpenTelemetry is not installed ({exc}): "
            "install the engram[tracing] extra"
        ) from exc

    provider = TracerProvider(resource=Resource.create({"service.name": f"engram-{service}"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(
                endpoint=config.tracing.otlp_endpoint, insecure=config.tracing.insecure
            )
        )
    )
    install(provider)


def install(provider: Any) -> None:
    """Trace with `provider` (an SDK TracerProvider); None turns tracing off."""
    global _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("engram")


def shutdown() -> None:
    """Export the spans still queued (at the end of `engram serve`)."""
    if _provider is not None:
        _provider.shutdown()
    install(None)


def server_span(method: str, metadata: Sequence[tuple[str, Any]] | None) -> Any:
    """The span of one served RPC, continuing the caller's trace from `metadata`."""
    if _tracer is None:
        return _NO_SPAN
    return _server_span(method, metadata)


@contextlib.contextmanager
def _server_span(method: str, metadata: Sequence[tuple[str, Any]] | None) -> Iterator[None]:
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind

    carrier = {key: str(value) for key, value in metadata or () if key in TRACE_KEYS}
    service, _, name = method.lstrip("/").partition("/")
    with _tracer.start_as_current_span(
        method.lstrip("/"),
        context=extract(carrier),
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
    ):
        yield


def span(name: str, **attributes: Any) -> Any:
    """A span inside the current one (a Recall channel, a worker's job batch)."""
    if _tracer is None:
        return _NO_SPAN
    return _tracer.start_as_current_span(name, attributes=attributes)


def outgoing() -> list[tuple[str, str]]:
    """The current trace context as gRPC metadata, for a call to another service."""
    if _tracer is None:
        return []
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return [(key, value) for key, value in carrier.items() if key in TRACE_KEYS]


# ---- a Remember's trace, linked from the embed job that follows it -------------------
#
# The job row does not carry the trace context (that would be a migration and a
# proto field for a debugging aid). The store remembers the Remember span's
# `traceparent` by memory id, in memory and bounded, while tracing is on, and
# LeaseJobs hands the ones it has for the leased jobs back in its initial metadata
# (`engram-trace-links`: JSON {memory_id: traceparent}). The embed worker's span
# links to them. A store restart, or more than MAX_JOB_TRACES Remembers waiting,
# loses links, never jobs.

TRACE_LINKS_KEY = "engram-trace-links"
MAX_JOB_TRACES = 10_000
_job_traces: OrderedDict[str, str] = OrderedDict()


def note_job_trace(memory_id: str) -> None:
    """Remember the current span as the origin of `memory_id`'s jobs."""
    if _tracer is None:
        return
    carrier = dict(outgoing())
    if "traceparent" in carrier:
        _job_traces[memory_id] = carrier["traceparent"]
        while len(_job_traces) > MAX_JOB_TRACES:
            _job_traces.popitem(last=False)


def lease_metadata(memory_ids: Sequence[str]) -> list[tuple[str, str]]:
    """LeaseJobs' initial metadata: the origin traces of the leased jobs' memories."""
    if _tracer is None:
        return []
    links = {m: _job_traces.pop(m) for m in memory_ids if m in _job_traces}
    return [(TRACE_LINKS_KEY, json.dumps(links))] if links else []


def job_span(name: str, metadata: Iterable[tuple[str, Any]] | None, **attributes: Any) -> Any:
    """A worker's span for a leased batch, linked to the traces in `metadata`
    (LeaseJobs' initial metadata)."""
    if _tracer is None:
        return _NO_SPAN
    from opentelemetry.propagate import extract
    from opentelemetry.trace import Link, get_current_span

    links = []
    for key, value in metadata or ():
        if key == TRACE_LINKS_KEY:
            for traceparent in json.loads(value).values():
                origin = get_current_span(extract({"traceparent": traceparent})).get_span_context()
                if origin.is_valid:
                    links.append(Link(origin))
    return _tracer.start_as_current_span(name, links=links, attributes=attributes)
