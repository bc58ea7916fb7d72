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
)


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

    @classmethod
    def from_row(cls, row: Any) -> MemoryRecord:
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
        )
