"""Errors that come back from another Engram service, read once.

A service that relays or reacts to another's failure needs the same three things:
the canonical code, the ErrorInfo reason and the BadRequest field violations
carried in the `grpc-status-details-bin` trailer (services.common.interceptors
writes them). This is the one reader of that trailer on the client side.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from services.common.errors import EngramError, ErrorKind, FieldViolation

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


def _details(exc: grpc.aio.AioRpcError) -> tuple[str, list[FieldViolation]]:
    reason, violations = "", []
    trailing: Any = exc.trailing_metadata()  # aio Metadata: (key, value) pairs
    for key, value in trailing or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        for detail in status_pb2.Status.FromString(value).details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = str(info.reason)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations = [FieldViolation(v.field, v.description) for v in bad.field_violations]
    return reason, violations


def error_reason(exc: grpc.aio.AioRpcError) -> str:
    """The ErrorInfo reason of a failed call, or "" when it carries none."""
    return _details(exc)[0]


# The reason of a relayed error that carries none (a transport failure, or a
# status gRPC itself produced): always an engram.common.v1.ErrorReason value.
REASONS_WITHOUT_DETAILS = {
    ErrorKind.UNAVAILABLE: "STORE_UNAVAILABLE",
    ErrorKind.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ErrorKind.NOT_FOUND: "NOT_FOUND",
}


def relayed_error(exc: grpc.aio.AioRpcError) -> EngramError:
    """The remote error as a domain error with the same code, reason and field
    violations; a store that cannot be reached is STORE_UNAVAILABLE, and any
    other error without a reason is INTERNAL (keeping its code)."""
    kind = ErrorKind.__members__.get(exc.code().name, ErrorKind.INTERNAL)
    reason, violations = _details(exc)
    if not reason:
        reason = REASONS_WITHOUT_DETAILS.get(kind, "INTERNAL")
    error = EngramError(exc.details() or "store error", reason=reason, violations=violations)
    error.kind = kind
    return error
