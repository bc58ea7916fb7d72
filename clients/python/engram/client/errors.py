"""Exceptions by meaning: a caller catches `NotFound` or `VersionConflict`, not a
gRPC status code. Every one carries the server's `reason` (ErrorInfo, without the
`ERROR_REASON_` prefix), its metadata and the request id to quote in a bug report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

# googleapis-common-protos ships .pyi files but no py.typed: a user's mypy skips them
# (import-untyped) unless told, as this repository's config tells it (unused-ignore)
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped, unused-ignore]

STATUS_DETAILS_KEY = "grpc-status-details-bin"
REQUEST_ID_KEY = "x-request-id"


@dataclass(frozen=True)
class FieldViolation:
    """One offending request field, from the status' `BadRequest`."""

    field: str
    description: str


class EngramError(Exception):
    """Any failed call. `code` is the gRPC status; `reason` the ErrorInfo reason ("" if none)."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str = "",
        metadata: dict[str, str] | None = None,
        request_id: str = "",
        field_violations: Sequence[FieldViolation] = (),
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.request_id = request_id
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        parts = [f"{self.code.name}: {self.message}"]
        if self.reason:
            parts.append(f"reason={self.reason}")
        parts.extend(f"{v.field}: {v.description}" for v in self.field_violations)
        if self.request_id:
            parts.append(f"request_id={self.request_id}")
        return "; ".join(parts)


class NotFound(EngramError):
    """No such memory, document or history in the namespace."""


class VersionConflict(EngramError):
    """`if_version` did not match (ABORTED, or reason VERSION_CONFLICT): re-read and retry."""


class FailedPrecondition(EngramError):
    """The call is valid but the state forbids it (pinned, already deleted, confirm token...)."""


class PrivacyBlocked(FailedPrecondition):
    """The person's privacy level forbids the write (reason PRIVACY_BLOCKED);
    `message` is a sentence an assistant can relay to them as it stands."""


class WrongSuite(FailedPrecondition):
    """A service the client was about to call does not answer for the suite of
    the store it was given (it belongs to another suite on the same host, say,
    or does not check its suite): nothing was sent to it, the API key
    included. Raised by the client itself (reason WRONG_SUITE)."""

    def __init__(
        self, *, service: str, address: str, suite_id: str, store_address: str, why: str
    ) -> None:
        super().__init__(
            f"the {service} service at {address} is not of suite {suite_id}, the suite of "
            f"the store at {store_address} ({why}); nothing was sent to it. Give this "
            f"suite's {service} address ({service}_address, --{service}-address)",
            code=grpc.StatusCode.FAILED_PRECONDITION,
            reason="WRONG_SUITE",
        )
        self.service = service
        self.address = address
        self.suite_id = suite_id
        self.store_address = store_address


class AlreadyExists(EngramError):
    """The change would duplicate another memory's content."""


class InvalidArgument(EngramError):
    """A request field is wrong; `field_violations` names each one."""


class PermissionDenied(EngramError):
    """The API key may not do this."""


class Unauthenticated(EngramError):
    """No API key, or one the server does not know."""


class Unavailable(EngramError):
    """The service cannot be reached (after the channel's retries) or refuses writes for now."""


class ResourceExhausted(EngramError):
    """Rate limited or out of storage; `retry_after_s` comes from RetryInfo when sent."""


class DeadlineExceeded(EngramError):
    """The call's deadline passed (the client's `timeout`, or a per-call one)."""


_BY_CODE: dict[grpc.StatusCode, type[EngramError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ABORTED: VersionConflict,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def _metadata_value(metadata: Any, key: str) -> str | bytes | None:
    for item in metadata or ():
        if item[0] == key:
            value: str | bytes = item[1]
            return value
    return None


def error_from_status(
    code: grpc.StatusCode,
    details: str | None,
    trailing: Any,
    initial: Any = None,
) -> EngramError:
    """The exception for a failed call: its class by code (and reason), with the
    google.rpc.Status details the server put in the trailers."""
    reason = ""
    info_metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    retry_after: float | None = None
    raw = _metadata_value(trailing, STATUS_DETAILS_KEY)
    if isinstance(raw, bytes):
        try:
            status = status_pb2.Status.FromString(raw)
        except DecodeError:
            status = status_pb2.Status()
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason
                info_metadata = dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations.extend(
                    FieldViolation(v.field, v.description) for v in bad.field_violations
                )
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                retry_after = retry.retry_delay.ToTimedelta().total_seconds()
    request_id = _metadata_value(trailing, REQUEST_ID_KEY) or _metadata_value(
        initial, REQUEST_ID_KEY
    )
    cls = _BY_CODE.get(code, EngramError)
    if reason == "VERSION_CONFLICT":
        cls = VersionConflict
    elif reason == "PRIVACY_BLOCKED":
        cls = PrivacyBlocked
    return cls(
        details or code.name,
        code=code,
        reason=reason,
        metadata=info_metadata,
        request_id=request_id if isinstance(request_id, str) else "",
        field_violations=violations,
        retry_after_s=retry_after,
    )


def from_rpc_error(error: grpc.RpcError) -> EngramError:
    """The exception for a failed synchronous call (a grpc.Call) or an aio call error."""
    call: Any = error
    code = call.code() if hasattr(call, "code") else grpc.StatusCode.UNKNOWN
    details = call.details() if hasattr(call, "details") else str(error)
    trailing = call.trailing_metadata() if hasattr(call, "trailing_metadata") else None
    initial = call.initial_metadata() if hasattr(call, "initial_metadata") else None
    return error_from_status(code, details, trailing, initial)
