"""Errors that come back from another Engram service, read once.

A service that relays or reacts to another's failure needs the same three things:
the canonical code, the ErrorInfo reason and the BadRequest field violations
carried in the `grpc-status-details-bin` trailer (services.common.interceptors
writes them). This is the one reader of that trailer on the client side.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc
from google.rpc import error_details_pb2, status_pb2

from services.common.errors import EngramError, ErrorKind, FieldViolation

_STATUS_DETAILS_KEY = "grpc-status-details-bin"

T = TypeVar("T")


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


# ---- the store's refusals, typed ---------------------------------------------------------
#
# A service calling the store's internal RPCs (the pipeline's workers, the
# maintenance service) wraps each call in `refusing`: when the store answered
# and refused, the call raises one of these (built from the ErrorInfo reason,
# never from the message), so that callers branch on a type, not on a string.
# Anything else (the store could not be reached, an INTERNAL error, a status
# gRPC itself produced) stays the raw grpc.aio.AioRpcError. What a refusal
# means for a leased job is the pipeline's one rule
# (services/pipeline/job_outcomes.py).


class StoreRefusal(EngramError):
    """The store answered and refused the call; nothing of it was written. Its
    kind and reason are the store's own, so relaying it changes neither."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message or "the store refused the call", reason=reason)


class StoreFrozen(StoreRefusal):
    """`memory.pipelineV2.mutationsFrozen` is on: the write was refused."""

    kind = ErrorKind.UNAVAILABLE
    reason = "MUTATIONS_FROZEN"


class StoreFull(StoreRefusal):
    """The store's disk is full; the write can succeed once space is freed."""

    kind = ErrorKind.RESOURCE_EXHAUSTED
    reason = "STORAGE_FULL"


class StoreDatabaseDown(StoreRefusal):
    """The store's PostgreSQL database cannot be reached; the store reconnects by itself."""

    kind = ErrorKind.UNAVAILABLE
    reason = "STORAGE_UNAVAILABLE"


class StoreNotFound(StoreRefusal):
    """What the call is about (a memory, a document, a session) is gone."""

    kind = ErrorKind.NOT_FOUND
    reason = "NOT_FOUND"


class StoreRejected(StoreRefusal):
    """The store refused what was sent (INVALID_ARGUMENT, or FAILED_PRECONDITION
    such as EMBEDDING_MODEL_MISMATCH): sending it again as it is will not help.
    Carries the store's own code and reason."""

    kind = ErrorKind.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"


_REFUSALS_BY_REASON: dict[str, type[StoreRefusal]] = {
    cls.reason: cls for cls in (StoreFrozen, StoreFull, StoreDatabaseDown, StoreNotFound)
}
_REJECTING_CODES = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}


def refusal_of(exc: grpc.aio.AioRpcError) -> StoreRefusal | None:
    """The typed refusal a failed store call carries, or None when the store did
    not refuse (it could not be reached, or failed in a way no reason names)."""
    reason, _ = _details(exc)
    if not reason:
        return None
    refusal_type = _REFUSALS_BY_REASON.get(reason)
    if refusal_type is not None:
        return refusal_type(exc.details() or "")
    if exc.code() in _REJECTING_CODES:
        rejected = StoreRejected(exc.details() or "", reason=reason)
        rejected.kind = ErrorKind[exc.code().name]
        return rejected
    return None


async def refusing(call: Awaitable[T]) -> T:
    """`await call`, raising the store's refusal as its StoreRefusal type (see
    `refusal_of`); any other failure propagates as the raw AioRpcError."""
    try:
        return await call
    except grpc.aio.AioRpcError as exc:
        refusal = refusal_of(exc)
        if refusal is None:
            raise
        raise refusal from exc
