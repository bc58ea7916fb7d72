"""The one place where domain errors become gRPC statuses.

Every RPC runs under a request id (taken from `x-request-id` metadata or made up)
that appears in every log line and goes back to the caller in trailing metadata.
EngramError becomes its canonical code with google.rpc.Status details (ErrorInfo
with the stable reason; BadRequest with field violations). Anything else becomes
INTERNAL with no stack trace sent; the trace goes to the log.

Request bytes that do not parse as the method's request message (invalid UTF-8
in a string, a truncated message, groups nested past the parser's limit) would
fail in grpc's own deserialiser, before any handler runs, as INTERNAL. The
wrapped deserialiser hands the failure to the handler instead, which answers
INVALID_ARGUMENT with reason MALFORMED_REQUEST, like every other bad request.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from services.common.errors import EngramError, ErrorKind, MalformedRequest
from services.common.logs import request_id_var
from services.common.metrics import RPC_REQUESTS, RPC_SECONDS

log = logging.getLogger("engram.rpc")

ERROR_DOMAIN = "engram.dev"
REQUEST_ID_KEY = "x-request-id"

_CODES: dict[ErrorKind, tuple[grpc.StatusCode, int]] = {
    ErrorKind.INVALID_ARGUMENT: (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
    ErrorKind.NOT_FOUND: (grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND),
    ErrorKind.ALREADY_EXISTS: (grpc.StatusCode.ALREADY_EXISTS, code_pb2.ALREADY_EXISTS),
    ErrorKind.ABORTED: (grpc.StatusCode.ABORTED, code_pb2.ABORTED),
    ErrorKind.FAILED_PRECONDITION: (
        grpc.StatusCode.FAILED_PRECONDITION,
        code_pb2.FAILED_PRECONDITION,
    ),
    ErrorKind.UNAVAILABLE: (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
    ErrorKind.RESOURCE_EXHAUSTED: (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        code_pb2.RESOURCE_EXHAUSTED,
    ),
    ErrorKind.INTERNAL: (grpc.StatusCode.INTERNAL, code_pb2.INTERNAL),
}


def status_for(error: EngramError) -> grpc.Status:
    """The rich status for a domain error."""
    _, code = _CODES[error.kind]
    details: list[any_pb2.Any] = []
    info = any_pb2.Any()
    info.Pack(
        error_details_pb2.ErrorInfo(
            reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
        )
    )
    details.append(info)
    if error.violations:
        bad_request = any_pb2.Any()
        bad_request.Pack(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=v.field, description=v.description
                    )
                    for v in error.violations
                ]
            )
        )
        details.append(bad_request)
    return rpc_status.to_status(
        status_pb2.Status(code=code, message=error.message, details=details)
    )


class RequestInterceptor:
    """Request id, access log and error mapping around every handler.

    Applied when handlers are registered, not per call: a grpc.aio
    ServerInterceptor runs its own coroutine (and the lookup continuation) on
    every RPC, which measured 10-15% of a small unary call's server CPU. Each
    method handler is wrapped once; the per-call state (the request id) comes
    from the call's own context. Use `server_with(server)` in place of the server
    when registering services."""

    def server_with(self, server: grpc.aio.Server) -> Any:
        return _WrappingServer(server)


class _WrappingServer:
    """Registers wrapped handlers on the real server; everything else passes through."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server: Any = server  # add_registered_method_handlers is not in the stubs

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(tuple(_WrappedGenericHandler(h) for h in handlers))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self._server.add_registered_method_handlers(
            service, {name: _wrap(f"/{service}/{name}", h) for name, h in handlers.items()}
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class _WrappedGenericHandler(grpc.GenericRpcHandler):
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._wrapped: dict[str, Any] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method: str = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            wrapped = self._wrapped[method] = _wrap(method, handler)
        return wrapped


# Made-up request ids: a random per-process prefix and a counter (unique enough
# to correlate log lines; cheaper than a uuid4 per call).
_ID_PREFIX = os.urandom(6).hex()
_id_counter = itertools.count(1)


# The deadline (time.monotonic()) of the RPC being served, if its caller set one:
# calls made on its behalf to other services end by then too (services/common/channels.py).
deadline_var: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "deadline", default=None
)


def _deadline(context: Any) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_id_counter):08x}"


def _request_id(context: Any) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and value:
            return str(value)
    return new_request_id()


class _Undecodable:
    """Stands in for a request message whose bytes did not parse."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _tolerant(deserializer: Any) -> Any:
    """The method's deserialiser, returning _Undecodable instead of raising."""
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or the parser's recursion limit
            return _Undecodable(exc)

    return deserialize


def _decoded(request: Any) -> Any:
    if isinstance(request, _Undecodable):
        raise MalformedRequest(str(request.error)) from request.error
    return request


async def _decoded_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        yield _decoded(request)


def _wrap(method: str, handler: Any) -> Any:
    if handler.unary_unary or handler.stream_unary:
        inner: Any = handler.unary_unary or handler.stream_unary
        unary_in = bool(handler.unary_unary)

        async def call(request: Any, context: Any) -> Any:
            request_id = _request_id(context)
            token = request_id_var.set(request_id)
            deadline_token = deadline_var.set(_deadline(context))
            started = time.perf_counter()
            try:
                request = _decoded(request) if unary_in else _decoded_stream(request)
                response = await inner(request, context)
                context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
                _log_done(method, "OK", started)
                return response
            except Exception as exc:
                await _abort(context, exc, method, started, request_id)
            finally:
                request_id_var.reset(token)
                deadline_var.reset(deadline_token)

        factory = (
            grpc.unary_unary_rpc_method_handler
            if handler.unary_unary
            else grpc.stream_unary_rpc_method_handler
        )
        return factory(
            call,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    inner_stream: Any = handler.unary_stream or handler.stream_stream
    unary_in_stream = bool(handler.unary_stream)

    async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
        request_id = _request_id(context)
        token = request_id_var.set(request_id)
        deadline_token = deadline_var.set(_deadline(context))
        started = time.perf_counter()
        try:
            request = _decoded(request) if unary_in_stream else _decoded_stream(request)
            produced = inner_stream(request, context)
            if hasattr(produced, "__aiter__"):
                async for item in produced:
                    yield item
            else:  # a coroutine that writes with context.write() (e.g. Health.Watch)
                await produced
            context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
            _log_done(method, "OK", started)
        except Exception as exc:
            await _abort(context, exc, method, started, request_id)
        finally:
            request_id_var.reset(token)
            deadline_var.reset(deadline_token)

    stream_factory = (
        grpc.unary_stream_rpc_method_handler
        if handler.unary_stream
        else grpc.stream_stream_rpc_method_handler
    )
    return stream_factory(
        stream,
        request_deserializer=_tolerant(handler.request_deserializer),
        response_serializer=handler.response_serializer,
    )


def _log_done(method: str, code: str, started: float) -> None:
    """The one place every finished RPC is counted and timed (services/common/metrics.py)."""
    elapsed = time.perf_counter() - started
    RPC_REQUESTS.labels(method, code).inc()
    RPC_SECONDS.labels(method, code).observe(elapsed)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "rpc done",
            extra={
                "method": method,
                "code": code,
                "ms": round(elapsed * 1e3, 3),
            },
        )


async def _abort(
    context: grpc.aio.ServicerContext, exc: Exception, method: str, started: float, request_id: str
) -> None:
    if isinstance(exc, grpc.aio.AbortError):  # the handler aborted with its own status
        code = context.code()
        _log_done(method, code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN", started)
        raise exc
    if isinstance(exc, EngramError):
        status = status_for(exc)
        log.info(
            "rpc failed",
            extra={
                "method": method,
                "code": status.code.name,
                "reason": exc.reason,
                "error": exc.message,
            },
        )
    else:
        log.exception("rpc crashed", extra={"method": method})
        status = status_for(EngramError(f"internal error (request id {request_id})"))
    _log_done(method, status.code.name, started)
    await context.abort(
        status.code,
        status.details,
        (*status.trailing_metadata, (REQUEST_ID_KEY, request_id)),
    )
