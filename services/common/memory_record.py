"""A memory as read from the database, shared by every service that reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MEMORY_TYPES = (
    "fact",
    "preference",
    "decision",
    "rule",
    "learning",
    "issue",
    "procedural",
    "semantic",
    "document_chunk",
    "episodic",  # a conversation turn kept as short-term memory (AppendTurn)
    "session_summary",  # a session's summary (SummarizeSession)
)

# Never folded into a near-duplicate (seed 004 §3): a document chunk belongs to
# its document; session turns and summaries expire on their own schedule. So is
# any memory with an expiry.
NEVER_MERGED_TYPES = frozenset({"document_chunk", "episodic", "session_summary"})
SESSION_SUMMARY_TYPE = "session_summary"  # SummarizeSession's memory (one per session)


def may_merge(memory_type: str, has_expiry: bool) -> bool:
    """Whether a memory may be folded into (or absorb) a near-duplicate."""
    return memory_type not in NEVER_MERGED_TYPES and not has_expiry


@dataclass(frozen=True)
class MemoryRecord:
    id: str
    namespace: str
    content: str
    content_hash: str
    type: str
    importance: float
    tags: tuple[str, ...]
    pinned: bool
    who: str
    why: str
    source_type: str
    source_id: str
    version: int
    deleted: bool
    deleted_at: str | None
    created_at: str
    updated_at: str
    event_time: str
    access_count: int
    last_accessed: str | None
    session_id: str = ""
    expire_at: str | None = None  # set: a short-term memory, gone from reads from then on
    # Valid time: when the memory was true in the world. valid_from defaults to
    # the event time (itself the creation time unless given); valid_until is
    # its end, when known (a short-term fact's) or when a newer version
    # superseded it (None: still valid).
    valid_from: str | None = None
    valid_until: str | None = None
    # When a newer version superseded it (the transaction time of that close;
    # column invalidated_at); None: not superseded.
    superseded_at: str | None = None
    categories: tuple[str, ...] = ()  # the extraction model's (pipeline memories)
    temporal_class: str = ""  # permanent | long_term | short_term; "" not classified
    # Ebbinghaus decay (services/common/forgetting.py): the stored confidence (as
    # of the last access) and the memory's own rate (None: the configured default).
    confidence: float = 1.0
    decay_rate: float | None = None

    @classmethod
    def from_row(cls, row: Any) -> MemoryRecord:
        """A row of services/storage/schema.py's MEMORY_COLUMNS (this reads each of
        them and nothing else: tests/common/test_schema.py)."""
        return cls(
            id=row["id"],
            namespace=row["namespace"],
            content=row["content"],
            content_hash=row["content_hash"],
            type=row["type"],
            importance=row["importance"],
            tags=tuple(json.loads(row["tags"])),
            pinned=bool(row["pinned"]),
            who=row["who"],
            why=row["why"],
            source_type=row["source_type"],
            source_id=row["source_id"],
            version=row["version"],
            deleted=bool(row["is_deleted"]),
            deleted_at=row["deleted_at"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            event_time=row["event_time"],
            access_count=row["access_count"],
            last_accessed=row["last_accessed"],
            session_id=row["session_id"] or "",
            expire_at=row["expire_at"],
            valid_from=row["valid_from"],
            categories=tuple(json.loads(row["categories"])),
            temporal_class=row["temporal_class"],
            valid_until=row["valid_until"],
            superseded_at=row["invalidated_at"],
            confidence=row["confidence"],
            decay_rate=row["decay_rate"],
        )
