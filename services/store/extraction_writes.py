"""Controlled writes: applying one extract job's decisions (seed 000
"Controlled Writes", "Pipeline Modes"), plus UPDATE and DELETE applied safely.

The store, not the pipeline, decides what is written: the mode comes from the
store's own configuration, and every UPDATE or DELETE must pass deterministic
guards that an LLM cannot argue with. Everything of one job (new memories,
changed targets, audit rows, the job's completion) is one writer operation,
i.e. one transaction, and the lease is checked inside it. The knowledge graph
follows in a second operation whose failure is reported, not raised.

Shadow mode (`shadowMode`, or `mutationsFrozen`: seed 000 makes a frozen
pipeline a shadow one) writes only the audit rows, with the actor
`pipeline-shadow` (seed 002), and the job's completion; a frozen store takes
exactly that (services/store/writer.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common import clock
from services.common.config import Config
from services.common.errors import InvalidArgument
from services.common.facts import (
    FACT_TYPES,
    Fact,
    NamedEntity,
)
from services.common.llm_gate import LlmGate
from services.common.memory_record import MemoryRecord
from services.common.normalize import NormalizedContent, is_blank
from services.storage.connection import Connection
from services.storage.store import extraction_sql as sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import contradiction, mutations, supersede
from services.store.graph import Triple, write_graph
from services.store.writer import Writer

log = logging.getLogger("engram.store.extraction")

ACTOR = "pipeline-v2"
SHADOW_ACTOR = "pipeline-shadow"  # seed 002: the actor of shadow proposals' audit rows
WHY = "extracted-fact"
AUDIT_EVENT = "none"  # HISTORY_EVENT_TYPE_NONE: a proposal recorded on its source memory
ACTIONS = ("add", "update", "delete", "none")

MAX_PROPOSALS = 20
MAX_CANDIDATES = 50
MAX_MODEL_CHARS = 256
MAX_REASON_CHARS = 500
MAX_WARNINGS = 100
MAX_WARNING_CHARS = 500


@dataclass(frozen=True)
class WritePolicy:
    """The store's `memory.pipelineV2.*` settings that govern these writes."""

    shadow: bool = False
    frozen: bool = False  # mutationsFrozen: shadow mode, whatever `shadow` says
    allow_update_delete: bool = False
    graph_enabled: bool = False
    min_fact_confidence: float = 0.7
    destructive_min_confidence: float = 0.8
    destructive_max_per_job: int = 3
    max_job_attempts: int = 3

    @property
    def gate(self) -> LlmGate:
        """The one gate for LLM decisions that change memories (services/common/llm_gate.py)."""
        return LlmGate(self.shadow, self.frozen, self.allow_update_delete)

    @property
    def records_only(self) -> bool:
        """Shadow mode: proposals are recorded, nothing else is written."""
        return self.gate.records_only


@dataclass(frozen=True)
class Proposal:
    action: str  # add | update | delete | none
    fact: Fact
    target_id: str = ""
    confidence: float = 0.0
    reason: str = ""
    candidate_ids: tuple[str, ...] = ()
    vector: tuple[float, ...] = ()


@dataclass(frozen=True)
class ExtractCompletion:
    job_id: str
    lease_token: str
    extraction_model: str
    proposals: tuple[Proposal, ...]
    entities: tuple[Triple, ...] = ()
    warnings: tuple[str, ...] = ()
    embedding_model: str = ""
    named: tuple[NamedEntity, ...] = ()  # typed entities with aliases (seed 003)


@dataclass(frozen=True)
class ProposalResult:
    outcome: str  # created | deduped | skipped | recorded | blocked | updated | deleted | shadowed
    memory_id: str = ""
    reason: str = ""
    review_needed: bool = False


@dataclass(frozen=True)
class CompletionOutcome:
    lease_held: bool
    results: list[ProposalResult] = field(default_factory=list)
    graph_error: str = ""


@dataclass(frozen=True)
class CheckedProposal:
    """A validated proposal with its content normalised and vector packed."""

    proposal: Proposal
    content: NormalizedContent
    vector: mutations.SuppliedVector | None


@dataclass(frozen=True)
class CheckedExtract:
    """CompleteExtractJob, every field checked (services/store/job_requests.py)."""

    completion: ExtractCompletion
    proposals: tuple[CheckedProposal, ...]


class ExtractionWrites:
    def __init__(self, writer: Writer, policy: WritePolicy) -> None:
        self._writer = writer
        self._policy = policy

    async def complete(self, checked_request: CheckedExtract) -> CompletionOutcome:
        request, checked = checked_request.completion, checked_request.proposals

        def operation(conn: Connection) -> tuple[CompletionOutcome, str, str]:
            return _JobWrite(conn, request, checked, self._policy).run()

        # A shadow completion writes only what a frozen store takes.
        outcome, namespace, memory_id = await self._writer.submit(
            operation, while_frozen=self._policy.records_only
        )
        if not outcome.lease_held or not self._write_graph_now(outcome, request):
            return outcome
        facts = [
            (result.memory_id, proposal.fact.content)
            for proposal, result in zip(request.proposals, outcome.results, strict=False)
            if result.outcome in ("created", "updated", "deduped") and result.memory_id
        ]
        try:
            await self._writer.submit(
                lambda conn: write_graph(
                    conn, namespace, memory_id, request.entities, request.named, facts
                )
            )
        except Exception as error:  # non-fatal by design: the facts are committed
            log.warning("graph write failed", extra={"job_id": request.job_id, "error": str(error)})
            return CompletionOutcome(True, outcome.results, f"graph write failed: {error}")
        return outcome

    def _write_graph_now(self, outcome: CompletionOutcome, request: ExtractCompletion) -> bool:
        """Graph rows are writes too: not in shadow mode, and only for a live source."""
        return (
            self._policy.graph_enabled
            and not self._policy.records_only
            and bool(request.entities or request.named)
            and not any(r.reason == "source_memory_deleted" for r in outcome.results)
        )


def memory_type_of(fact_type: str) -> str:
    """The extraction's fact types are memory types; anything else is a plain fact."""
    return fact_type if fact_type in FACT_TYPES else "fact"


# ---- the transaction ---------------------------------------------------------------


class _JobWrite:
    """One job's writes inside the writer's transaction (never awaits, never calls out)."""

    def __init__(
        self,
        conn: Connection,
        request: ExtractCompletion,
        checked: Sequence[CheckedProposal],
        policy: WritePolicy,
    ) -> None:
        self.conn = conn
        self.request = request
        self.checked = checked
        self.policy = policy
        self.at = clock.now_text()
        self.applied_destructive = 0
        self.namespace = ""
        self.source: MemoryRecord | None = None

    def run(self) -> tuple[CompletionOutcome, str, str]:
        job = repo.leased_job(self.conn, self.request.job_id, self.request.lease_token)
        if job is None:
            return CompletionOutcome(False), "", ""
        if job["job_type"] != JobKind.EXTRACT:
            raise InvalidArgument(
                "lease.job_id", f"is a {job['job_type']} job, not {JobKind.EXTRACT}"
            )
        self.namespace = job["namespace"]
        row = repo.fetch_one(self.conn, repo.get_memory_query(self.namespace, job["memory_id"]))
        self.source = None if row is None else MemoryRecord.from_row(row)
        results: list[ProposalResult] = []
        audits: list[repo.HistoryRow] = []
        for item in self.checked:
            result, details = self._decide(item)
            results.append(result)
            if result.outcome in ("blocked", "updated", "deleted"):
                log.info(
                    "destructive proposal %s",
                    result.outcome,
                    extra={
                        "job_id": self.request.job_id,
                        "action": item.proposal.action,
                        "target_id": item.proposal.target_id,
                        "reason": result.reason,
                        "review_needed": result.review_needed,
                    },
                )
            if self.source is not None:
                audits.append(self._audit_row(item, result, details))
        repo.insert_history(self.conn, audits)
        repo.complete_job(self.conn, self.request.job_id, self.at, self._job_result(results))
        if self.source is not None and not self.source.deleted and not self.policy.records_only:
            sql.set_extraction_state(
                self.conn, self.source.id, "completed", self.request.extraction_model
            )
        return CompletionOutcome(True, results), self.namespace, job["memory_id"]

    # ---- one proposal ----

    def _decide(self, item: CheckedProposal) -> tuple[ProposalResult, dict[str, Any]]:
        """The outcome of one proposal, applying it when every gate passes; the
        dict is extra audit metadata."""
        action = item.proposal.action
        target = self._target(item) if action in ("update", "delete") else None
        review = target is not None and contradiction.contradicts(
            item.proposal.fact.content, target.content
        )
        if self.source is None or self.source.deleted:
            return ProposalResult("skipped", reason="source_memory_deleted"), {}
        if self.policy.records_only:
            reason = self.policy.gate.records_only_reason()
            return ProposalResult("shadowed", reason=reason, review_needed=review), {}
        if action == "add":
            return self._add(item), {}
        if action == "none":
            return ProposalResult("recorded", reason="no_change"), {}
        blocked = self._destructive_guard(item, target)
        if blocked:
            return ProposalResult("blocked", reason=blocked, review_needed=review), {}
        assert target is not None  # the guard blocks a missing target
        if action == "update":
            return self._update(item, target, review)
        self._delete(item, target)
        return ProposalResult("deleted", target.id, review_needed=review), {}

    def _target(self, item: CheckedProposal) -> MemoryRecord | None:
        """The target if it is a live memory of the job's namespace; ids from
        other namespaces are simply not found."""
        row = repo.fetch_one(
            self.conn, repo.get_memory_query(self.namespace, item.proposal.target_id)
        )
        if row is None or row["is_deleted"]:
            return None
        return MemoryRecord.from_row(row)

    def _fact_gate(self, item: CheckedProposal) -> str:
        """Seed order: confidence first, then empty content."""
        if item.proposal.fact.confidence < self.policy.min_fact_confidence:
            return "low_fact_confidence"
        # the one emptiness rule of every text that becomes a memory (rules.check_not_blank)
        if not item.content.normalized or is_blank(item.content.storage):
            return "empty_fact_content"
        return ""

    def _add(self, item: CheckedProposal) -> ProposalResult:
        gate = self._fact_gate(item)
        if gate:
            return ProposalResult("skipped", reason=gate)
        [created] = mutations.create(self.conn, [self._derived(item)])
        if created.deduplicated:
            return ProposalResult("deduped", created.memory_id, reason="duplicate")
        self._link_to_source(created.memory_id, item.proposal.fact.confidence)
        return ProposalResult("created", created.memory_id)

    def _derived(
        self, item: CheckedProposal, metadata: dict[str, Any] | None = None
    ) -> mutations.NewMemory:
        """A pipeline fact from the source: valid (and dated) from the source's
        event time, when it was said."""
        content = item.content
        fact = item.proposal.fact
        assert self.source is not None
        return mutations.new_memory(
            repo.MemoryRow(
                repo.new_id(),
                self.namespace,
                content.storage,
                content.normalized,
                content.content_hash,
                memory_type_of(item.proposal.fact.type),
                # seed 004 §4: the model's importance; seed 002: else the confidence
                fact.confidence if fact.importance is None else fact.importance,
                "[]",
                0,
                ACTOR,
                WHY,
                "",
                "",
                self.at,
                self.source.event_time,
                extraction_status="derived",
                extraction_model=self.request.extraction_model,
                source_memory_id=self.source.id,
                valid_from=self.source.event_time,
                **fact_columns(fact, self.source.event_time),
            ),
            actor=ACTOR,
            reason=WHY,
            max_attempts=self.policy.max_job_attempts,
            metadata={
                "source_memory_id": self.source.id,
                "extraction_model": self.request.extraction_model,
                "job_id": self.request.job_id,
                **(metadata or {}),
            },
            # A derived fact gets an embed job at most: never an extract job.
            extract=False,
            vector=item.vector,
        )

    def _link_to_source(self, memory_id: str, confidence: float) -> None:
        """A `derived_from` link as sure as the fact, valid from when the
        source was said; the source is its evidence."""
        assert self.source is not None
        sql.insert_link(
            self.conn,
            self.namespace,
            memory_id,
            self.source.id,
            sql.DERIVED_FROM,
            self.request.job_id,
            self.at,
            valid_from=self.source.event_time,
            confidence=confidence,
            evidence=(self.source.id,),
        )

    def _destructive_guard(self, item: CheckedProposal, target: MemoryRecord | None) -> str:
        """The first guard an UPDATE or DELETE fails, or "" when it may be applied."""
        proposal = item.proposal
        assert self.source is not None
        refused = self.policy.gate.refusal()  # controlled mode applies no UPDATE or DELETE
        if refused:
            return refused
        if proposal.confidence < self.policy.destructive_min_confidence:
            return "low_decision_confidence"
        if proposal.target_id not in proposal.candidate_ids:
            return "target_not_candidate"
        if proposal.target_id == self.source.id:
            return "target_is_source"
        if target is None:
            return "target_not_found"
        if target.pinned:
            return "target_pinned"
        if target.superseded_at is not None:
            return "target_superseded"
        if proposal.action == "update":
            gate = self._fact_gate(item)
            if gate:
                return gate
            if len(contradiction.shared_tokens(proposal.fact.content, target.content)) < (
                contradiction.MIN_SHARED_TOKENS
            ):
                return "insufficient_overlap"
        elif not contradiction.contradicts(proposal.fact.content, target.content):
            return "no_contradiction"
        if self.applied_destructive >= self.policy.destructive_max_per_job:
            return "destructive_cap_reached"
        return ""

    def _update(
        self, item: CheckedProposal, target: MemoryRecord, review: bool
    ) -> tuple[ProposalResult, dict[str, Any]]:
        """A new memory replaces the target (services/store/supersede.py): the
        target keeps its content and its validity closes when the new fact
        starts (the source's event time)."""
        assert self.source is not None
        content = item.content
        if content.content_hash == target.content_hash:
            return ProposalResult("recorded", target.id, "unchanged", review), {}
        valid_from = self.source.event_time
        why, twin = supersede.refusal(self.conn, target, content.content_hash, valid_from)
        if why == supersede.DUPLICATE:
            return ProposalResult("blocked", reason="duplicate", review_needed=review), {
                "duplicate_memory_id": twin
            }
        if why:
            return ProposalResult("blocked", reason=why, review_needed=review), {}
        self.applied_destructive += 1
        done = supersede.supersede(
            self.conn,
            target,
            self._derived(item, supersede.new_history_metadata(target, valid_from)),
            actor=ACTOR,
            reason=_clip(item.proposal.reason) or "pipeline-v2 update",
            at=self.at,
            job_id=self.request.job_id,
            metadata={
                "source_memory_id": self.source.id,
                "job_id": self.request.job_id,
                "review_needed": review,
            },
            evidence=(self.source.id,),
        )
        self._link_to_source(done.new_memory_id, item.proposal.fact.confidence)
        return ProposalResult("updated", done.new_memory_id, review_needed=review), {
            "superseded_memory_id": target.id,
            "old_version": target.version,
            "new_version": done.old_version,
        }

    def _delete(self, item: CheckedProposal, target: MemoryRecord) -> None:
        """A soft delete: RecoverMemory brings it back within the tombstone window."""
        assert self.source is not None
        self.applied_destructive += 1
        mutations.soft_delete(
            self.conn,
            target,
            actor=ACTOR,
            reason=_clip(item.proposal.reason) or "pipeline-v2 delete",
            at=self.at,
            metadata={"source_memory_id": self.source.id, "job_id": self.request.job_id},
        )

    # ---- audit ----

    def _audit_row(
        self, item: CheckedProposal, result: ProposalResult, details: dict[str, Any]
    ) -> repo.HistoryRow:
        assert self.source is not None
        proposal = item.proposal
        return repo.history_row(
            memory_id=self.source.id,
            namespace=self.namespace,
            event=AUDIT_EVENT,
            old_content=None,
            new_content=proposal.fact.content,
            actor=SHADOW_ACTOR if self.policy.records_only else ACTOR,
            reason=f"{proposal.action}:{result.outcome}"
            + (f":{result.reason}" if result.reason else ""),
            metadata={
                "action": proposal.action,
                "outcome": result.outcome,
                "reason": result.reason,
                "decision_reason": _clip(proposal.reason),
                "fact_content": proposal.fact.content,
                "fact_type": proposal.fact.type,
                "fact_confidence": proposal.fact.confidence,
                "decision_confidence": proposal.confidence,
                "target_id": proposal.target_id,
                "memory_id": result.memory_id,
                "source_memory_id": self.source.id,
                "extraction_model": self.request.extraction_model,
                "fact_count": len(self.request.proposals),
                "entity_count": len(self.request.entities),
                "review_needed": result.review_needed,
                "shadow": self.policy.records_only,
                "job_id": self.request.job_id,
                **details,
            },
            at=self.at,
        )

    def _job_result(self, results: Sequence[ProposalResult]) -> str:
        counts: dict[str, int] = {}
        for result in results:
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        return json.dumps(
            {
                "mode": "shadow" if self.policy.records_only else "controlled",
                "facts": len(self.request.proposals),
                "entities": len(self.request.entities),
                "outcomes": counts,
                "review_needed": sum(r.review_needed for r in results),
                "warnings": [w[:MAX_WARNING_CHARS] for w in self.request.warnings],
                "extraction_model": self.request.extraction_model,
            },
            separators=(",", ":"),
        )


def _clip(text: str) -> str:
    return text.strip()[:MAX_REASON_CHARS]


def write_policy(config: Config) -> WritePolicy:
    """The policy from the store's configuration (the same file the pipeline reads)."""
    p = config.memory.pipelineV2
    return WritePolicy(
        shadow=p.shadowMode,
        frozen=p.mutationsFrozen,
        allow_update_delete=p.allowUpdateDelete,
        graph_enabled=p.graphEnabled,
        min_fact_confidence=p.minFactConfidenceForWrite,
        destructive_min_confidence=p.destructiveMinConfidence,
        destructive_max_per_job=p.destructiveMaxPerJob,
        max_job_attempts=p.workerMaxRetries,
    )


def fact_columns(fact: Fact, valid_from: str) -> dict[str, Any]:
    """A pipeline fact's categories, temporal class, end and confidence, as memory
    columns."""
    return {
        "categories": json.dumps(list(dict.fromkeys(c.strip().lower() for c in fact.categories))),
        "temporal_class": fact.temporal_class,
        "valid_until": _short_term_end(fact, valid_from),
        "confidence": fact.confidence,  # seed 003: decays and is reinforced from here
    }


def _short_term_end(fact: Fact, valid_from: str) -> str | None:
    """A short-term fact's end (seed 004 §5) as the memory's valid_until (issue
    17's valid time: reads of now leave it out once passed); None for other
    classes and for an end that is not after the fact's start."""
    if fact.temporal_class != "short_term" or fact.valid_until is None:
        return None
    return fact.valid_until if fact.valid_until > valid_from else None
