"""Conversation sessions (issue 16, seed 001): AppendTurn's short-term capture
with the explicit long-term intent gate and privacy levels, SummarizeSession's
job, the transcript a summarize job is leased with, and the summary's write.
Decisions live here; SQL lives in session_sql and the repository."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from services.common import clock
from services.common.config import LLM_HINT
from services.common.errors import InvalidArgument, LlmNotConfigured, NotFound, Violations
from services.common.intent import has_long_term_intent
from services.common.memory_record import MemoryRecord
from services.common.turn_roles import ROLES, USER
from services.storage.connection import Connection
from services.storage.store import repository as repo
from services.storage.store import session_sql as sql
from services.store import mutations, rules
from services.store.inputs import SessionInput, TurnInput
from services.store.memories import MemoryStore
from services.store.privacy import FULL, FULL_NOTICE, PARTIAL, PARTIAL_NOTICE
from services.store.writer import Writer

TURN_TYPE = "episodic"
SUMMARY_TYPE = sql.SUMMARY_TYPE
SUMMARIZER = "pipeline-summarizer"
# A summarize job reads at most this many of the session's newest turns.
TRANSCRIPT_TURNS = 200
MAX_SUMMARY_CHARS = 8000


@dataclass(frozen=True)
class Turn:
    namespace: str
    session_id: str
    role: str  # one of ROLES, or "" (unspecified: invalid)
    content: str
    who: str = ""
    event_time: str | None = None
    source_id: str = ""
    ttl_nanos: int | None = None  # None: sessions.turn_ttl_ms
    privacy: str = ""
    actor: str = ""


@dataclass(frozen=True)
class TurnOutcome:
    record: MemoryRecord | None
    captured: bool
    long_term_intent: bool
    promoted: bool
    deduplicated: bool
    notice: str = ""


@dataclass(frozen=True)
class SummarizeOutcome:
    job_id: str
    already_queued: bool
    turn_count: int


@dataclass(frozen=True)
class SummaryOutcome:
    held: bool  # the lease was still held (else nothing was written)
    memory_id: str = ""
    superseded_by: str = ""
    privacy_blocked: bool = False


class Sessions:
    def __init__(
        self,
        writer: Writer,
        store: MemoryStore,
        *,
        turn_ttl_ms: int,
        summary_ttl_ms: int,
        max_job_attempts: int,
        llm_configured: bool = True,
        records_only: bool = False,
    ) -> None:
        self._writer = writer
        # shadow mode (or mutationsFrozen): seed 000 writes nothing to the memories
        # table; a summary is recorded in its job's result instead
        self._records_only = records_only
        self._llm_configured = llm_configured  # config.llm_configured: a summary needs one
        self._store = store
        self._turn_ttl_nanos = turn_ttl_ms * 1_000_000
        self._summary_ttl_nanos = summary_ttl_ms * 1_000_000
        self._max_attempts = max_job_attempts

    # ---- AppendTurn -----------------------------------------------------------------

    def plan_turn(self, turn: Turn) -> TurnInput:
        """AppendTurn's parse step ends here: the memory a turn becomes, short-term,
        or long-term when the user asks for it (and the privacy level allows it),
        checked like any other (INVALID_ARGUMENT naming every bad field)."""
        bad = Violations()
        if not turn.session_id:  # (its form is checked with the other fields below)
            bad.add("session_id", "required")
        if turn.role not in ROLES:
            bad.add("role", "required: one of TURN_ROLE_USER, ASSISTANT, SYSTEM, TOOL")
        intent = turn.role == USER and has_long_term_intent(turn.content)
        level = self._store.privacy.level(turn.namespace, turn.privacy)
        promoted = intent and level not in (PARTIAL, FULL)
        fields = rules.MemoryFields(
            namespace=turn.namespace,
            content=turn.content,
            type="" if promoted else TURN_TYPE,
            who=turn.who or turn.role,
            why="asked to remember" if promoted else "conversation turn",
            source_type=f"turn.{turn.role}",
            source_id=turn.source_id,
            event_time=turn.event_time,
            actor=turn.actor,
            session_id=turn.session_id,
            ttl_nanos=None if promoted else (turn.ttl_nanos or self._turn_ttl_nanos),
            # what was said, as said: a turn starting "critical:" is not a pin
            prefixes=False,
        )
        pii = self._store.pii_policy(turn.namespace, None)
        draft = bad.check_all(None, rules.draft_memory, fields, pii=pii)
        bad.raise_if_any()
        assert draft is not None
        return TurnInput(draft, level, intent, promoted)

    async def append_turn(self, planned: TurnInput) -> TurnOutcome:
        """Capture the turn as `plan_turn` decided (nothing under FULL privacy)."""
        draft, level, intent, promoted = (
            planned.draft,
            planned.level,
            planned.intent,
            planned.promoted,
        )
        if level == FULL:
            return TurnOutcome(None, False, intent, False, False, FULL_NOTICE)
        record, deduplicated = await self._store.remember(draft, level)
        notice = PARTIAL_NOTICE if intent and not promoted else ""
        return TurnOutcome(record, True, intent, promoted, deduplicated, notice)

    # ---- SummarizeSession ------------------------------------------------------------

    async def summarize(self, asked: SessionInput) -> SummarizeOutcome:
        """Queue the session's summarize job (or find the one already pending)."""
        namespace, session_id = asked.namespace, asked.session_id
        self._store.privacy.check_write(namespace, "", long_term=False)
        if not self._llm_configured:
            raise LlmNotConfigured("no summary would be written: no LLM is configured", LLM_HINT)

        def operation(conn: Connection) -> SummarizeOutcome:
            count = sql.turn_count(conn, namespace, session_id)
            if count == 0:
                raise NotFound(
                    f"session {session_id} has no live short-term memory in namespace {namespace}"
                )
            pending = sql.pending_summarize_job(conn, namespace, session_id)
            if pending is not None:
                return SummarizeOutcome(pending, True, count)
            job_id = sql.enqueue_session_job(
                conn, sql.SUMMARIZE_JOB, namespace, session_id, self._max_attempts, clock.now_text()
            )
            return SummarizeOutcome(job_id, False, count)

        return await self._writer.submit(operation)

    # ---- the summarize job -------------------------------------------------------------

    async def complete_summary_job(
        self, job_id: str, lease_token: str, summary: str, model: str
    ) -> SummaryOutcome:
        """CompleteSummarizeJob: the summary and the job's completion in one
        transaction, the lease checked inside it; the fields are checked
        (services/store/job_requests.py)."""

        def operation(conn: Connection) -> SummaryOutcome:
            job = repo.leased_job(conn, job_id, lease_token)
            if job is None:
                return SummaryOutcome(False)
            if job["job_type"] != sql.SUMMARIZE_JOB:
                raise InvalidArgument("lease", "not a summarize_session job")
            return self.complete_summary(conn, job, summary, model, clock.now_text())

        return await self._writer.submit(operation)

    def complete_summary(
        self, conn: Connection, job: Any, summary: str, model: str, at: str
    ) -> SummaryOutcome:
        """In the writer's transaction, with the lease checked: store the
        session's new summary unless a newer one exists; complete the job."""
        payload = sql.job_payload(conn, job["id"])
        namespace, session_id = job["namespace"], payload.get("session_id", "")
        through = payload.get("through") or at
        if self._store.privacy.level(namespace) == FULL:
            repo.complete_job(conn, job["id"], at, '{"skipped":"privacy full"}')
            return SummaryOutcome(True, privacy_blocked=True)
        if self._records_only:
            shadow = {"mode": "shadow", "model": model, "summary": summary, "through": through}
            repo.complete_job(conn, job["id"], at, json.dumps(shadow))
            return SummaryOutcome(True)
        previous = [MemoryRecord.from_row(r) for r in sql.summaries(conn, namespace, session_id)]
        newer = [p for p in previous if p.event_time > through]
        if newer:
            result = json.dumps({"superseded_by": newer[0].id})
            repo.complete_job(conn, job["id"], at, result)
            return SummaryOutcome(True, superseded_by=newer[0].id)
        for old in previous:
            mutations.soft_delete(
                conn, old, actor=SUMMARIZER, reason="replaced by a newer summary", at=at
            )
        content = rules.check_content(
            summary, "summary", pii=self._store.pii_policy(namespace, None)
        )
        new = mutations.new_memory(
            repo.MemoryRow(
                repo.new_id(),
                namespace,
                content.storage,
                content.normalized,
                content.content_hash,
                SUMMARY_TYPE,
                rules.DEFAULT_IMPORTANCE,
                "[]",
                0,
                SUMMARIZER,
                "session summary",
                SUMMARY_TYPE,
                job["id"],
                at,
                through,
                session_id=session_id,
                expire_at=clock.plus_nanos(at, self._summary_ttl_nanos),
            ),
            actor=SUMMARIZER,
            reason="session summary",
            max_attempts=self._max_attempts,
            metadata={"job_id": job["id"], "model": model, "through": through},
            extract=False,
        )
        [created] = mutations.create(conn, [new])
        repo.complete_job(conn, job["id"], at, json.dumps({"memory_id": created.memory_id}))
        return SummaryOutcome(True, memory_id=created.memory_id)


def transcript(conn: Connection, job_id: str, namespace: str) -> tuple[str, str]:
    """(session id, transcript) for a summarize job being leased: the session's
    live short-term memories, oldest first, one `[time] who: text` line each;
    the job's payload records the newest turn it covers. An empty transcript
    means there is nothing left to summarise."""
    payload = sql.job_payload(conn, job_id)
    session_id = str(payload.get("session_id", ""))
    rows = sql.turns(conn, namespace, session_id, TRANSCRIPT_TURNS)
    if not rows:
        return session_id, ""
    payload["through"] = max(row["created_at"] for row in rows)
    sql.set_job_payload(conn, job_id, payload)
    lines = [
        f"[{row['event_time'][:19]}Z] {row['who'] or 'unknown'}: {row['content']}" for row in rows
    ]
    return session_id, "\n".join(lines)
