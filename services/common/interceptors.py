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
A string field holding U+0000 (which PostgreSQL's text cannot store) is refused
there too, as INVALID_ARGUMENT naming every such field, on every backend; so is
an enum field holding a number its enum does not define (proto3 enums are open:
999 would otherwise reach the handler and be read as some default).

With a Guard (auth on, services/common/auth.py) every call is admitted from its
metadata before the handler runs, and every request message is checked against
the key's namespaces before the handler sees it; the caller is `principal_var`
while the handler runs (the actor of its writes).
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
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from services.common import tracing
from services.common.auth import Guard, MethodGuard, Principal, principal_var
from services.common.errors import EngramError, ErrorKind, InvalidArgument, MalformedRequest
from services.common.logs import request_id_var
from services.common.metrics import rpc_done
from services.common.pii import scrubbed
from services.common.validation import reject_nul, reject_undefined_enums

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
    ErrorKind.DEADLINE_EXCEEDED: (grpc.StatusCode.DEADLINE_EXCEEDED, code_pb2.DEADLINE_EXCEEDED),
    ErrorKind.RESOURCE_EXHAUSTED: (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        code_pb2.RESOURCE_EXHAUSTED,
    ),
    ErrorKind.UNAUTHENTICATED: (grpc.StatusCode.UNAUTHENTICATED, code_pb2.UNAUTHENTICATED),
    ErrorKind.PERMISSION_DENIED: (grpc.StatusCode.PERMISSION_DENIED, code_pb2.PERMISSION_DENIED),
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
    if error.retry_delay_s is not None:
        retry = any_pb2.Any()
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(max(1, round(error.retry_delay_s * 1e9)))
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(retry)
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

    def __init__(self, guard: Guard | None = None) -> None:
        self._guard = guard

    def server_with(self, server: grpc.aio.Server) -> Any:
        return _WrappingServer(server, self._guard)


class _WrappingServer:
    """Registers wrapped handlers on the real server; everything else passes through."""

    def __init__(self, server: grpc.aio.Server, guard: Guard | None) -> None:
        self._server: Any = server  # add_registered_method_handlers is not in the stubs
        self._guard = guard

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(
            tuple(_WrappedGenericHandler(h, self._guard) for h in handlers)
        )

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self._server.add_registered_method_handlers(
            service,
            {name: _wrap(f"/{service}/{name}", h, self._guard) for name, h in handlers.items()},
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class _WrappedGenericHandler(grpc.GenericRpcHandler):
    def __init__(self, inner: Any, guard: Guard | None) -> None:
        self._inner = inner
        self._guard = guard
        self._wrapped: dict[str, Any] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method: str = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            wrapped = self._wrapped[method] = _wrap(method, handler, self._guard)
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
            message = deserializer(data)
        except Exception as exc:  # DecodeError, or the parser's recursion limit
            return _Undecodable(exc)
        try:
            if b"\x00" in data:  # U+0000 in a string is a 0 byte; most requests have none
                reject_nul(message)
            reject_undefined_enums(message)
        except InvalidArgument as exc:
            return _Undecodable(exc)
        return message

    return deserialize


def _decoded(request: Any) -> Any:
    if isinstance(request, _Undecodable):
        if isinstance(request.error, InvalidArgument):
            raise request.error
        raise MalformedRequest(str(request.error)) from request.error
    return request


async def _decoded_stream(
    requests: AsyncIterator[Any], admitted: _Admitted | None
) -> AsyncIterator[Any]:
    async for request in requests:
        request = _decoded(request)
        if admitted is not None:
            admitted.check(request)
        yield request


class _Admitted:
    """A call the guard let in: its caller, and the check for each request message."""

    __slots__ = ("guard", "principal")

    def __init__(self, guard: MethodGuard, principal: Principal) -> None:
        self.guard = guard
        self.principal = principal

    def check(self, request: Any) -> None:
        self.guard.check(self.principal, request)


def _admit(guard: MethodGuard | None, context: Any) -> _Admitted | None:
    if guard is None:
        return None
    admitted = _Admitted(guard, guard.admit(context.invocation_metadata()))
    # each RPC runs in its own task, so the caller is seen by this call only
    principal_var.set(admitted.principal)
    return admitted


def _request(request: Any, unary_in: bool, admitted: _Admitted | None) -> Any:
    """The decoded request (or stream of them), each checked by the guard."""
    if not unary_in:
        return _decoded_stream(request, admitted)
    request = _decoded(request)
    if admitted is not None:
        admitted.check(request)
    return request


def _wrap(method: str, handler: Any, guard: Guard | None = None) -> Any:
    method_guard = guard.method(method) if guard is not None else None
    if handler.unary_unary or handler.stream_unary:
        inner: Any = handler.unary_unary or handler.stream_unary
        unary_in = bool(handler.unary_unary)

        async def call(request: Any, context: Any) -> Any:
            request_id = _request_id(context)
            token = request_id_var.set(request_id)
            deadline_token = deadline_var.set(_deadline(context))
            started = time.perf_counter()
            try:
                with tracing.server_span(method, context.invocation_metadata()):
                    try:
                        admitted = _admit(method_guard, context)
                        request = _request(request, unary_in, admitted)
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
            with tracing.server_span(method, context.invocation_metadata()):
                try:
                    admitted = _admit(method_guard, context)
                    request = _request(request, unary_in_stream, admitted)
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
    rpc_done(method, code, elapsed)
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
                # a message may echo what the caller sent (a type, a name): redacted
                "error": scrubbed(exc.message),
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
