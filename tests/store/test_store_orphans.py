"""Every way a memory leaves the store leaves nothing that points at it: no
link, entity mention, chunk row, vector index row, full-text entry or job (and
no entity that nothing mentions); a purge also drops the stored vectors of its
content that no other memory of the namespace holds. Checked through the store
diagnostics' `orphans` counts and, independently, by reading the file.

Memories get their links, mentions, chunks and vectors through the gRPC APIs
(CompleteExtractJob, WriteDocumentChunk, CompleteEmbedJobs); only the tombstone
age is moved in the file (tests cannot wait 30 days).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

import backend_db
from admin_helpers import DIM, MODEL, AdminStore, admin_store
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import admin_pb2 as pb
from engram.store.internal.v1 import documents_pb2 as docs_pb
from engram.store.internal.v1 import documents_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2

ADD, UPDATE, DELETE = jq.PROPOSAL_ACTION_ADD, jq.PROPOSAL_ACTION_UPDATE, jq.PROPOSAL_ACTION_DELETE
EXECUTE = store_pb2.FORGET_MODE_EXECUTE
TABLES = (
    "memory_links",
    "entity_mentions",
    "entities",
    "document_chunks",
    "vector_index",
    "fts_entries",
    "jobs",
)
NONE_LEFT = dict.fromkeys(TABLES, 0)
VECTOR = [1.0] + [0.5] * (DIM - 1)


@pytest.fixture
def st(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(
        start_store_server,
        make_config,
        **{
            "memory.pipelineV2.allowUpdateDelete": True,
            "memory.pipelineV2.graphEnabled": True,
        },
    )


# ---- reading the orphans -------------------------------------------------------------


def reported(st: AdminStore) -> dict[str, int]:
    orphans = st.admin.GetStoreDiagnostics(pb.GetStoreDiagnosticsRequest()).orphans
    return {table: getattr(orphans, table) for table in TABLES}


def in_file(st: AdminStore) -> dict[str, int]:
    """The same counts, written independently of the store's own query."""
    gone = "NOT IN (SELECT id FROM memories)"
    return {
        "memory_links": st.scalar(
            f"SELECT count(*) FROM memory_links WHERE from_memory_id {gone} OR to_memory_id {gone}"
        ),
        "entity_mentions": st.scalar(
            f"SELECT count(*) FROM memory_entity_mentions WHERE memory_id {gone}"
        ),
        "entities": st.scalar(
            "SELECT count(*) FROM entities "
            "WHERE id NOT IN (SELECT entity_id FROM memory_entity_mentions)"
        ),
        "document_chunks": st.scalar(
            f"SELECT count(*) FROM document_memories WHERE memory_id {gone}"
        ),
        "vector_index": st.scalar(
            "SELECT count(*) FROM memory_vectors "
            "WHERE memory_rowid NOT IN (SELECT rowid FROM memories)"
        ),
        "fts_entries": st.scalar(backend_db.FTS_ORPHANS[st.dialect.name]),
        "jobs": st.scalar(
            f"SELECT count(*) FROM memory_jobs WHERE memory_id IS NOT NULL AND memory_id {gone}"
        ),
    }


def assert_no_orphans(st: AdminStore) -> None:
    assert in_file(st) == NONE_LEFT
    assert reported(st) == NONE_LEFT


def gone(st: AdminStore, memory_id: str) -> bool:
    return st.scalar("SELECT count(*) FROM memories WHERE id = ?", memory_id) == 0


# ---- building memories with everything that can point at them ------------------------


def extract_jobs(st: AdminStore) -> dict[str, jq.Job]:
    jobs = st.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EXTRACT, max_jobs=500)
    ).jobs
    return {job.memory_id: job for job in jobs}


def proposal(action: Any, content: str, target: str = "", vector: Any = None) -> jq.Proposal:
    return jq.Proposal(
        action=action,
        fact=jq.ProposedFact(content=content, type="fact", confidence=0.95),
        target_id=target,
        confidence=0.95,
        reason="test",
        candidate_ids=[target] if target else [],
        vector=vector or [],
    )


def complete_extract(
    st: AdminStore, job: jq.Job, proposals: list[jq.Proposal], *entities: tuple[str, str]
) -> jq.CompleteExtractJobResponse:
    response = st.jobs.CompleteExtractJob(
        jq.CompleteExtractJobRequest(
            lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
            extraction_model="scripted-llm",
            embedding_model=MODEL,
            proposals=proposals,
            entities=[
                jq.EntityTriple(source=a, relationship="knows", target=b, confidence=0.9)
                for a, b in entities
            ],
        )
    )
    assert response.outcome == jq.LEASE_OUTCOME_OK
    return response


def linked(st: AdminStore, content: str, fact: str, *entities: tuple[str, str]) -> tuple[str, str]:
    """A memory with a vector, entity mentions and a derived fact (a link both
    ways, the fact with its own vector); returns (memory id, fact id)."""
    memory_id = st.remember(content)
    st.embed_all()
    job = extract_jobs(st)[memory_id]
    response = complete_extract(st, job, [proposal(ADD, fact, vector=VECTOR)], *entities)
    [result] = response.results
    assert result.outcome == jq.PROPOSAL_OUTCOME_CREATED
    assert st.scalar("SELECT count(*) FROM memory_entity_mentions WHERE memory_id = ?", memory_id)
    assert st.scalar("SELECT count(*) FROM memory_vectors") >= 2
    return memory_id, result.memory_id


def modify(st: AdminStore, memory_id: str, content: str) -> None:
    st.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(
            reason="moved", patches=[store_pb2.MemoryPatch(id=memory_id, content=content)]
        )
    )


def documents(st: AdminStore) -> documents_pb2_grpc.DocumentStoreServiceStub:
    return documents_pb2_grpc.DocumentStoreServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{st.internal_port}")
    )


def sweep_expired(st: AdminStore, *memory_ids: str) -> None:
    for memory_id in memory_ids:
        st.age("memories", "deleted_at", 31, "id = ?", memory_id)
    st.admin.SweepRetention(pb.SweepRetentionRequest())


# ---- every deletion path ---------------------------------------------------------------


def test_delete_and_retention_sweep_leave_no_orphans(st: AdminStore) -> None:
    memory_id, fact_id = linked(st, "Alice met Bob in Paris", "Alice knows Bob", ("Alice", "Bob"))
    kept_id, _ = linked(st, "Carol met Bob in Rome", "Carol knows Bob", ("Carol", "Bob"))
    for doomed in (memory_id, fact_id):
        st.delete(doomed)
    assert_no_orphans(st)  # a tombstone is not gone: what points at it stays
    sweep_expired(st, memory_id, fact_id)
    assert gone(st, memory_id) and gone(st, fact_id) and not gone(st, kept_id)
    assert_no_orphans(st)
    assert st.scalar("SELECT count(*) FROM entities WHERE name = 'Bob'") == 1


def test_forced_forget_leaves_no_orphans(st: AdminStore) -> None:
    memory_id, fact_id = linked(st, "Alice met Bob in Paris", "Alice knows Bob", ("Alice", "Bob"))
    pending_id = st.remember("Dave has open jobs")  # embed and extract jobs still pending
    st.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            ids=[memory_id, pending_id], mode=EXECUTE, reason="gdpr", force=True
        )
    )
    assert gone(st, memory_id) and gone(st, pending_id) and not gone(st, fact_id)
    assert_no_orphans(st)
    st.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(ids=[fact_id], mode=EXECUTE, reason="gdpr", force=True)
    )
    assert_no_orphans(st)
    assert st.scalar("SELECT count(*) FROM embeddings") == 0


def test_a_pipeline_delete_and_retention_sweep_leave_no_orphans(st: AdminStore) -> None:
    target_id, _ = linked(st, "Alice likes green tea", "Alice drinks tea", ("Alice", "tea"))
    source_id = st.remember("Alice does not like green tea any more")
    st.embed_all()
    job = extract_jobs(st)[source_id]
    response = complete_extract(
        st, job, [proposal(DELETE, "Alice does not like green tea", target=target_id)]
    )
    assert [r.outcome for r in response.results] == [jq.PROPOSAL_OUTCOME_DELETED]
    assert_no_orphans(st)
    sweep_expired(st, target_id)
    assert gone(st, target_id)
    assert_no_orphans(st)


def test_document_chunk_memories_leave_no_orphans(st: AdminStore) -> None:
    docs = documents(st)
    document = docs.CreateDocument(
        docs_pb.CreateDocumentRequest(content="First part. Second part.", title="Notes")
    ).document
    [job] = st.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
    ).jobs
    lease = jq.JobLease(job_id=job.id, lease_token=job.lease_token)
    chunks = [
        docs.WriteDocumentChunk(
            docs_pb.WriteDocumentChunkRequest(
                lease=lease,
                chunk_index=index,
                content=text,
                vector=VECTOR,
                embedding_model=MODEL,
            )
        )
        for index, text in enumerate(["First part.", "Second part."])
    ]
    assert all(c.vector_stored for c in chunks)
    first, second = (c.memory_id for c in chunks)
    st.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(ids=[first], mode=EXECUTE, reason="gdpr", force=True)
    )
    assert_no_orphans(st)
    st.delete(second)
    sweep_expired(st, second)
    assert gone(st, first) and gone(st, second)
    assert_no_orphans(st)
    assert (
        st.scalar("SELECT count(*) FROM document_memories WHERE document_id = ?", document.id) == 0
    )
    assert st.scalar("SELECT count(*) FROM embeddings") == 0


def test_new_versions_leave_no_orphans(st: AdminStore) -> None:
    """Modify and a pipeline UPDATE (with its supersedes link, mentions and a
    supplied vector), and an embed result for content its memory no longer holds."""
    modified = st.remember("Bob lives in Berlin")
    updated = st.remember("Erin works in Oslo")
    st.embed_all()
    modify(st, modified, "Bob lives in Munich")
    assert_no_orphans(st)
    source = st.remember("Erin works in Bergen now")
    st.embed_all()
    job = extract_jobs(st)[source]
    response = complete_extract(
        st,
        job,
        [proposal(UPDATE, "Erin works in Bergen", target=updated, vector=VECTOR)],
        ("Erin", "Bergen"),
    )
    assert [r.outcome for r in response.results] == [jq.PROPOSAL_OUTCOME_UPDATED]
    assert_no_orphans(st)
    # An embed job leased before its memory changed completes after the change.
    modify(st, modified, "Bob lives in Cologne")
    [embed] = st.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=5)
    ).jobs
    assert embed.memory_id == modified
    modify(st, modified, "Bob lives in Hamburg")
    st.jobs.CompleteEmbedJobs(
        jq.CompleteEmbedJobsRequest(
            model=MODEL,
            results=[
                jq.EmbedResult(
                    lease=jq.JobLease(job_id=embed.id, lease_token=embed.lease_token),
                    content_hash=embed.content_hash,
                    vector=VECTOR,
                )
            ],
        )
    )
    assert_no_orphans(st)


def test_every_kind_of_orphan_is_counted_in_its_table(st: AdminStore) -> None:
    """The diagnostics see what a broken write path (or a hand edit) would leave."""
    memory_id, fact_id = linked(st, "Alice met Bob in Paris", "Alice knows Bob", ("Alice", "Bob"))
    docs = documents(st)
    docs.CreateDocument(docs_pb.CreateDocumentRequest(content="Alice met Bob in Paris"))
    [job] = st.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
    ).jobs
    docs.WriteDocumentChunk(
        docs_pb.WriteDocumentChunkRequest(
            lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
            chunk_index=0,
            content="Alice met Bob in Paris",
        )
    )
    st.remember("Alice met Bob in Paris", namespace="other")  # its jobs
    sqlite = not st.dialect.is_postgres
    if sqlite:  # as an old bug could have: no FTS or vector index cleanup (on Postgres
        # both go with the row: a generated column, a cascading foreign key)
        st.execute("DROP TRIGGER memories_ad")
        st.execute("DROP TRIGGER memory_vectors_purge")
    st.execute("DELETE FROM memories WHERE id = ?", memory_id)
    st.execute("DELETE FROM memories WHERE namespace = 'other'")
    st.execute(
        "INSERT INTO entities(id, namespace, name, canonical_name, mentions, created_at, "
        "updated_at) VALUES ('lonely', 'default', 'Lonely', 'lonely', 0, '', '')"
    )
    counts = reported(st)
    assert counts == in_file(st)
    assert counts == {
        # the fact's derived_from link to the memory, and the entity link from the
        # memory to the fact (both name Alice and Bob: one link per pair and type)
        "memory_links": 2,
        "entity_mentions": 2,  # Alice and Bob
        "entities": 1,
        "document_chunks": 1,
        "vector_index": 1 if sqlite else 0,
        "fts_entries": 2 if sqlite else 0,  # the memory's and the other namespace's
        "jobs": 4,  # the memory's completed embed and extract jobs, the other's pending
    }
    assert not gone(st, fact_id)
