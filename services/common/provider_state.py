"""Provider health as the protos name it (engram.common.v1.ProviderState): one
mapping for every service, so the pipeline that reports a state and the
maintenance service that relays it never disagree on a name."""

from __future__ import annotations

from engram.common.v1 import provider_pb2

_TO_PROTO = {
    "available": provider_pb2.PROVIDER_STATE_AVAILABLE,
    "degraded": provider_pb2.PROVIDER_STATE_DEGRADED,
    "disabled": provider_pb2.PROVIDER_STATE_DISABLED,
}
_FROM_PROTO = {value: name for name, value in _TO_PROTO.items()}


def to_proto(state: str) -> provider_pb2.ProviderState.ValueType:
    """`available`, `degraded` or `disabled` as the enum value."""
    return _TO_PROTO[state]


def from_proto(value: int) -> str:
    """The domain name of a reported state; one this code does not know (or
    UNSPECIFIED) is `degraded`: nothing counts as working unless it says so."""
    return _FROM_PROTO.get(value, "degraded")  # type: ignore[call-overload]
