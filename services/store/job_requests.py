"""The parse step of each JobQueueService RPC: the proto request becomes one
typed input, or INVALID_ARGUMENT naming every bad field, before the queue,
the extraction writes, the sessions or the consolidation run, so a bad
completion writes nothing. What needs the database (a lease still held, the
job's kind, the vector index's model) is judged inside the write."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration

from engram.store.internal.v1 import job_queue_pb2 as pb
from services.common.convert import temporal_from_proto, text_from_timestamp
from services.common.errors import Violations
from services.common.facts import (
    DEFAULT_ENTITY_TYPE,
    ENTITY_TYPES,
    MAX_ALIASES,
    MAX_CATEGORIES,
    MAX_CATEGORY_CHARS,
    MAX_CAUSAL_LINKS,
    MAX_ENTITIES,
    MAX_ENTITY_CHARS,
    MAX_FACT_CHARS,
    MAX_NAMED_ENTITIES,
    Fact,
    NamedEntity,
)
from services.common.normalize import normalize_content
from services.common.validation import validate_id, validate_ids, validate_namespace
from services.storage.store.job_enums import TYPE_NAMES, JobKind
from services.store import consolidation, extraction_writes, jobs, mutations, sessions
from services.store.consolidation import ConsolidateCompletion, SessionFact
from services.store.extraction_writes import (
    CheckedExtract,
    CheckedProposal,
    ExtractCompletion,
    Proposal,
)
from services.store.graph import Triple
from services.store.jobs import MAX_BATCH, EmbedCompletion, EmbedResult, LeaseHolder

_ACTION_NAMES = {
    pb.PROPOSAL_ACTION_ADD: "add",
    pb.PROPOSAL_ACTION_UPDATE: "update",
    pb.PROPOSAL_ACTION_DELETE: "delete",
    pb.PROPOSAL_ACTION_NONE: "none",
}

Lease = tuple[str, str]  # (job id, lease token)


@dataclass(frozen=True)
class LeaseInput:
    job_type: JobKind
    max_jobs: int
    namespaces: tuple[str, ...]
    holder: LeaseHolder | None  # None: an anonymous lease
    wait_s: float


@dataclass(frozen=True)
class SummaryCompletion:
    job_id: str
    lease_token: str
    summary: str
    model: str


# ---- leases ------------------------------------------------------------------------


def lease(request: pb.LeaseJobsRequest) -> LeaseInput:
    bad = Violations()
    job_type = TYPE_NAMES.get(request.job_type)
    if job_type is None:
        bad.add("job_type", "must be a known job type")
    if not 1 <= request.max_jobs <= MAX_BATCH:
        bad.add("max_jobs", f"must be between 1 and {MAX_BATCH}")
    namespaces = tuple(
        bad.check(n, validate_namespace, n, f"namespaces[{i}]")
        for i, n in enumerate(request.namespaces)
    )
    holder = _holder(bad, request.holder) if request.HasField("holder") else None
    wait_s = _wait_seconds(bad, request.wait)
    bad.raise_if_any()
    assert job_type is not None
    return LeaseInput(job_type, request.max_jobs, namespaces, holder, wait_s)


def _holder(bad: Violations, message: pb.LeaseHolder) -> LeaseHolder:
    for name, value, limit in (
        ("worker_name", message.worker_name, jobs.MAX_WORKER_NAME_CHARS),
        ("instance_id", message.instance_id, jobs.MAX_INSTANCE_ID_CHARS),
    ):
        if not 1 <= len(value) <= limit:
            bad.add(f"holder.{name}", f"must be 1..{limit} characters")
    return LeaseHolder(message.worker_name, message.instance_id)


def _wait_seconds(bad: Violations, wait: Duration) -> float:
    """The long poll's wait; a Duration whose parts disagree in sign is invalid."""
    if (wait.seconds < 0 < wait.nanos) or (wait.nanos < 0 < wait.seconds):
        bad.add("wait", "seconds and nanos must have the same sign")
        return 0.0
    if not -999_999_999 <= wait.nanos <= 999_999_999:
        bad.add("wait", "nanos must be within ±999,999,999")
        return 0.0
    seconds: float = wait.seconds + wait.nanos / 1e9
    if not 0 <= seconds <= jobs.MAX_LEASE_WAIT_S:
        bad.add("wait", f"must be between 0 and {jobs.MAX_LEASE_WAIT_S:g} s")
    return seconds


def prior_instance(request: pb.ReleasePriorInstanceLeasesRequest) -> LeaseHolder:
    bad = Violations()
    holder = _holder(bad, request.holder)
    bad.raise_if_any()
    return holder


def leases(request: pb.RenewLeasesRequest | pb.ReleaseJobsRequest) -> tuple[Lease, ...]:
    bad = Violations()
    _batch(bad, len(request.leases), "leases")
    bad.raise_if_any()
    return tuple((x.job_id, x.lease_token) for x in request.leases)


def fail(request: pb.FailJobsRequest) -> tuple[tuple[str, str, str], ...]:
    bad = Violations()
    _batch(bad, len(request.failures), "failures")
    bad.raise_if_any()
    return tuple((f.lease.job_id, f.lease.lease_token, f.error) for f in request.failures)


def stale_timeout_ms(request: pb.ReleaseStaleLeasesRequest) -> int:
    bad = Violations()
    if request.lease_timeout_ms < 0:
        bad.add("lease_timeout_ms", "must not be negative")
    bad.raise_if_any()
    return request.lease_timeout_ms


def _batch(bad: Violations, size: int, field: str) -> None:
    if size > MAX_BATCH:
        bad.add(field, f"at most {MAX_BATCH} per call")


def lease_fields(bad: Violations, message: pb.JobLease) -> Lease:
    if not message.job_id:
        bad.add("lease.job_id", "required")
    if not message.lease_token:
        bad.add("lease.lease_token", "required")
    return message.job_id, message.lease_token


# ---- embed results -----------------------------------------------------------------


def complete_embeds(request: pb.CompleteEmbedJobsRequest) -> EmbedCompletion:
    bad = Violations()
    if not request.model:
        bad.add("model", "required")
    _batch(bad, len(request.results), "results")
    results = []
    for i, r in enumerate(request.results):
        at = f"results[{i}]"
        result = EmbedResult(
            r.lease.job_id, r.lease.lease_token, r.content_hash, list(r.vector), list(r.parts)
        )
        blob = bad.check(b"", mutations.normalized_vector_bytes, result.vector, f"{at}.vector")
        parts = bad.check(
            None, mutations.normalized_parts, result.parts, len(result.vector), f"{at}.parts"
        )
        results.append((result, mutations.SuppliedVector(request.model, blob, parts)))
    dimensions = {len(r.vector) for r in request.results}
    if len(dimensions) > 1:
        bad.add("results", "all vectors of one call must have the same dimensions")
    bad.raise_if_any()
    return EmbedCompletion(request.model, tuple(results), next(iter(dimensions), None))


# ---- extract results ---------------------------------------------------------------


def complete_extract(request: pb.CompleteExtractJobRequest) -> CheckedExtract:
    """Everything is validated before anything is written; one bad item fails all."""
    bad = Violations()
    job_id, lease_token = lease_fields(bad, request.lease)
    model = request.extraction_model
    if not model.strip():
        bad.add("extraction_model", "required")
    elif len(model) > extraction_writes.MAX_MODEL_CHARS:
        bad.add("extraction_model", f"at most {extraction_writes.MAX_MODEL_CHARS} characters")
    if len(request.proposals) > extraction_writes.MAX_PROPOSALS:
        bad.add("proposals", f"at most {extraction_writes.MAX_PROPOSALS} proposals")
    if len(request.warnings) > extraction_writes.MAX_WARNINGS:
        bad.add("warnings", f"at most {extraction_writes.MAX_WARNINGS} warnings")
    checked = tuple(
        _proposal(bad, p, f"proposals[{i}]", request.embedding_model)
        for i, p in enumerate(request.proposals)
    )
    proposals = tuple(c.proposal for c in checked)
    if any(p.vector for p in proposals) and not request.embedding_model:
        bad.add("embedding_model", "required when a proposal carries a vector")
    if len({len(p.vector) for p in proposals if p.vector}) > 1:
        bad.add("proposals", "all vectors of one call must have the same dimensions")
    named = _named(bad, request.named_entities)
    triples = _triples(bad, request.entities, "entities")
    bad.raise_if_any()
    completion = ExtractCompletion(
        job_id=job_id,
        lease_token=lease_token,
        extraction_model=model,
        proposals=proposals,
        entities=triples,
        warnings=tuple(request.warnings),
        embedding_model=request.embedding_model,
        named=named,
    )
    return CheckedExtract(completion, checked)


def _proposal(
    bad: Violations, message: pb.Proposal, field: str, embedding_model: str
) -> CheckedProposal:
    action = _ACTION_NAMES.get(message.action, "")
    if action not in extraction_writes.ACTIONS:
        bad.add(f"{field}.action", "must be ADD, UPDATE, DELETE or NONE")
    proposal = Proposal(
        action=action,
        fact=_fact(bad, message.fact, f"{field}.fact"),
        target_id=message.target_id,
        confidence=message.confidence,
        reason=message.reason,
        candidate_ids=tuple(message.candidate_ids),
        vector=tuple(message.vector),
    )
    _unit(bad, proposal.confidence, f"{field}.confidence")
    if proposal.action in ("update", "delete") and not proposal.target_id:
        bad.add(f"{field}.target_id", "required for UPDATE and DELETE")
    if proposal.target_id:
        bad.check(None, validate_id, proposal.target_id, f"{field}.target_id")
    if len(proposal.candidate_ids) > extraction_writes.MAX_CANDIDATES:
        bad.add(f"{field}.candidate_ids", f"at most {extraction_writes.MAX_CANDIDATES} ids")
    bad.check(None, validate_ids, proposal.candidate_ids, f"{field}.candidate_ids")
    vector = None
    if proposal.vector and embedding_model:
        blob = bad.check(b"", mutations.normalized_vector_bytes, proposal.vector, f"{field}.vector")
        vector = mutations.SuppliedVector(embedding_model, blob)
    return CheckedProposal(proposal, normalize_content(proposal.fact.content), vector)


# ---- what extraction and consolidation both hand in --------------------------------


def _unit(bad: Violations, value: float, field: str) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        bad.add(field, "must be a finite number between 0 and 1")


def _fact(bad: Violations, message: pb.ProposedFact, field: str) -> Fact:
    valid_until = bad.check(
        None,
        text_from_timestamp,
        message.valid_until,
        message.HasField("valid_until"),
        f"{field}.valid_until",
    )
    fact = Fact(
        message.content,
        message.type,
        message.confidence,
        importance=message.importance if message.HasField("importance") else None,
        temporal_class=temporal_from_proto(message.temporal_class),
        valid_until=valid_until,
        categories=tuple(message.categories),
    )
    if len(fact.content) > MAX_FACT_CHARS:
        bad.add(f"{field}.content", f"at most {MAX_FACT_CHARS} characters")
    _unit(bad, fact.confidence, f"{field}.confidence")
    if fact.importance is not None:
        _unit(bad, fact.importance, f"{field}.importance")
    if len(fact.categories) > MAX_CATEGORIES:
        bad.add(f"{field}.categories", f"at most {MAX_CATEGORIES}")
    if any(not c.strip() or len(c) > MAX_CATEGORY_CHARS for c in fact.categories):
        bad.add(f"{field}.categories", f"each 1 to {MAX_CATEGORY_CHARS} characters")
    return fact


def _triples(
    bad: Violations, messages: Sequence[pb.EntityTriple], field: str
) -> tuple[Triple, ...]:
    if len(messages) > MAX_ENTITIES:
        bad.add(field, f"at most {MAX_ENTITIES} entity triples")
    triples = tuple(Triple(e.source, e.relationship, e.target, e.confidence) for e in messages)
    for index, triple in enumerate(triples):
        at = f"{field}[{index}]"
        for name in ("source", "relationship", "target"):
            value = getattr(triple, name)
            if not value.strip():
                bad.add(f"{at}.{name}", "required")
            elif len(value) > MAX_ENTITY_CHARS:
                bad.add(f"{at}.{name}", f"at most {MAX_ENTITY_CHARS} characters")
        _unit(bad, triple.confidence, f"{at}.confidence")
    return triples


def _named(bad: Violations, messages: Sequence[pb.NamedEntity]) -> tuple[NamedEntity, ...]:
    if len(messages) > MAX_NAMED_ENTITIES:
        bad.add("named_entities", f"at most {MAX_NAMED_ENTITIES} entities")
    named = tuple(
        NamedEntity(n.name, n.entity_type or DEFAULT_ENTITY_TYPE, tuple(n.aliases))
        for n in messages
    )
    for index, entity in enumerate(named):
        field = f"named_entities[{index}]"
        if not entity.name.strip():
            bad.add(f"{field}.name", "required")
        elif len(entity.name) > MAX_ENTITY_CHARS:
            bad.add(f"{field}.name", f"at most {MAX_ENTITY_CHARS} characters")
        if entity.type not in ENTITY_TYPES:
            bad.add(f"{field}.entity_type", f"one of {', '.join(ENTITY_TYPES)}")
        if len(entity.aliases) > MAX_ALIASES:
            bad.add(f"{field}.aliases", f"at most {MAX_ALIASES}")
        if any(not a.strip() or len(a) > MAX_ENTITY_CHARS for a in entity.aliases):
            bad.add(f"{field}.aliases", f"each 1 to {MAX_ENTITY_CHARS} characters")
    return named


# ---- session summaries and consolidation -------------------------------------------


def complete_summary(request: pb.CompleteSummarizeJobRequest) -> SummaryCompletion:
    bad = Violations()
    job_id, lease_token = request.lease.job_id, request.lease.lease_token
    if not normalize_content(request.summary).storage:
        bad.add("summary", "required")
    elif len(request.summary) > sessions.MAX_SUMMARY_CHARS:
        bad.add("summary", f"must be at most {sessions.MAX_SUMMARY_CHARS} characters")
    if not request.model:
        bad.add("model", "required")
    bad.raise_if_any()
    return SummaryCompletion(job_id, lease_token, request.summary, request.model)


def complete_consolidate(request: pb.CompleteConsolidateJobRequest) -> ConsolidateCompletion:
    """Everything is validated before anything is written; one bad item fails all."""
    bad = Violations()
    job_id, lease_token = lease_fields(bad, request.lease)
    if not request.model.strip():
        bad.add("model", "required")
    elif len(request.model) > consolidation.MAX_MODEL_CHARS:
        bad.add("model", f"at most {consolidation.MAX_MODEL_CHARS} characters")
    for name, count, limit in (
        ("facts", len(request.facts), consolidation.MAX_FACTS),
        ("causal_links", len(request.causal_links), MAX_CAUSAL_LINKS),
        ("warnings", len(request.warnings), consolidation.MAX_WARNINGS),
    ):
        if count > limit:
            bad.add(name, f"at most {limit}")
    facts = []
    for index, item in enumerate(request.facts):
        at = f"facts[{index}]"
        if not item.fact.content.strip():
            bad.add(f"{at}.fact.content", "required")
        fact = _fact(bad, item.fact, f"{at}.fact")
        sources = tuple(item.source_memory_ids)
        if not 1 <= len(sources) <= consolidation.MAX_SOURCES:
            bad.add(f"{at}.source_memory_ids", f"1 to {consolidation.MAX_SOURCES} ids")
        for number, source in enumerate(sources):
            bad.check(None, validate_id, source, f"{at}.source_memory_ids[{number}]")
        facts.append(SessionFact(fact, sources, _triples(bad, item.entities, f"{at}.entities")))
    causal = []
    for index, link in enumerate(request.causal_links):
        at = f"causal_links[{index}]"
        cause, effect = link.cause_memory_id, link.effect_memory_id
        bad.check(None, validate_id, cause, f"{at}.cause_memory_id")
        bad.check(None, validate_id, effect, f"{at}.effect_memory_id")
        if cause and cause == effect:
            bad.add(at, "a memory cannot cause itself")
        causal.append((cause, effect))
    named = _named(bad, request.named_entities)
    bad.raise_if_any()
    return ConsolidateCompletion(
        job_id=job_id,
        lease_token=lease_token,
        model=request.model,
        facts=tuple(facts),
        causal=tuple(causal),
        warnings=tuple(request.warnings),
        named=named,
    )
