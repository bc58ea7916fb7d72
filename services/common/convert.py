"""Proto <-> domain conversions shared by every servicer."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf import timestamp_pb2

from engram.common.v1 import memory_pb2
from services.common import clock
from services.common.memory_filter import MemoryFilterSpec
from services.common.memory_record import MemoryRecord


def text_from_timestamp(ts: timestamp_pb2.Timestamp, present: bool) -> str | None:
    """Stored text for a set Timestamp; None when the field is unset."""
    return clock.to_text(ts.ToDatetime(tzinfo=clock.UTC)) if present else None


def timestamp_from_text(text: str | None) -> timestamp_pb2.Timestamp | None:
    """Stored text (fixed width, see services.common.clock) to a Timestamp; sliced
    rather than parsed with strptime, which costs several times more per call."""
    if text is None:
        return None
    moment = datetime(
        int(text[0:4]), int(text[5:7]), int(text[8:10]),
        int(text[11:13]), int(text[14:16]), int(text[17:19]), tzinfo=UTC,
    )  # fmt: skip
    return timestamp_pb2.Timestamp(seconds=int(moment.timestamp()), nanos=int(text[20:26]) * 1000)


def filter_from_proto(message: memory_pb2.MemoryFilter) -> MemoryFilterSpec:
    return MemoryFilterSpec(
        types=tuple(message.types),
        tags=tuple(message.tags),
        who=message.who,
        pinned=message.pinned if message.HasField("pinned") else None,
        source_type=message.source_type,
        since=text_from_timestamp(message.since, message.HasField("since")),
        until=text_from_timestamp(message.until, message.HasField("until")),
        importance_min=message.importance_min if message.HasField("importance_min") else None,
    )


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
    )
