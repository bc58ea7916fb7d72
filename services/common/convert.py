"""Proto <-> domain conversions shared by every servicer."""

from __future__ import annotations

import dataclasses

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from engram.common.v1 import memory_pb2
from services.common import clock
from services.common.errors import InvalidArgument, Violations
from services.common.memory_filter import MemoryFilterSpec
from services.common.memory_record import MemoryRecord
from services.common.validation import check_timestamp

# memories.temporal_class / Fact.temporal_class <-> engram.common.v1.TemporalClass
TEMPORAL_CLASSES = {
    "permanent": memory_pb2.TEMPORAL_CLASS_PERMANENT,
    "long_term": memory_pb2.TEMPORAL_CLASS_LONG_TERM,
    "short_term": memory_pb2.TEMPORAL_CLASS_SHORT_TERM,
}
_TEMPORAL_NAMES = {value: name for name, value in TEMPORAL_CLASSES.items()}


def temporal_to_proto(name: str) -> memory_pb2.TemporalClass.ValueType:
    return TEMPORAL_CLASSES.get(name, memory_pb2.TEMPORAL_CLASS_UNSPECIFIED)


def temporal_from_proto(value: int) -> str:
    """ "" for UNSPECIFIED and for values this version does not know."""
    return _TEMPORAL_NAMES.get(value, "")  # type: ignore[call-overload]


def text_from_timestamp(ts: timestamp_pb2.Timestamp, present: bool, field: str) -> str | None:
    """Stored text for a set Timestamp, exact to the nanosecond; None when the
    field is unset. Out of Timestamp's range is INVALID_ARGUMENT on `field`."""
    if not present:
        return None
    check_timestamp(ts.seconds, ts.nanos, field)
    return clock.text_from_epoch(ts.seconds, ts.nanos)


def time_field(bad: Violations, message: Message, name: str, field: str) -> str | None:
    """The one timestamp check of every parse step: `message.<name>` as stored
    text, None when unset; out of range is recorded in `bad` under `field`."""
    value: str | None = bad.check(
        None, text_from_timestamp, getattr(message, name), message.HasField(name), field
    )
    return value


def nanos_from_duration(duration: duration_pb2.Duration, present: bool, field: str) -> int | None:
    """A set Duration as whole nanoseconds; None when unset. A Duration that
    breaks its own rules (nanos outside +-999999999, signs that differ) is
    INVALID_ARGUMENT on `field`."""
    if not present:
        return None
    if not -999_999_999 <= duration.nanos <= 999_999_999 or (duration.seconds * duration.nanos < 0):
        raise InvalidArgument(field, "not a valid Duration (nanos and seconds must agree in sign)")
    return duration.seconds * 1_000_000_000 + duration.nanos


def timestamp_from_text(text: str | None) -> timestamp_pb2.Timestamp | None:
    """Stored text (fixed width, see services.common.clock) to a Timestamp."""
    if text is None:
        return None
    seconds, nanos = clock.epoch_from_text(text)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def filter_from_proto(
    message: memory_pb2.MemoryFilter, field: str = "filter", bad: Violations | None = None
) -> MemoryFilterSpec:
    """The filter's fields; with `bad`, a timestamp out of range is recorded
    there (and the bound left open) for the caller to raise with the rest."""
    found = bad if bad is not None else Violations()
    spec = MemoryFilterSpec(
        types=tuple(message.types),
        tags=tuple(message.tags),
        who=message.who,
        pinned=message.pinned if message.HasField("pinned") else None,
        source_type=message.source_type,
        since=time_field(found, message, "since", f"{field}.since"),
        until=time_field(found, message, "until", f"{field}.until"),
        importance_min=message.importance_min if message.HasField("importance_min") else None,
        session_id=message.session_id,
        categories=tuple(message.categories),
    )
    if bad is None:
        found.raise_if_any()
    return spec


def with_as_of(spec: MemoryFilterSpec, request: Message, bad: Violations) -> MemoryFilterSpec:
    """`spec` reading the request's `as_of` instant (services/storage/memory_filter_sql.py
    live_sql), or now when the field is unset; out of range is recorded in `bad`."""
    text = time_field(bad, request, "as_of", "as_of")
    return spec if text is None else dataclasses.replace(spec, as_of=text)


def memory_to_proto(record: MemoryRecord) -> memory_pb2.Memory:
    return memory_pb2.Memory(
        id=record.id,
        namespace=record.namespace,
        content=record.content,
        type=record.type,
        importance=record.importance,
        tags=record.tags,
        pinned=record.pinned,
        who=record.who,
        why=record.why,
        source_type=record.source_type,
        source_id=record.source_id,
        content_hash=record.content_hash,
        version=record.version,
        create_time=timestamp_from_text(record.created_at),
        update_time=timestamp_from_text(record.updated_at),
        event_time=timestamp_from_text(record.event_time),
        deleted=record.deleted,
        delete_time=timestamp_from_text(record.deleted_at),
        access_count=record.access_count,
        last_access_time=timestamp_from_text(record.last_accessed),
        session_id=record.session_id,
        expire_time=timestamp_from_text(record.expire_at),
        valid_from=timestamp_from_text(record.valid_from or record.event_time),
        categories=record.categories,
        temporal_class=temporal_to_proto(record.temporal_class),
        valid_until=timestamp_from_text(record.valid_until),
        confidence=record.confidence,
        decay_rate=record.decay_rate,
    )
