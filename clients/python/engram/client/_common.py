"""What the synchronous and the asyncio client share: request building for the
calls with more than a field or two, timestamps, and import batching."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import memory_pb2, privacy_pb2
from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2

TimeArg = dt.datetime | Timestamp | None
# A ttl: a timedelta, a Duration, or seconds.
DurationArg = dt.timedelta | Duration | float | int | None
# A privacy level by name ("none", "partial", "full"; "" for the namespace's) or value.
PrivacyArg = str | int
# Who spoke a turn by name ("user", "assistant", "system", "tool") or TurnRole value.
RoleArg = str | int
# The store takes at most 1000 items per message and 25000 per stream.
MAX_BATCH = 1000
MAX_STREAM_ITEMS = 25_000
DEFAULT_TIMEOUT_S = 10.0
# One ImportMemories stream carries up to 25000 items; it gets its own deadline.
DEFAULT_STREAM_TIMEOUT_S = 600.0


def timestamp(value: TimeArg) -> Timestamp | None:
    """A datetime (naive means UTC) or a Timestamp as a Timestamp."""
    if value is None or isinstance(value, Timestamp):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    result = Timestamp()
    result.FromDatetime(value)
    return result


def duration(value: DurationArg) -> Duration | None:
    """A timedelta, a Duration or seconds as a Duration (None stays None)."""
    if value is None or isinstance(value, Duration):
        return value
    result = Duration()
    if isinstance(value, dt.timedelta):
        result.FromTimedelta(value)
    else:
        result.FromNanoseconds(round(value * 1_000_000_000))
    return result


def privacy_level(value: PrivacyArg) -> privacy_pb2.PrivacyLevel.ValueType:
    """ "none" / "partial" / "full" ("" or unset: the namespace's level) as the enum."""
    if isinstance(value, int):
        return privacy_pb2.PrivacyLevel.ValueType(value)
    if not value:
        return privacy_pb2.PRIVACY_LEVEL_UNSPECIFIED
    return privacy_pb2.PrivacyLevel.Value(f"PRIVACY_LEVEL_{value.upper()}")


def turn_role(value: RoleArg) -> store_pb2.TurnRole.ValueType:
    """ "user" / "assistant" / "system" / "tool" as the TurnRole enum."""
    if isinstance(value, int):
        return store_pb2.TurnRole.ValueType(value)
    return store_pb2.TurnRole.Value(f"TURN_ROLE_{value.upper()}")


def append_turn_request(
    session_id: str,
    role: RoleArg,
    content: str,
    *,
    namespace: str,
    who: str,
    event_time: TimeArg,
    source_id: str,
    ttl: DurationArg,
    privacy: PrivacyArg,
) -> store_pb2.AppendTurnRequest:
    return store_pb2.AppendTurnRequest(
        namespace=namespace,
        session_id=session_id,
        role=turn_role(role),
        content=content,
        who=who,
        event_time=timestamp(event_time),
        source_id=source_id,
        ttl=duration(ttl),
        privacy=privacy_level(privacy),
    )


def memory_filter(
    *,
    types: Iterable[str] = (),
    tags: Iterable[str] = (),
    who: str = "",
    pinned: bool | None = None,
    source_type: str = "",
    since: TimeArg = None,
    until: TimeArg = None,
    importance_min: float | None = None,
    session_id: str = "",
    categories: Iterable[str] = (),
) -> memory_pb2.MemoryFilter:
    """A MemoryFilter from keyword arguments (datetimes welcome)."""
    return memory_pb2.MemoryFilter(
        types=list(types),
        tags=list(tags),
        who=who,
        pinned=pinned,
        source_type=source_type,
        since=timestamp(since),
        until=timestamp(until),
        importance_min=importance_min,
        session_id=session_id,
        categories=list(categories),
    )


def recall_request(
    query: str,
    *,
    namespace: str,
    namespaces: Iterable[str],
    limit: int,
    filter: memory_pb2.MemoryFilter | None,
    skip_access_tracking: bool,
    as_of: TimeArg,
) -> search_pb2.RecallRequest:
    """`namespaces`: several read in one call (each result says which); the server
    refuses `namespace` and `namespaces` together."""
    return search_pb2.RecallRequest(
        namespace=namespace,
        namespaces=list(namespaces),
        query=query,
        limit=limit,
        filter=filter,
        skip_access_tracking=skip_access_tracking,
        as_of=timestamp(as_of),
    )


def assemble_context_request(
    query: str,
    *,
    namespaces: Iterable[str] | str,
    session_id: str,
    token_budget: int,
    as_of: TimeArg,
) -> search_pb2.AssembleContextRequest:
    """A single namespace may be given as a string."""
    names = [namespaces] if isinstance(namespaces, str) else list(namespaces)
    return search_pb2.AssembleContextRequest(
        namespaces=names,
        query=query,
        session_id=session_id,
        token_budget=token_budget,
        as_of=timestamp(as_of),
    )


ImportItemArg = store_pb2.ImportItem | Mapping[str, Any]
# ImportItem's Timestamp fields: a mapping may give each as a datetime, a
# Timestamp or RFC 3339 text.
IMPORT_TIMES: tuple[Literal["event_time", "valid_from", "valid_until", "expire_time"], ...] = (
    "event_time",
    "valid_from",
    "valid_until",
    "expire_time",
)


def import_item(item: ImportItemArg) -> store_pb2.ImportItem:
    """An ImportItem, or a mapping with its field names (the times as datetimes,
    Timestamps or RFC 3339 text; `ttl` as a timedelta, a Duration or seconds)."""
    if isinstance(item, store_pb2.ImportItem):
        return item
    fields = dict(item)
    times = {key: fields.pop(key) for key in IMPORT_TIMES if key in fields}
    ttl = fields.pop("ttl", None)
    message = store_pb2.ImportItem(**fields)
    for key, value in times.items():
        if isinstance(value, str):
            getattr(message, key).FromJsonString(value)
        elif value is not None:
            stamp = timestamp(value)
            if stamp is not None:
                getattr(message, key).CopyFrom(stamp)
    if ttl is not None:
        span = duration(ttl)
        if span is not None:
            message.ttl.CopyFrom(span)
    return message


def export_item(memory: memory_pb2.Memory) -> store_pb2.ImportItem:
    """The ImportItem that recreates `memory` in another namespace (what `engram
    export` writes): its content as stored (`literal_content`: a leading
    `critical:` stays text), type, importance, tags, pinned, who, why, source,
    session, categories, temporal class, stored confidence, own decay rate,
    event time, valid time and expiry. What a new write assigns is not carried:
    the id, version, create and update times, access count and last access, and
    links to other memories (a superseded version is not live, so an export of
    what is live has no supersedes chain to keep)."""
    item = store_pb2.ImportItem(
        content=memory.content,
        type=memory.type,
        importance=memory.importance,
        tags=list(memory.tags),
        pinned=memory.pinned,
        who=memory.who,
        why=memory.why,
        source_type=memory.source_type,
        source_id=memory.source_id,
        session_id=memory.session_id,
        categories=list(memory.categories),
        temporal_class=memory.temporal_class,
        confidence=memory.confidence,
        decay_rate=memory.decay_rate if memory.HasField("decay_rate") else None,
        literal_content=True,
    )
    for key in IMPORT_TIMES:
        if memory.HasField(key):
            getattr(item, key).CopyFrom(getattr(memory, key))
    return item


@dataclass(frozen=True)
class ImportProgress:
    """Where an import stands: items handed to the server so far, and the outcome of
    those whose stream has been answered."""

    sent: int
    created: int
    deduplicated: int
    failed: int

    @property
    def acknowledged(self) -> int:
        """Items whose stream was answered: committed (created or already there) or failed."""
        return self.created + self.deduplicated + self.failed


@dataclass
class ImportSummary:
    """The totals, and the result of every failed item (`index` counts from 0 over
    the whole import, across streams)."""

    created: int = 0
    deduplicated: int = 0
    failed: int = 0
    failures: list[store_pb2.ImportResult] = field(default_factory=list)

    def add(
        self, reply: store_pb2.ImportMemoriesResponse, offset: int
    ) -> list[store_pb2.ImportResult]:
        """Counts one stream's reply in; its results renumbered over the whole import."""
        results = []
        for result in reply.results:
            copy = store_pb2.ImportResult()
            copy.CopyFrom(result)
            copy.index = result.index + offset
            results.append(copy)
            if copy.status == store_pb2.IMPORT_STATUS_FAILED:
                self.failures.append(copy)
        self.created += reply.created_count
        self.deduplicated += reply.deduplicated_count
        self.failed += reply.failed_count
        return results

    def progress(self, sent: int) -> ImportProgress:
        return ImportProgress(sent, self.created, self.deduplicated, self.failed)


def batches(
    items: Iterable[ImportItemArg], batch_size: int
) -> Iterator[list[store_pb2.ImportItem]]:
    """The items in batches of `batch_size`, read lazily: a million items never sit
    in memory at once."""
    if not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be in 1..{MAX_BATCH}")
    batch: list[store_pb2.ImportItem] = []
    for item in items:
        batch.append(import_item(item))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def batches_per_stream(batch_size: int, stream_items: int = MAX_STREAM_ITEMS) -> int:
    """Whole batches that fit in one stream of `stream_items` (at most 25000 items;
    at least one batch)."""
    if stream_items < 1:
        raise ValueError("stream_items must be at least 1")
    return max(1, min(stream_items, MAX_STREAM_ITEMS) // batch_size)


def chain_first(
    first: list[store_pb2.ImportItem], rest: Iterator[list[store_pb2.ImportItem]], more: int
) -> Iterator[list[store_pb2.ImportItem]]:
    """`first`, then up to `more` further batches of `rest`, taken only as they are
    sent: one stream's batches of an import."""
    yield first
    for _ in range(more):
        batch = next(rest, None)
        if batch is None:
            return
        yield batch
