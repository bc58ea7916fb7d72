"""The one way a service calls another: `channel(config, address)`.

Every call on such a channel
- has a deadline: the caller's own timeout if it set one, else the
  `clients.deadlines.*_ms` of the call's kind (`KINDS` below), so a stalled
  peer never holds a worker for longer than that; and never later than the
  deadline of the RPC being served, when it is made on behalf of one;
- carries the caller's `x-request-id` (the RPC being served, from the server
  interceptor's context variable), or a new one for background work, so one
  request's log lines can be followed across services;
- carries the current span's W3C trace context (`traceparent`) while tracing is
  on (services/common/tracing.py);
- carries the service's credential, `authorization: Bearer <auth.service_key>`,
  when one is set;
- is retried on UNAVAILABLE by gRPC itself (the channel's service config,
  `clients.retry.*`), within the deadline; never by a hand-written loop.

The channel uses TLS when `clients.tls.ca_file` is set, and sends and receives
messages up to `server.max_message_bytes`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from engram.client import channel as client_channel
from services.common import tracing
from services.common.auth import AUTHORIZATION_KEY
from services.common.config import ClientDeadlinesSettings, ClientRetrySettings, Config
from services.common.interceptors import REQUEST_ID_KEY, deadline_var, new_request_id
from services.common.logs import request_id_var
from services.common.tls import channel_credentials

MAX_RECONNECT_BACKOFF_MS = 5000

_JOBS = "/engram.store.internal.v1.JobQueueService/"
# The kind of each call (its `clients.deadlines.<kind>_ms`), by full method name
# or by service prefix; anything else is `default`.
KINDS: dict[str, str] = {
    _JOBS + "LeaseJobs": "lease",
    _JOBS + "RenewLeases": "lease",
    _JOBS + "ReleaseJobs": "lease",
    _JOBS + "FailJobs": "lease",
    _JOBS + "ReleaseStaleLeases": "lease",
    _JOBS + "ReleasePriorInstanceLeases": "lease",
    _JOBS + "GetQueueStats": "lease",  # pipeline GetStatus answers even when the store does not
    _JOBS + "CompleteEmbedJobs": "write",
    _JOBS + "CompleteExtractJob": "write",
    "/engram.store.internal.v1.DocumentStoreService/": "write",
    "/engram.store.internal.v1.AccessService/": "write",
    "/engram.store.internal.v1.StoreAdminService/": "admin",
    "/engram.search.v1.SearchService/Recall": "recall",
}


def call_kind(method: str) -> str:
    """`lease`, `write`, `admin`, `recall` or `default` for a full method name."""
    kind = KINDS.get(method)
    if kind is None:
        kind = KINDS.get(method[: method.rfind("/") + 1], "default")
    return kind


def deadline_s(deadlines: ClientDeadlinesSettings, method: str) -> float:
    ms: int = getattr(deadlines, f"{call_kind(method)}_ms")
    return ms / 1000


def service_config(retry: ClientRetrySettings) -> str:
    """Every method retries UNAVAILABLE with exponential backoff (gRPC's retry policy),
    built by the client package's one builder from the typed settings."""
    return client_channel.service_config(
        client_channel.RetryPolicy(
            max_attempts=retry.max_attempts,
            initial_backoff_s=retry.initial_backoff_ms / 1000,
            max_backoff_s=retry.max_backoff_ms / 1000,
        )
    )


def channel_options(config: Config) -> list[tuple[str, Any]]:
    limit = config.server.max_message_bytes
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        # gRPC's reconnect backoff grows to 120 s by default: a store back after an
        # outage would wait that long to be noticed
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ]
    if config.clients.retry.max_attempts > 1:  # a retry policy needs at least 2 attempts
        options.append(("grpc.service_config", service_config(config.clients.retry)))
    else:
        options.append(("grpc.enable_retries", 0))
    return options


class _CallPolicy(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamUnaryClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
):
    """Deadline, request id and credential on every call of the channel."""

    def __init__(self, deadlines: ClientDeadlinesSettings, service_key: str) -> None:
        self._deadlines = deadlines
        self._bearer = f"Bearer {service_key}" if service_key else ""

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        if REQUEST_ID_KEY not in metadata:
            current = request_id_var.get()
            metadata.add(REQUEST_ID_KEY, new_request_id() if current == "-" else current)
        if self._bearer and AUTHORIZATION_KEY not in metadata:
            metadata.add(AUTHORIZATION_KEY, self._bearer)
        for key, value in tracing.outgoing():  # W3C trace context, when tracing is on
            metadata.add(key, value)
        timeout = details.timeout
        if timeout is None:
            timeout = deadline_s(self._deadlines, method)
        inbound = deadline_var.get()
        if inbound is not None:  # never outlive the RPC this call serves
            timeout = max(0.0, min(timeout, inbound - time.monotonic()))
        return grpc.aio.ClientCallDetails(
            details.method, timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._details(details), request)

    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._details(details), request)

    async def intercept_stream_unary(
        self,
        continuation: Callable[..., Any],
        details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await continuation(self._details(details), request_iterator)

    async def intercept_stream_stream(
        self,
        continuation: Callable[..., Any],
        details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await continuation(self._details(details), request_iterator)


def channel(config: Config, address: str) -> grpc.aio.Channel:
    """A channel to another service at `address` (see the module docstring)."""
    # Any: grpc's stubs type `interceptors` as a placeholder no real class matches
    interceptors: list[Any] = [_CallPolicy(config.clients.deadlines, config.auth.service_key)]
    options = channel_options(config)
    credentials = channel_credentials(config.clients.tls)
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)
