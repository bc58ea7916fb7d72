"""Provider health as the protos name it (engram.common.v1.ProviderState): one
record (ProviderHealth), one way to change it (`mark`, which logs a change of
state) and one mapping for every service, so the pipeline that reports a state
and the maintenance service that relays it never disagree on a name."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engram.common.v1 import provider_pb2
from services.common import clock

log = logging.getLogger("engram.pipeline.providers")

_TO_PROTO = {
    "available": provider_pb2.PROVIDER_STATE_AVAILABLE,
    "degraded": provider_pb2.PROVIDER_STATE_DEGRADED,
    "disabled": provider_pb2.PROVIDER_STATE_DISABLED,
    "rate_limited": provider_pb2.PROVIDER_STATE_RATE_LIMITED,
}
_FROM_PROTO = {value: name for name, value in _TO_PROTO.items()}


@dataclass
class ProviderHealth:
    role: str
    kind: str
    model: str
    # available | degraded | rate_limited | disabled (not configured); nothing is
    # available before a probe or a call says so
    state: str = "degraded"
    last_error: str = "not checked yet"
    checked_at: str | None = None
    # place in the LLM fallback chain (0: providers.llm)
    position: int = 0


def mark(health: ProviderHealth, state: str, error: str) -> None:
    """Record a probe's or a call's outcome; a change of state is logged (the
    error text comes from the provider's answer, never from its key)."""
    if state != health.state:
        log.log(
            logging.WARNING if state in ("degraded", "rate_limited") else logging.INFO,
            f"{health.role} provider {state}",
            extra={
                "kind": health.kind,
                "model": health.model,
                "position": health.position,
                "error": error,
            },
        )
    health.state = state
    health.last_error = error
    health.checked_at = clock.now_text()


def to_proto(state: str) -> provider_pb2.ProviderState.ValueType:
    """`available`, `degraded`, `rate_limited` or `disabled` as the enum value."""
    return _TO_PROTO[state]


def from_proto(value: int) -> str:
    """The domain name of a reported state; one this code does not know (or
    UNSPECIFIED) is `degraded`: nothing counts as working unless it says so."""
    return _FROM_PROTO.get(value, "degraded")  # type: ignore[call-overload]
