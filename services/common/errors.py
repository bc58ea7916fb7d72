"""Domain errors. Domain code raises these; one interceptor maps them to gRPC.

Nothing here imports grpc: the `kind` names a canonical status code and the
interceptor (services.common.interceptors) is the only place that translates it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

# Errors travel in response metadata (grpc-message and grpc-status-details-bin),
# which clients cap (8 KiB by default): echoing a client's megabyte back would
# turn a precise error into RESOURCE_EXHAUSTED. So any input shown in an error is
# cut to MAX_ECHO_CHARS (use `echo`), and every message, description and metadata
# value is cut to MAX_MESSAGE_CHARS here, whatever the caller built.
MAX_ECHO_CHARS = 64
MAX_MESSAGE_CHARS = 1024
# One INVALID_ARGUMENT names every bad field, but the violations it carries are
# capped at this many characters in all (fields and descriptions), so that a
# request with hundreds of bad fields still gets its error through; the message
# counts the ones left out.
MAX_VIOLATION_CHARS = 2048

T = TypeVar("T")
P = ParamSpec("P")


def echo(value: str, limit: int = MAX_ECHO_CHARS) -> str:
    """A client's value, quoted and cut short, to show in an error message."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ErrorKind(enum.Enum):
    """Canonical status codes the domain may ask for."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    ABORTED = "ABORTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
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
    # seconds the client should wait before retrying (sent as google.rpc.RetryInfo)
    retry_delay_s: float | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        message = _clip(message)
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata = {key: _clip(value) for key, value in (metadata or {}).items()}
        self.violations = [FieldViolation(_clip(v.field), _clip(v.description)) for v in violations]


class InvalidArgument(EngramError):
    """One or more bad request fields (see `Violations` to name them all)."""

    kind = ErrorKind.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"

    def __init__(
        self, field: str, description: str, *more: FieldViolation, reason: str | None = None
    ) -> None:
        every = [FieldViolation(field, description), *more]
        kept: list[FieldViolation] = []
        budget = MAX_VIOLATION_CHARS
        for violation in every:
            budget -= len(violation.field) + len(violation.description)
            if kept and budget < 0:
                break
            kept.append(violation)
        message = "; ".join(f"{v.field}: {v.description}" for v in kept)
        if len(kept) < len(every):
            left_out = f" (and {len(every) - len(kept)} more)"
            message = _clip(message, MAX_MESSAGE_CHARS - len(left_out)) + left_out
        super().__init__(message, reason=reason, violations=kept)
        # every violation, those the message has no room for too (Violations.check_all)
        self.every = every
        self.field = self.violations[0].field
        self.description = self.violations[0].description


class Violations:
    """Collects the bad fields of one request, so that a single INVALID_ARGUMENT
    names all of them rather than only the first one checked."""

    def __init__(self) -> None:
        self._found: list[FieldViolation] = []
        # the reasons of the errors collected: one INVALID_ARGUMENT keeps a more
        # specific reason (PII_DETECTED) only when every violation shares it
        self._reasons: set[str] = set()

    def add(self, field: str, description: str) -> None:
        self._found.append(FieldViolation(field, description))
        self._reasons.add(InvalidArgument.reason)

    def _collect(self, error: InvalidArgument) -> None:
        self._found.extend(error.violations)
        self._reasons.add(error.reason)

    def check(self, fallback: T, check: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`check(*args, **kwargs)`; if it raises InvalidArgument, its fields are
        recorded and `fallback` stands in (never used: `raise_if_any` comes first)."""
        try:
            return check(*args, **kwargs)
        except InvalidArgument as error:
            self._collect(error)
            return fallback

    def check_all(self, fallback: T, check: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`check` for a check that collects its own violations (rules.draft_memory):
        every one it found is recorded, not only those its own message had room
        for, so the error names what one shared collector would have named."""
        try:
            return check(*args, **kwargs)
        except InvalidArgument as error:
            self._found.extend(error.every)
            self._reasons.add(error.reason)
            return fallback

    @contextmanager
    def collecting(self) -> Iterator[None]:
        """Records an InvalidArgument raised in the block instead of raising it."""
        try:
            yield
        except InvalidArgument as error:
            self._collect(error)

    def names(self, prefix: str) -> bool:
        """Whether a recorded violation's field is `prefix` or inside it."""
        return any(
            v.field == prefix or v.field.startswith((f"{prefix}.", f"{prefix}["))
            for v in self._found
        )

    def raise_if_any(self) -> None:
        """One InvalidArgument with every violation recorded, if there is any."""
        if self._found:
            first, *rest = self._found
            [reason] = self._reasons if len(self._reasons) == 1 else [InvalidArgument.reason]
            raise InvalidArgument(first.field, first.description, *rest, reason=reason)


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


class PipelineDisabled(FailedPrecondition):
    """Work that only Pipeline V2 (and its LLM) does was asked for while it is
    off: refused, so nothing is queued that no worker will take."""

    reason = "PIPELINE_DISABLED"

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(f"{what}: {hint}", metadata={"setting": "memory.pipelineV2.enabled"})


class LlmNotConfigured(FailedPrecondition):
    """Work only an LLM does was asked for while none is configured: refused, so
    nothing is queued that no worker could finish."""

    reason = "LLM_NOT_CONFIGURED"

    def __init__(self, what: str, hint: str) -> None:
        super().__init__(f"{what}: {hint}", metadata={"setting": "providers.llm"})


class AlreadyExists(EngramError):
    kind = ErrorKind.ALREADY_EXISTS


class MutationsFrozen(EngramError):
    kind = ErrorKind.UNAVAILABLE
    reason = "MUTATIONS_FROZEN"

    def __init__(self) -> None:
        super().__init__("mutations are frozen (memory.pipelineV2.mutationsFrozen)")


class MalformedRequest(EngramError):
    """The request's bytes do not parse as the method's request message."""

    kind = ErrorKind.INVALID_ARGUMENT
    reason = "MALFORMED_REQUEST"

    def __init__(self, detail: str) -> None:
        super().__init__(f"the request message does not parse: {detail}")


class Unauthenticated(EngramError):
    """No API key, or one that is unknown, revoked or malformed. The message never
    says which, nor anything about the namespace or id asked for."""

    kind = ErrorKind.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class PermissionDenied(EngramError):
    """A valid key whose role or namespaces do not cover the call."""

    kind = ErrorKind.PERMISSION_DENIED
    reason = "PERMISSION_DENIED"


class RateLimited(EngramError):
    """The key's token bucket is empty; RetryInfo says when the next call fits."""

    kind = ErrorKind.RESOURCE_EXHAUSTED
    reason = "RATE_LIMITED"

    def __init__(self, retry_delay_s: float) -> None:
        super().__init__(f"rate limit exceeded for this API key; retry in {retry_delay_s:.3f} s")
        self.retry_delay_s = retry_delay_s


# ---- the database ---------------------------------------------------------------------


class StorageUnavailable(EngramError):
    """The database cannot be reached now (PostgreSQL: the connection was lost
    or cannot be opened), so the call failed without effect and may be retried.
    A SQLite file is never unreachable this way."""

    kind = ErrorKind.UNAVAILABLE
    reason = "STORAGE_UNAVAILABLE"

    def __init__(self, message: str = "the database cannot be reached; retry") -> None:
        super().__init__(message)


class StorageTimedOut(EngramError):
    """A read the database cancelled (PostgreSQL: storage.postgres.statement_timeout_ms
    ran out, or a cancel from outside), so the call read nothing and may be retried
    or narrowed. SQLite reads have no such limit."""

    kind = ErrorKind.DEADLINE_EXCEEDED
    reason = "STATEMENT_TIMEOUT"

    def __init__(
        self,
        message: str = "the database cancelled this read: it ran past "
        "storage.postgres.statement_timeout_ms",
    ) -> None:
        super().__init__(message)
