"""ExplainMemory (seed 003 `explain_fact`): why a memory says what it says and
what became of it. Its supersedes chain both ways, its derivation links and its
audit trail, read in one snapshot so the parts agree."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.db import ReadPool
from services.common.errors import NotFound, Violations
from services.common.memory_record import MemoryRecord
from services.common.validation import validate_id
from services.store import explain_sql as sql
from services.store import repository as repo
from services.store.memories import HistoryEntry

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


async def explain(reads: ReadPool, namespace: str, memory_id: str, bad: Violations) -> Explanation:
    """NOT_FOUND, naming nothing else, for a memory the namespace does not hold."""
    bad.check("", validate_id, memory_id, "id")
    bad.raise_if_any()
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
