"""Helpers for the CompleteExtractJob tests: lease a memory's extract job,
build proposals tersely, and read what the store wrote (read-only)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import backend_db
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from recall_helpers import MODEL, Stack
from store_helpers import rows

ADD, UPDATE, DELETE, NONE = (
    jq.PROPOSAL_ACTION_ADD,
    jq.PROPOSAL_ACTION_UPDATE,
    jq.PROPOSAL_ACTION_DELETE,
    jq.PROPOSAL_ACTION_NONE,
)
OUTCOME = jq.ProposalOutcome
# The pipeline on: Remember queues an extract job only then.
BASE = {
    "providers.embedding.kind": "ollama",
    "providers.embedding.model": MODEL,
    "memory.pipelineV2.enabled": True,
}
LLM = "scripted-llm"


def extract_job(stack: Stack, memory: Any) -> jq.Job:
    """Lease the extract job of `memory`. Leasing takes every due extract job of
    the namespace, so the other leased jobs are kept on the stack for later calls."""
    held: dict[str, jq.Job] = stack.__dict__.setdefault("_extract_jobs", {})
    if memory.id not in held:
        jobs = stack.jobs.LeaseJobs(
            jq.LeaseJobsRequest(
                job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=500, namespaces=[memory.namespace]
            )
        ).jobs
        held.update({j.memory_id: j for j in jobs})
    assert memory.id in held, f"no extract job leased for {memory.id}"
    return held.pop(memory.id)


def lease_of(job: jq.Job, token: str | None = None) -> jq.JobLease:
    return jq.JobLease(job_id=job.id, lease_token=job.lease_token if token is None else token)


def proposal(
    action: Any,
    content: str,
    *,
    confidence: float = 0.9,
    fact_confidence: float = 0.9,
    fact_type: str = "fact",
    target: Any = None,
    candidates: list[Any] | None = None,
    vector: list[float] | None = None,
    reason: str = "scripted",
) -> jq.Proposal:
    """A proposal; `target` and `candidates` may be memories or ids. A target is
    among the candidates unless `candidates` says otherwise."""

    def id_of(x: Any) -> str:
        return x if isinstance(x, str) else x.id

    target_id = "" if target is None else id_of(target)
    if candidates is None:
        candidates = [target_id] if target_id else []
    return jq.Proposal(
        action=action,
        fact=jq.ProposedFact(content=content, type=fact_type, confidence=fact_confidence),
        target_id=target_id,
        confidence=confidence,
        reason=reason,
        candidate_ids=[id_of(c) for c in candidates],
        vector=vector or [],
    )


def complete(
    stack: Stack,
    job: jq.Job,
    proposals: list[jq.Proposal],
    *,
    entities: list[jq.EntityTriple] | None = None,
    token: str | None = None,
    **fields: Any,
) -> jq.CompleteExtractJobResponse:
    return stack.jobs.CompleteExtractJob(
        jq.CompleteExtractJobRequest(
            lease=lease_of(job, token),
            extraction_model=fields.pop("extraction_model", LLM),
            proposals=proposals,
            entities=entities or [],
            **fields,
        )
    )


def outcomes(response: jq.CompleteExtractJobResponse) -> list[tuple[int, str]]:
    return [(r.outcome, r.reason) for r in response.results]


def db(stack: Stack) -> Path:
    return Path(stack.config.storage.path)


def memory_row(stack: Stack, memory_id: str) -> Any:
    found = rows(db(stack), "SELECT * FROM memories WHERE id = ?", memory_id)
    return found[0] if found else None


def audit(stack: Stack, memory: Any) -> list[dict[str, Any]]:
    """The pipeline audit rows on a source memory, through ListMemoryHistory."""
    events = stack.store.ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(namespace=memory.namespace, memory_id=memory.id)
    ).events
    return [
        {**dict(e.metadata), "_reason": e.reason, "_actor": e.actor}
        for e in events
        if e.event_type == store_pb2.HISTORY_EVENT_TYPE_NONE
    ]


def jobs_of(stack: Stack, memory_id: str) -> list[tuple[str, str]]:
    return [
        (r[0], r[1])
        for r in rows(
            db(stack),
            "SELECT job_type, status FROM memory_jobs WHERE memory_id = ? ORDER BY created_at",
            memory_id,
        )
    ]


def job_result(stack: Stack, job: jq.Job) -> tuple[str, dict[str, Any]]:
    status, result = rows(db(stack), "SELECT status, result FROM memory_jobs WHERE id = ?", job.id)[
        0
    ]
    return status, json.loads(result) if result else {}


def counts(stack: Stack) -> dict[str, int]:
    """Rows of every table an extract completion may touch."""
    tables = (
        "memories",
        "memory_history",
        "memory_jobs",
        "memory_links",
        "embeddings",
        "memory_vectors",
        "entities",
        "relations",
        "memory_entity_mentions",
        "entity_aliases",
    )
    counts = {t: rows(db(stack), f"SELECT count(*) FROM {t}")[0][0] for t in tables}
    return {**counts, "memories_fts": backend_db.fts_count(db(stack))}


def job_states(stack: Stack) -> list[tuple[str, str, int]]:
    return [
        (r[0], r[1], r[2])
        for r in rows(db(stack), "SELECT id, status, attempts FROM memory_jobs ORDER BY id")
    ]


def requeue_extract(stack: Stack, memory: Any) -> None:
    """Queue another extract job for a memory, as a repair pass re-queueing it would
    (the test writes the row into the real database; the store picks it up)."""
    backend_db.execute(
        db(stack),
        "INSERT INTO memory_jobs (id, namespace, memory_id, job_type, max_attempts, "
        "available_at, created_at, updated_at) VALUES (?, ?, ?, 'extract', 3, '0', '0', '0')",
        uuid.uuid4().hex,
        memory.namespace,
        memory.id,
    )


def write_directly(stack: Stack, statement: str) -> None:
    """Run one statement on the real database, outside the store (to inject a failure)."""
    backend_db.execute(db(stack), statement)


def link(stack: Stack, memory: Any, *triples: tuple[str, str, str]) -> None:
    """Record entity triples for a memory through its extract job."""
    response = complete(
        stack,
        extract_job(stack, memory),
        [],
        entities=[
            jq.EntityTriple(source=s, relationship=r, target=t, confidence=0.9)
            for s, r, t in triples
        ],
    )
    assert response.outcome == jq.LEASE_OUTCOME_OK and response.graph_error == ""
