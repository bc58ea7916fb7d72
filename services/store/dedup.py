"""Near-duplicates (seed 004 §3, issue 35), the store's side: apply the
pipeline's decision about two memories of one namespace in one transaction.

The pipeline compares vectors and asks the LLM; the store checks that both
memories are still live (a decision taken on a state that no longer holds is
dropped), re-checks what it is asked to do and writes:

- merge, only for a repeat (services/common/fact_values.py: the same values,
  entities and polarity): the duplicate tombstoned with a `merged` event
  naming the survivor, the survivor's next version with the union of tags,
  the higher importance and pinned if either was;
- supersede, for the same fact with another value: the later one (by valid
  time, then id) supersedes the other by the one rule of
  services/store/supersede.py; nothing is tombstoned;
- keep both: an audit event.

Whether a merge or supersede is applied is the store's own mode
(services/common/llm_gate.py): shadow mode applies none, controlled mode none
that the LLM decided; what is not applied is recorded as keep both, with the
action it `proposed` and why it was `not_applied`.

GetMemory names the live memory a merged one went into (`merged_into`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common import clock, fact_values, llm_gate
from services.common.errors import InvalidArgument
from services.common.importance import effective_importance
from services.common.llm_gate import DECIDED_BY_LLM, LlmGate
from services.common.memory_record import MemoryRecord, may_merge
from services.storage.connection import Connection
from services.storage.store import extraction_sql as links
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import mutations, rules, supersede
from services.store.writer import Writer

ACTIONS = ("merge", "supersede", "keep_both")
DEFAULT_REASON = "near duplicate"
DEDUP_ACTOR = "pipeline-dedup"
VALUES_DIFFER = "values_differ"  # a merge asked for two texts that state other values
MAX_MERGE_HOPS = 100
MAX_LEASES = 500


@dataclass(frozen=True)
class NearDuplicateDecision:
    namespace: str
    survivor_id: str
    duplicate_id: str
    action: str  # merge | supersede | keep_both
    similarity: float
    reason: str = ""
    decided_by: str = ""


class DedupStore:
    def __init__(self, writer: Writer, *, max_job_attempts: int, gate: LlmGate) -> None:
        self._writer = writer
        self._max_attempts = max_job_attempts
        self._gate = gate

    async def resolve(
        self,
        checked: NearDuplicateDecision,
        lease: tuple[str, str] | None = None,
    ) -> MemoryRecord | LeaseLost | None:
        """The survivor after the decision (checked: services/store/requests.py);
        None when a memory was gone (nothing written). With `lease` (job id, token)
        the near_duplicate job completes in the same transaction; LeaseLost
        (nothing written) when it is not held."""

        def operation(conn: Connection) -> MemoryRecord | LeaseLost | None:
            at = clock.now_text()
            if lease is not None:
                if not _held(conn, *lease):
                    return LEASE_LOST
                repo.complete_job(conn, lease[0], at)
            survivor = _live(conn, checked.namespace, checked.survivor_id)
            duplicate = _live(conn, checked.namespace, checked.duplicate_id)
            if survivor is None or duplicate is None:
                return None
            return _Resolution(conn, checked, self._gate, self._max_attempts, at).run(
                survivor, duplicate
            )

        return await self._writer.submit(operation)

    async def complete_checks(self, leases: Sequence[tuple[str, str]]) -> list[bool]:
        """Finish near_duplicate jobs that found nothing to resolve; False per
        lease not held (or not a near_duplicate job's)."""
        if len(leases) > MAX_LEASES:
            raise InvalidArgument("leases", f"at most {MAX_LEASES}")

        def operation(conn: Connection) -> list[bool]:
            at = clock.now_text()
            outcomes = []
            for job_id, token in leases:
                held = _held(conn, job_id, token)
                if held:
                    repo.complete_job(conn, job_id, at)
                outcomes.append(held)
            return outcomes

        return await self._writer.submit(operation)


class _Resolution:
    """One decision inside the writer's transaction (never awaits, never calls out)."""

    def __init__(
        self,
        conn: Connection,
        decision: NearDuplicateDecision,
        gate: LlmGate,
        max_attempts: int,
        at: str,
    ) -> None:
        self.conn = conn
        self.decision = decision
        self.gate = gate
        self.max_attempts = max_attempts
        self.at = at
        self.details: dict[str, Any] = {
            "similarity": round(decision.similarity, 6),
            "decided_by": decision.decided_by,
        }

    def run(self, survivor: MemoryRecord, duplicate: MemoryRecord) -> MemoryRecord:
        action = self.decision.action
        if action == "keep_both":
            return self.keep_both(survivor, duplicate)
        refused = self.refusal(survivor, duplicate)
        if refused:
            return self.keep_both(survivor, duplicate, proposed=action, not_applied=refused)
        if action == "merge":
            return self.merge(survivor, duplicate)
        return self.supersede(survivor, duplicate)

    def refusal(self, survivor: MemoryRecord, duplicate: MemoryRecord) -> str:
        """Why a merge or supersede is not applied ("" when it is)."""
        if self.decision.decided_by == DECIDED_BY_LLM:
            refused = self.gate.refusal()  # controlled mode applies no LLM decision
        else:
            refused = self.gate.records_only_reason()
        if refused:
            return refused
        if survivor.superseded_at is not None or duplicate.superseded_at is not None:
            return supersede.ALREADY_SUPERSEDED  # no longer current: not what the check saw
        if self.decision.action == "merge":
            compared = fact_values.compare(survivor.content, duplicate.content)
            if compared.verdict != fact_values.REPEAT:
                return VALUES_DIFFER  # folding would lose one of the values
            return ""
        newer, older = ordered(survivor, duplicate)
        why, twin = supersede.refusal(self.conn, older, newer.content_hash, valid_start(newer))
        return "" if why == supersede.DUPLICATE and twin == newer.id else why

    def keep_both(
        self,
        survivor: MemoryRecord,
        duplicate: MemoryRecord,
        *,
        proposed: str = "",
        not_applied: str = "",
    ) -> MemoryRecord:
        reason = self.decision.reason
        if proposed:
            reason = f"{llm_gate.describe(not_applied)}, would {proposed}: {reason}"
        metadata: dict[str, Any] = {
            "near_duplicate_of": survivor.id,
            "decision": "keep_both",
            **self.details,
        }
        if proposed:
            metadata |= {"proposed": proposed, "not_applied": not_applied}
        mutations.record_event(
            self.conn,
            duplicate,
            "none",
            old_content=duplicate.content,
            new_content=duplicate.content,
            actor=DEDUP_ACTOR,
            reason=reason[: rules.MAX_REASON_CHARS],
            at=self.at,
            metadata=metadata,
        )
        return survivor

    def merge(self, survivor: MemoryRecord, duplicate: MemoryRecord) -> MemoryRecord:
        mutations.soft_delete(
            self.conn,
            duplicate,
            actor=DEDUP_ACTOR,
            reason=self.decision.reason,
            at=self.at,
            metadata={"survivor_id": survivor.id, **self.details},
            event=mutations.MERGED_EVENT,
        )
        changes, changed = _united(survivor, duplicate)
        mutations.new_version(
            self.conn,
            survivor,
            content=None,
            fields=changes,
            actor=DEDUP_ACTOR,
            reason=self.decision.reason,
            at=self.at,
            metadata={"merged_from": duplicate.id, "changes": changed, **self.details},
            max_attempts=self.max_attempts,
        )
        return self.reread(survivor.id)

    def supersede(self, first: MemoryRecord, second: MemoryRecord) -> MemoryRecord:
        """The later one stays current; the earlier one's validity closes."""
        newer, older = ordered(first, second)
        valid_from = valid_start(newer)
        supersede.close(
            self.conn,
            older,
            newer.id,
            valid_from,
            actor=DEDUP_ACTOR,
            reason=self.decision.reason,
            at=self.at,
            max_attempts=self.max_attempts,
            metadata=dict(self.details),
        )
        mutations.record_event(
            self.conn,
            newer,
            "none",
            old_content=newer.content,
            new_content=newer.content,
            actor=DEDUP_ACTOR,
            reason=self.decision.reason,
            at=self.at,
            metadata={
                "decision": "supersede",
                **supersede.new_history_metadata(older, valid_from),
                **self.details,
            },
        )
        return self.reread(newer.id)

    def reread(self, memory_id: str) -> MemoryRecord:
        row = repo.fetch_one(self.conn, repo.get_memory_query(self.decision.namespace, memory_id))
        return MemoryRecord.from_row(row)


def valid_start(record: MemoryRecord) -> str:
    return record.valid_from or record.event_time


def ordered(a: MemoryRecord, b: MemoryRecord) -> tuple[MemoryRecord, MemoryRecord]:
    """(newer, older) of two values of one fact: the later valid start, then the
    later id (ids are UUIDv7: the later write)."""
    return (a, b) if (valid_start(a), a.id) > (valid_start(b), b.id) else (b, a)


async def merged_into(reads: Any, namespace: str, record: MemoryRecord) -> str:
    """The memory a merged-away one lives on in: its `merged` event's survivor,
    followed through later merges (at most MAX_MERGE_HOPS); "" when `record`
    was not merged away."""
    current, found = record, ""
    for _ in range(MAX_MERGE_HOPS):
        if not current.deleted:
            break
        last = await reads.fetch_one(repo.last_event_query(namespace, current.id))
        if last is None or last["event"] != mutations.MERGED_EVENT:
            break
        found = json.loads(last["metadata"]).get("survivor_id", "")
        row = await reads.fetch_one(repo.get_memory_query(namespace, found)) if found else None
        if row is None:
            break
        current = MemoryRecord.from_row(row)
    return found


async def superseded_by(reads: Any, namespace: str, record: MemoryRecord) -> str:
    """The memory that superseded `record` directly; "" when none did."""
    if record.superseded_at is None:
        return ""
    row = await reads.fetch_one(links.successor_query(namespace, record.id))
    return "" if row is None else str(row[0])


class LeaseLost:
    """The near_duplicate job's lease is not held: nothing was written."""


LEASE_LOST = LeaseLost()


def _held(conn: Connection, job_id: str, token: str) -> bool:
    job = repo.leased_job(conn, job_id, token)
    return job is not None and job["job_type"] == JobKind.NEAR_DUPLICATE


def _live(conn: Connection, namespace: str, memory_id: str) -> MemoryRecord | None:
    """The memory when it is live and may be merged (memory_record.may_merge)."""
    row = repo.fetch_one(conn, repo.get_memory_query(namespace, memory_id))
    if row is None or row["is_deleted"]:
        return None
    record = MemoryRecord.from_row(row)
    if not may_merge(record.type, record.expire_at is not None):
        return None
    return record


def _united(
    survivor: MemoryRecord, duplicate: MemoryRecord
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Column changes (and their readable form) for the survivor: tags of both
    (the survivor's first, capped at rules.MAX_TAGS), the higher importance,
    pinned if either was."""
    tags = tuple(dict.fromkeys([*survivor.tags, *duplicate.tags]))[: rules.MAX_TAGS]
    pinned = survivor.pinned or duplicate.pinned
    importance = effective_importance(pinned, max(survivor.importance, duplicate.importance))
    changes: dict[str, Any] = {}
    changed: dict[str, Any] = {}
    if tags != survivor.tags:
        changes["tags"] = json.dumps(list(tags))
        changed["tags"] = list(tags)
    if pinned != survivor.pinned:
        changes["pinned"] = int(pinned)
        changed["pinned"] = pinned
    if importance != survivor.importance:
        changes["importance"] = changed["importance"] = importance
    return changes, changed
