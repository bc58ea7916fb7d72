"""Domain errors. Domain code raises these; one interceptor maps them to gRPC.

Nothing here imports grpc: the `kind` names a canonical status code and the
interceptor (services.common.interceptors) is the only place that translates it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class ErrorKind(enum.Enum):
    """Canonical status codes the domain may ask for."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    ABORTED = "ABORTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNAVAILABLE = "UNAVAILABLE"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    INTERNAL = "INTERNAL"


@dataclass(frozen=True)
class FieldViolation:
    """One invalid request field, named by its path (e.g. `patches[3].reason`)."""

    field: str
    description: str


class EngramError(Exception):
    """An error with a stable reason that clients can branch on."""

    kind: ErrorKind = ErrorKind.INTERNAL
    reason: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata = dict(metadata or {})
        self.violations = list(violations)


class InvalidArgument(EngramError):
    kind = ErrorKind.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}", violations=[FieldViolation(field, description)])
        self.field = field
        self.description = description


class NotFound(EngramError):
    kind = ErrorKind.NOT_FOUND
    reason = "NOT_FOUND"


class VersionConflict(EngramError):
    kind = ErrorKind.ABORTED
    reason = "VERSION_CONFLICT"

    def __init__(self, expected: int, current: int) -> None:
        super().__init__(
            f"version conflict: if_version is {expected} but the memory is at {current}",
            metadata={"current_version": str(current), "if_version": str(expected)},
        )
        self.current = current


class FailedPrecondition(EngramError):
    kind = ErrorKind.FAILED_PRECONDITION


class AlreadyExists(EngramError):
    kind = ErrorKind.ALREADY_EXISTS


class MutationsFrozen(EngramError):
    kind = ErrorKind.UNAVAILABLE
    reason = "MUTATIONS_FROZEN"

    def __init__(self) -> None:
        super().__init__("mutations are frozen (memory.pipelineV2.mutationsFrozen)")
