"""ExplainMemory (seed 003 `explain_fact`): why a memory says what it says and
what became of it. Its supersedes chain both ways, its derivation links and its
audit trail, read in one snapshot so the parts agree. ListMemoryLinks: a
memory's links themselves, a page at a time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import NotFound
from services.common.memory_record import MemoryRecord
from services.storage.db import ReadPool
from services.storage.store import explain_sql as sql
from services.storage.store import repository as repo
from services.store.inputs import GetMemoryInput, ListLinksInput
from services.store.memories import HistoryEntry
from services.store.page_tokens import encode_page_token

MAX_EVENTS = 100


@dataclass(frozen=True)
class Explanation:
    memory: MemoryRecord
    supersedes: list[MemoryRecord]  # older versions, nearest first
    superseded_by: list[MemoryRecord]  # newer versions, nearest first
    derived_from: list[MemoryRecord]
    derivations: list[MemoryRecord]
    events: list[HistoryEntry]  # oldest first, at most MAX_EVENTS
    events_truncated: bool


async def explain(reads: ReadPool, asked: GetMemoryInput) -> Explanation:
    """NOT_FOUND, naming nothing else, for a memory the namespace does not hold."""
    namespace, memory_id = asked.namespace, asked.id
    async with reads.snapshot() as snap:
        row = await snap.fetch_one(repo.get_memory_query(namespace, memory_id))
        if row is None:
            raise NotFound(f"memory {memory_id} not found in namespace {namespace}")
        older = await snap.fetch_all(sql.older_versions(namespace, memory_id))
        newer = await snap.fetch_all(sql.newer_versions(namespace, memory_id))
        sources = await snap.fetch_all(sql.derived_from(namespace, memory_id))
        derived = await snap.fetch_all(sql.derivations(namespace, memory_id))
        events = await snap.fetch_all(repo.history_query(namespace, memory_id, 0, MAX_EVENTS + 1))
    records = MemoryRecord.from_row
    return Explanation(
        memory=records(row),
        supersedes=[records(r) for r in older],
        superseded_by=[records(r) for r in newer],
        derived_from=[records(r) for r in sources],
        derivations=[records(r) for r in derived],
        events=[HistoryEntry.from_row(r) for r in events[:MAX_EVENTS]],
        events_truncated=len(events) > MAX_EVENTS,
    )


DEFAULT_LINK_PAGE = 100
MAX_LINK_PAGE = 500


@dataclass(frozen=True)
class Link:
    id: str
    link_type: str
    from_memory_id: str
    to_memory_id: str
    created_at: str
    job_id: str
    weight: float
    confidence: float
    valid_from: str
    valid_until: str | None
    evidence: tuple[str, ...]

    @classmethod
    def from_row(cls, r: Sequence[Any]) -> Link:
        return cls(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5] or "",
            r[6],
            r[7],
            r[8],
            r[9],
            tuple(json.loads(r[10] or "[]")),
        )


async def list_links(reads: ReadPool, asked: ListLinksInput) -> tuple[list[Link], str]:
    """One page of the memory's links, oldest first; NOT_FOUND for a memory the
    namespace does not hold."""
    namespace, memory_id, types, direction = (
        asked.namespace,
        asked.memory_id,
        asked.link_types,
        asked.direction,
    )
    size, after, scope = asked.page_size, asked.after, asked.scope
    async with reads.snapshot() as snap:
        if await snap.fetch_one(repo.get_memory_query(namespace, memory_id)) is None:
            raise NotFound(f"memory {memory_id} not found in namespace {namespace}")
        rows = await snap.fetch_all(
            sql.links_query(
                namespace,
                memory_id,
                types,
                direction != "incoming",
                direction != "outgoing",
                after,
                size + 1,
            )
        )
    links = [Link.from_row(r) for r in rows[:size]]
    token = ""
    if len(rows) > size:
        token = encode_page_token("links", scope, [links[-1].created_at, links[-1].id])
    return links, token
