"""Session consolidation's store side (issue 17, seed 003 "Session
consolidation"): what a consolidate_session job is leased with, how its result
is written (seed 003's save_nodes_batch, extract_and_link_entities,
save_causal_edges and mark_session_consolidated, as one transaction with the
job's completion and the lease checked inside it), the idle check that ends
sessions, and the session's state for GetSession.

The result is written by the store's controlled-write rules: facts are
created by mutations.create (dedup, history, embed jobs), pass the fact
confidence gate and the namespace's PII policy, and only memories of the job's
own session, still live, count as sources and link ends (an id from anywhere
else is simply skipped). The namespace's privacy level decides whether
anything long-term is written at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from services.common import clock
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.common.facts import (
    MAX_FACT_SOURCES,
    MAX_SESSION_FACTS,
    Fact,
    NamedEntity,
)
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import extraction_sql
from services.storage.store import repository as repo
from services.storage.store import session_sql as sql
from services.store import mutations, rules, session_lifecycle
from services.store.extraction_writes import (
    WritePolicy,
    fact_columns,
    memory_type_of,
)
from services.store.graph import Triple, names_in, write_graph
from services.store.inputs import SessionInput
from services.store.memories import MemoryStore
from services.store.privacy import FULL, PARTIAL
from services.store.writer import Writer

ACTOR = "pipeline-consolidator"
WHY = "consolidated-fact"
SOURCE_TYPE = "consolidation"  # seed 003's source_type of consolidated nodes
CAUSAL = extraction_sql.CAUSAL
CAUSAL_CONFIDENCE = 0.7  # seed 003: a causal edge's default confidence
# A job reads at most this many memories, and this much text (at least one
# memory); the next job reads the rest.
MEMORIES_PER_JOB = 200
MAX_JOB_CHARS = 24_000
MAX_FACTS = MAX_SESSION_FACTS
MAX_SOURCES = MAX_FACT_SOURCES
MAX_WARNINGS = 100
MAX_WARNING_CHARS = 500
MAX_MODEL_CHARS = 256


@dataclass(frozen=True)
class SessionFact:
    fact: Fact
    source_ids: tuple[str, ...]
    entities: tuple[Triple, ...] = ()


@dataclass(frozen=True)
class ConsolidateCompletion:
    job_id: str
    lease_token: str
    model: str
    facts: tuple[SessionFact, ...] = ()
    causal: tuple[tuple[str, str], ...] = ()  # (cause memory id, effect memory id)
    warnings: tuple[str, ...] = ()
    named: tuple[NamedEntity, ...] = ()


@dataclass(frozen=True)
class ConsolidateOutcome:
    held: bool
    memory_ids: list[str] = field(default_factory=list)
    skipped: int = 0
    causal_links: int = 0
    privacy_blocked: bool = False


@dataclass(frozen=True)
class SessionState:
    session_id: str
    state: str  # open | queued | consolidated | failed
    first_seen_at: str
    last_seen_at: str
    ended_at: str | None
    end_reason: str
    job_id: str
    consolidated_at: str | None
    error: str


def lease_content(conn: Connection, job_id: str, namespace: str) -> tuple[str, str]:
    """(session id, content) for a consolidate_session job being leased: the
    session's live memories not yet consolidated, oldest first, as JSON; the
    job's payload records the newest one it covers. Empty content: nothing
    left to consolidate (the caller completes the job)."""
    payload = sql.job_payload(conn, job_id)
    session_id = str(payload.get("session_id", ""))
    row = sql.consolidation_row(conn, namespace, session_id)
    after = None if row is None else row["consolidated_through"]
    rows = sql.session_memories(conn, namespace, session_id, after, MEMORIES_PER_JOB)
    if not rows:
        return session_id, ""
    budget = MAX_JOB_CHARS
    for count, row in enumerate(rows):
        budget -= len(row["content"])
        if budget < 0 and count:
            rows = rows[:count]
            break
    payload["through"] = rows[-1]["created_at"]
    sql.set_job_payload(conn, job_id, payload)
    memories = [
        {
            "id": r["id"],
            "time": r["event_time"][:19] + "Z",
            "who": r["who"] or "unknown",
            "type": r["type"],
            "content": r["content"],
        }
        for r in rows
    ]
    return session_id, json.dumps({"memories": memories}, ensure_ascii=False)


def nothing_to_consolidate(conn: Connection, job_id: str, namespace: str, at: str) -> None:
    """A job leased with no memory left: done, and the session with it."""
    repo.complete_job(conn, job_id, at, '{"skipped":"no live memories"}')
    session_id = str(sql.job_payload(conn, job_id).get("session_id", ""))
    sql.mark_consolidated(conn, namespace, session_id, job_id, None, at)


class Consolidation:
    def __init__(
        self,
        writer: Writer,
        reads: ReadPool,
        store: MemoryStore,
        policy: WritePolicy,
        *,
        off_reason: str = "",
    ) -> None:
        self._writer = writer
        # why no session is tracked ("" while consolidation is on)
        self._off_reason = off_reason
        self._reads = reads
        self._store = store
        self._policy = policy

    async def complete(self, request: ConsolidateCompletion) -> ConsolidateOutcome:
        def operation(conn: Connection) -> ConsolidateOutcome:
            return _JobWrite(conn, request, self._store, self._policy).run()

        return await self._writer.submit(operation)

    async def end_idle(self, idle_ms: int) -> int:
        """End the sessions idle for `idle_ms`; how many were ended."""

        def operation(conn: Connection) -> int:
            now = clock.now()
            cutoff = clock.to_text(now - timedelta(milliseconds=idle_ms))
            return session_lifecycle.end_idle(
                conn, cutoff, clock.to_text(now), self._policy.max_job_attempts
            )

        return await self._writer.submit(operation)

    async def session(self, asked: SessionInput) -> SessionState:
        """GetSession: the session's consolidation state in its namespace."""
        namespace, session_id = asked.namespace, asked.session_id
        row = await self._reads.fetch_one(sql.consolidation_query(namespace, session_id))
        if row is None and self._off_reason:
            # not "no such session": no session is tracked while consolidation is off
            raise FailedPrecondition(
                f"no session is tracked: session consolidation is off ({self._off_reason})",
                reason="CONSOLIDATION_DISABLED",
                metadata={"setting": "sessions.consolidate"},
            )
        if row is None:
            raise NotFound(f"namespace {namespace} tracks no session {session_id}")
        return SessionState(
            session_id=session_id,
            state=_state(row),
            first_seen_at=row["first_seen_at"],
            last_seen_at=row["last_seen_at"],
            ended_at=row["ended_at"],
            end_reason=row["end_reason"] or "",
            job_id=row["job_id"] or "",
            consolidated_at=row["consolidated_at"],
            error=(row["job_error"] or "") if row["job_status"] == "dead" else "",
        )


def _state(row: Any) -> str:
    """From the session's row and its job's status (a job the retention sweep
    removed counts by whether it consolidated the session)."""
    if row["ended_at"] is None:
        return "open"
    status = row["job_status"]
    if status in ("pending", "leased"):
        return "queued"
    if status == "completed" or (status is None and row["consolidated_at"] is not None):
        return "consolidated"
    return "failed"


class _JobWrite:
    """One job's writes inside the writer's transaction (never awaits, never calls out)."""

    def __init__(
        self,
        conn: Connection,
        request: ConsolidateCompletion,
        store: MemoryStore,
        policy: WritePolicy,
    ) -> None:
        self.conn = conn
        self.request = request
        self.store = store
        self.policy = policy
        self.at = clock.now_text()

    def run(self) -> ConsolidateOutcome:
        request, conn = self.request, self.conn
        job = repo.leased_job(conn, request.job_id, request.lease_token)
        if job is None:
            return ConsolidateOutcome(False)
        if job["job_type"] != sql.CONSOLIDATE_JOB:
            raise InvalidArgument("lease", "not a consolidate_session job")
        namespace = job["namespace"]
        payload = sql.job_payload(conn, request.job_id)
        session_id = str(payload.get("session_id", ""))
        through = payload.get("through")
        level = self.store.privacy.level(namespace)
        if level in (PARTIAL, FULL):  # consolidated facts are long-term writes
            repo.complete_job(conn, request.job_id, self.at, json.dumps({"skipped": level}))
            sql.mark_consolidated(conn, namespace, session_id, request.job_id, through, self.at)
            return ConsolidateOutcome(True, privacy_blocked=True)
        if self.policy.shadow:  # shadow mode: what would be written, recorded only
            shadow = {
                "mode": "shadow",
                "session_id": session_id,
                "model": request.model,
                "facts": [
                    {"content": f.fact.content, "source_memory_ids": list(f.source_ids)}
                    for f in request.facts
                ],
                "causal_links": [list(pair) for pair in request.causal],
                "warnings": [w[:MAX_WARNING_CHARS] for w in request.warnings],
            }
            repo.complete_job(conn, request.job_id, self.at, json.dumps(shadow))
            sql.mark_consolidated(conn, namespace, session_id, request.job_id, through, self.at)
            return ConsolidateOutcome(True)
        wanted = [i for f in request.facts for i in f.source_ids]
        wanted += [i for pair in request.causal for i in pair]
        sources = sql.live_session_memories(conn, namespace, session_id, sorted(set(wanted)))
        memory_ids: list[str] = []
        skipped: list[dict[str, Any]] = []
        for index, item in enumerate(request.facts):
            memory_id, why = self._fact(namespace, session_id, item, sources)
            if memory_id:
                memory_ids.append(memory_id)
            else:
                skipped.append({"fact": index, "reason": why})
        causal = 0
        for cause, effect in request.causal:
            if cause in sources and effect in sources:
                # seed 003: an inferred causal edge's confidence; it holds from
                # when the effect happened, its two ends are its evidence
                extraction_sql.insert_link(
                    conn,
                    namespace,
                    cause,
                    effect,
                    CAUSAL,
                    request.job_id,
                    self.at,
                    valid_from=max(sources[cause]["event_time"], sources[effect]["event_time"]),
                    confidence=CAUSAL_CONFIDENCE,
                    evidence=(cause, effect),
                )
                causal += 1
            else:
                skipped.append({"causal": [cause, effect], "reason": "not_in_session"})
        result = {
            "session_id": session_id,
            "model": request.model,
            "facts": len(request.facts),
            "memory_ids": memory_ids,
            "causal_links": causal,
            "causal_confidence": CAUSAL_CONFIDENCE,
            "skipped": skipped,
            "warnings": [w[:MAX_WARNING_CHARS] for w in request.warnings],
        }
        repo.complete_job(conn, request.job_id, self.at, json.dumps(result, separators=(",", ":")))
        sql.mark_consolidated(conn, namespace, session_id, request.job_id, through, self.at)
        if sql.session_memories(conn, namespace, session_id, through, 1):
            # more than this job read (a long session, or memories that came
            # while it ran): the next job takes them
            job_id = sql.enqueue_session_job(
                conn,
                sql.CONSOLIDATE_JOB,
                namespace,
                session_id,
                self.policy.max_job_attempts,
                self.at,
            )
            sql.requeue_session(conn, namespace, session_id, request.job_id, job_id)
        skipped_facts = sum(1 for s in skipped if "fact" in s)
        return ConsolidateOutcome(True, memory_ids, skipped_facts, causal)

    def _fact(
        self, namespace: str, session_id: str, item: SessionFact, sources: dict[str, Any]
    ) -> tuple[str, str]:
        """(memory id, "") for a fact written or linked, else ("", why it was skipped)."""
        kept = [s for s in dict.fromkeys(item.source_ids) if s in sources]
        if not kept:
            return "", "no_live_source_in_session"
        fact = item.fact
        if fact.confidence < self.policy.min_fact_confidence:
            return "", "low_fact_confidence"
        try:
            content = rules.check_content(
                fact.content, "fact.content", pii=self.store.pii_policy(namespace, None)
            )
        except InvalidArgument as refused:  # the PII policy rejects it (or it is blank)
            return "", f"content_refused: {refused.reason or refused.message}"
        valid_from = max(sources[s]["event_time"] for s in kept)
        new = mutations.new_memory(
            repo.MemoryRow(
                repo.new_id(),
                namespace,
                content.storage,
                content.normalized,
                content.content_hash,
                memory_type_of(fact.type),
                fact.confidence if fact.importance is None else fact.importance,
                "[]",
                0,
                ACTOR,
                WHY,
                SOURCE_TYPE,
                self.request.job_id,
                self.at,
                valid_from,
                extraction_status="derived",
                extraction_model=self.request.model,
                source_memory_id=kept[0],
                valid_from=valid_from,
                **fact_columns(fact, valid_from),
            ),
            actor=ACTOR,
            reason=WHY,
            max_attempts=self.policy.max_job_attempts,
            metadata={
                "session_id": session_id,
                "job_id": self.request.job_id,
                "model": self.request.model,
                "source_memory_ids": kept,
            },
            extract=False,  # a consolidated fact is never extracted again
        )
        [created] = mutations.create(self.conn, [new])
        for source in kept:  # as sure as the fact, valid from when the source was said
            extraction_sql.insert_link(
                self.conn,
                namespace,
                created.memory_id,
                source,
                extraction_sql.DERIVED_FROM,
                self.request.job_id,
                self.at,
                valid_from=sources[source]["event_time"],
                confidence=fact.confidence,
                evidence=(source,),
            )
        named = [n for n in self.request.named if names_in(content.storage, [n.name, *n.aliases])]
        if self.policy.graph_enabled and (item.entities or named):
            write_graph(self.conn, namespace, created.memory_id, item.entities, named)
        return created.memory_id, ""
