"""Near-duplicates (seed 004 §3), the store's side: apply the pipeline's decision
about two memories of one namespace in one transaction.

The pipeline compares vectors and asks the LLM; the store only checks that both
memories are still live (a decision taken on a state that no longer holds is
dropped) and writes: the duplicate tombstoned with a `merged` event naming the
survivor, the survivor's next version with the union of tags, the higher
importance and pinned if either was; or, to keep both, an audit event."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common import clock
from services.common.errors import InvalidArgument, Violations
from services.common.importance import effective_importance
from services.common.memory_record import MemoryRecord, may_merge
from services.common.validation import validate_id
from services.store import mutations, rules
from services.store import repository as repo
from services.store.writer import Writer

ACTIONS = ("merge", "keep_both")
DEFAULT_REASON = "near duplicate"
DEDUP_ACTOR = "pipeline-dedup"
MAX_LEASES = 500


@dataclass(frozen=True)
class NearDuplicateDecision:
    namespace: str
    survivor_id: str
    duplicate_id: str
    action: str  # merge | keep_both
    similarity: float
    reason: str = ""
    decided_by: str = ""


def _check(decision: NearDuplicateDecision, bad: Violations) -> NearDuplicateDecision:
    bad.check("", validate_id, decision.survivor_id, "survivor_id")
    bad.check("", validate_id, decision.duplicate_id, "duplicate_id")
    if decision.survivor_id and decision.survivor_id == decision.duplicate_id:
        bad.add("duplicate_id", "must differ from survivor_id")
    if decision.action not in ACTIONS:
        bad.add("action", "MERGE or KEEP_BOTH is required")
    if not (0.0 <= decision.similarity <= 1.0) or math.isnan(decision.similarity):
        bad.add("similarity", "must be between 0 and 1")
    reason = bad.check("", rules.check_text, decision.reason, "reason", rules.MAX_REASON_CHARS)
    decided_by = bad.check("", rules.check_text, decision.decided_by, "decided_by", 64)
    bad.raise_if_any()
    return NearDuplicateDecision(
        decision.namespace,
        decision.survivor_id,
        decision.duplicate_id,
        decision.action,
        decision.similarity,
        reason or DEFAULT_REASON,
        decided_by,
    )


class DedupStore:
    def __init__(self, writer: Writer, *, max_job_attempts: int) -> None:
        self._writer = writer
        self._max_attempts = max_job_attempts

    async def resolve(
        self,
        decision: NearDuplicateDecision,
        bad: Violations | None = None,
        lease: tuple[str, str] | None = None,
    ) -> MemoryRecord | LeaseLost | None:
        """The survivor after the decision; None when a memory was gone (nothing
        written). With `lease` (job id, token) the near_duplicate job completes in
        the same transaction; LeaseLost (nothing written) when it is not held."""
        checked = _check(decision, bad if bad is not None else Violations())

        def operation(conn: Any) -> MemoryRecord | LeaseLost | None:
            at = clock.now_text()
            if lease is not None:
                if not _held(conn, *lease):
                    return LEASE_LOST
                repo.complete_job(conn, lease[0], at)
            survivor = _live(conn, checked.namespace, checked.survivor_id)
            duplicate = _live(conn, checked.namespace, checked.duplicate_id)
            if survivor is None or duplicate is None:
                return None
            details = {"similarity": round(checked.similarity, 6), "decided_by": checked.decided_by}
            if checked.action == "keep_both":
                mutations.record_event(
                    conn,
                    duplicate,
                    "none",
                    old_content=duplicate.content,
                    new_content=duplicate.content,
                    actor=DEDUP_ACTOR,
                    reason=checked.reason,
                    at=at,
                    metadata={"near_duplicate_of": survivor.id, "decision": "keep_both", **details},
                )
                return survivor
            mutations.soft_delete(
                conn,
                duplicate,
                actor=DEDUP_ACTOR,
                reason=checked.reason,
                at=at,
                metadata={"survivor_id": survivor.id, **details},
                event=mutations.MERGED_EVENT,
            )
            changes, changed = _united(survivor, duplicate)
            mutations.new_version(
                conn,
                survivor,
                content=None,
                fields=changes,
                actor=DEDUP_ACTOR,
                reason=checked.reason,
                at=at,
                metadata={"merged_from": duplicate.id, "changes": changed, **details},
                max_attempts=self._max_attempts,
            )
            return MemoryRecord.from_row(
                repo.fetch_one(conn, repo.get_memory_query(checked.namespace, survivor.id))
            )

        return await self._writer.submit(operation)

    async def complete_checks(self, leases: Sequence[tuple[str, str]]) -> list[bool]:
        """Finish near_duplicate jobs that found nothing to resolve; False per
        lease not held (or not a near_duplicate job's)."""
        if len(leases) > MAX_LEASES:
            raise InvalidArgument("leases", f"at most {MAX_LEASES}")

        def operation(conn: Any) -> list[bool]:
            at = clock.now_text()
            outcomes = []
            for job_id, token in leases:
                held = _held(conn, job_id, token)
                if held:
                    repo.complete_job(conn, job_id, at)
                outcomes.append(held)
            return outcomes

        return await self._writer.submit(operation)


class LeaseLost:
    """The near_duplicate job's lease is not held: nothing was written."""


LEASE_LOST = LeaseLost()


def _held(conn: Any, job_id: str, token: str) -> bool:
    job = repo.leased_job(conn, job_id, token)
    return job is not None and job["job_type"] == "near_duplicate"


def _live(conn: Any, namespace: str, memory_id: str) -> MemoryRecord | None:
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
