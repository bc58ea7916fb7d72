"""Stored vectors belong to one namespace (issue 11, item 2).

Two attacks on vectors shared by content hash, each a test here:
- the existence oracle: a tenant remembers a guess of another tenant's text and
  sees, through Recall's vector rank or GetQueueStats' counts, whether the guess
  was indexed at once (another namespace held the text) or queued for embedding;
- poisoning: a tenant writes a crafted vector for another tenant's text (its own
  embed job, a forged content hash, a document chunk, an extracted fact) and so
  moves where the other tenant's memory ranks.
And the migration that splits an existing database's shared vectors by namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engram.common.v1 import job_pb2
from engram.store.internal.v1 import documents_pb2 as docs_pb
from engram.store.internal.v1 import documents_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from extract_write_helpers import ADD, complete, extract_job, proposal
from http_fakes import VectorBook, unit_axis
from recall_helpers import DIM, MODEL, Stack, count, vec
from services.common.clock import now_text
from services.common.normalize import normalize_content
from services.common.vectors import normalized_f32
from services.storage.db import open_read_write
from services.storage.sqlite_migrations import MIGRATIONS, apply_migrations
from store_helpers import rows, scalar

A, B = "tenant-a", "tenant-b"
SECRET = "zebra door code is 4471"
WRONG_GUESS = "zebra door code is 1234"
# Recall queries: "zebra" embeds to QUERY_VECTOR; "quokka" to an axis no memory
# of A points along, so A's memories have cosine 0 with it.
UNRELATED = "quokka"
UNRELATED_VECTOR = unit_axis(DIM, 5)
A_COSINE = 0.657


def pending_embeds(stack: Stack) -> int:
    return count(stack.stats(), job_pb2.JOB_TYPE_EMBED, job_pb2.JOB_STATUS_PENDING)


def vector_hits(stack: Stack, query: str, namespace: str) -> dict[str, Any]:
    """memory id -> its vector channel hit (rank 0 when the channel missed it)."""
    return {r.memory.id: r.vector for r in stack.recall(query, namespace=namespace).results}


@pytest.fixture
def stack(vector_stack: Callable[..., tuple[Stack, VectorBook]]) -> Stack:
    # The pipeline on, so that Remember queues the extract jobs one attack uses.
    built, book = vector_stack({"memory.pipelineV2.enabled": True})
    book.vectors[UNRELATED] = UNRELATED_VECTOR
    return built


# ---- the existence oracle ---------------------------------------------------------


def test_a_guess_of_another_namespaces_text_is_queued_and_unindexed_like_a_wrong_one(
    stack: Stack,
) -> None:
    stack.remember(SECRET, namespace=A)
    stack.embed_pending({SECRET: vec(A_COSINE)}, namespaces=[A])
    assert pending_embeds(stack) == 0
    indexed = stack.stats().indexed_memory_count

    right = stack.remember(SECRET, namespace=B)
    after_right = pending_embeds(stack)
    wrong = stack.remember(WRONG_GUESS, namespace=B)
    after_wrong = pending_embeds(stack)

    # Both guesses wait for an embed job; neither is in the vector index.
    assert (after_right, after_wrong - after_right) == (1, 1)
    assert stack.stats().indexed_memory_count == indexed
    hits = vector_hits(stack, "zebra", B)
    assert {memory_id: hit.rank for memory_id, hit in hits.items()} == {right.id: 0, wrong.id: 0}


def test_a_guess_of_text_another_namespace_deleted_is_queued_and_unindexed(
    stack: Stack,
) -> None:
    gone = stack.remember(SECRET, namespace=A)
    stack.embed_pending({SECRET: vec(A_COSINE)}, namespaces=[A])
    stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(namespace=A, id=gone.id, reason="done"))
    # The tombstone's vector is still stored (retention has not purged it).
    assert scalar(Path(stack.config.storage.path), "SELECT count(*) FROM embeddings") == 1
    indexed = stack.stats().indexed_memory_count

    right = stack.remember(SECRET, namespace=B)
    after_right = pending_embeds(stack)
    wrong = stack.remember(WRONG_GUESS, namespace=B)

    assert (after_right, pending_embeds(stack) - after_right) == (1, 1)
    assert stack.stats().indexed_memory_count == indexed
    hits = vector_hits(stack, "zebra", B)
    assert {memory_id: hit.rank for memory_id, hit in hits.items()} == {right.id: 0, wrong.id: 0}


def test_text_embedded_before_in_the_same_namespace_is_indexed_at_once(stack: Stack) -> None:
    """The shortcut stays within a namespace: its owner knows its own texts."""
    first = stack.remember(SECRET, namespace=A)
    stack.embed_pending({SECRET: vec(A_COSINE)}, namespaces=[A])
    stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(namespace=A, id=first.id, reason="done"))
    again = stack.remember(SECRET, namespace=A)
    assert pending_embeds(stack) == 0
    assert vector_hits(stack, "zebra", A)[again.id].rank == 1


# ---- poisoning --------------------------------------------------------------------

CRAFTED = UNRELATED_VECTOR  # what the attacker wants A's memory to mean


# Each attack may prepare before A's memory is embedded, then runs; it returns
# the attacker's memory that now carries the crafted vector (None when the
# attack leaves it unindexed).


def _nothing(stack: Stack) -> Any:
    return None


def _remember_the_text_first(stack: Stack) -> Any:
    """B's own memory with A's text, and so its own embed job (queued before A's
    vector exists, so even a shared-vector store would have queued it)."""
    return stack.remember(SECRET, namespace=B)


def _via_own_embed_job(stack: Stack, victim: Any, mine: Any) -> str | None:
    assert stack.embed_pending(lambda _text: CRAFTED, namespaces=[B]) == 1
    return str(mine.id)


def _via_forged_content_hash(stack: Stack, victim: Any, _prepared: Any) -> str | None:
    """B completes its own memory's embed job, naming the victim's content hash."""
    mine = stack.remember("zebra notes of tenant b", namespace=B)
    [job] = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=10, namespaces=[B])
    ).jobs
    done = stack.jobs.CompleteEmbedJobs(
        jq.CompleteEmbedJobsRequest(
            model=MODEL,
            results=[
                jq.EmbedResult(
                    lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
                    content_hash=victim.content_hash,
                    vector=CRAFTED,
                )
            ],
        )
    )
    assert list(done.outcomes) == [jq.LEASE_OUTCOME_OK]
    assert mine.id  # its content differs from the hash named: it stays unindexed
    return None


def _via_document_chunk(stack: Stack, victim: Any, _prepared: Any) -> str | None:
    documents = documents_pb2_grpc.DocumentStoreServiceStub(stack.jobs_channel)
    documents.CreateDocument(docs_pb.CreateDocumentRequest(namespace=B, content=SECRET))
    [job] = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1, namespaces=[B])
    ).jobs
    written = documents.WriteDocumentChunk(
        docs_pb.WriteDocumentChunkRequest(
            lease=jq.JobLease(job_id=job.id, lease_token=job.lease_token),
            chunk_index=0,
            content=SECRET,
            vector=CRAFTED,
            embedding_model=MODEL,
        )
    )
    assert (written.chunk_outcome, written.vector_stored) == (
        docs_pb.CHUNK_OUTCOME_CREATED,
        True,
    )
    return str(written.memory_id)


def _via_extracted_fact(stack: Stack, victim: Any, _prepared: Any) -> str | None:
    source = stack.remember("tenant b heard something about a zebra", namespace=B)
    response = complete(
        stack,
        extract_job(stack, source),
        [proposal(ADD, SECRET, vector=CRAFTED)],
        embedding_model=MODEL,
    )
    [result] = response.results
    assert result.outcome == jq.PROPOSAL_OUTCOME_CREATED
    return str(result.memory_id)


@pytest.mark.parametrize(
    ("prepare", "attack"),
    [
        (_remember_the_text_first, _via_own_embed_job),
        (_nothing, _via_forged_content_hash),
        (_nothing, _via_document_chunk),
        (_nothing, _via_extracted_fact),
    ],
    ids=["own-embed-job", "forged-content-hash", "document-chunk", "extracted-fact"],
)
def test_no_vector_another_namespace_writes_moves_a_memory(
    stack: Stack,
    prepare: Callable[[Stack], Any],
    attack: Callable[[Stack, Any, Any], str | None],
) -> None:
    prepared = prepare(stack)
    victim = stack.remember(SECRET, namespace=A)
    unrelated = stack.remember("zebra stripes are unique", namespace=A)
    stack.embed_pending({SECRET: vec(A_COSINE), unrelated.content: vec(0.3)}, namespaces=[A])
    before = vector_hits(stack, "zebra", A)[victim.id]
    assert (before.rank, before.score) == (1, pytest.approx(A_COSINE, abs=1e-4))

    attacker_memory = attack(stack, victim, prepared)

    after = vector_hits(stack, "zebra", A)[victim.id]
    assert (after.rank, after.score) == (1, pytest.approx(A_COSINE, abs=1e-4))
    for hit_id, hit in vector_hits(stack, UNRELATED, A).items():
        assert hit.score == pytest.approx(0.0, abs=1e-4), hit_id
    # The crafted vector was taken, for the attacker's own namespace only.
    if attacker_memory is not None:
        mine = vector_hits(stack, UNRELATED, B)[attacker_memory]
        assert (mine.rank, mine.score) == (1, pytest.approx(1.0, abs=1e-4))


# ---- migrating a database whose vectors were shared ---------------------------------


def _shared_vector_database(path: Path) -> dict[str, bytes]:
    """A file at the schema before `embeddings_by_namespace`, as the old store left
    it: one vector per content hash, used by both namespaces."""
    names = [name for name, _ in MIGRATIONS]
    conn = open_read_write(path)
    apply_migrations(conn, MIGRATIONS[: names.index("embeddings_by_namespace")])
    vectors = {
        SECRET: normalized_f32(vec(A_COSINE)),
        WRONG_GUESS: normalized_f32(vec(0.2)),
        "text no memory holds any more": normalized_f32(vec(0.9)),
    }
    at = now_text()

    def memory(memory_id: str, namespace: str, text: str, deleted: bool = False) -> None:
        content = normalize_content(text)
        conn.execute(
            "INSERT INTO memories (id, namespace, content, normalized_content, content_hash, "
            "type, importance, version, is_deleted, deleted_at, created_at, updated_at, "
            "event_time) VALUES (?, ?, ?, ?, ?, 'fact', 0.5, 1, ?, ?, ?, ?, ?)",
            (
                memory_id,
                namespace,
                content.storage,
                content.normalized,
                content.content_hash,
                int(deleted),
                at if deleted else None,
                at,
                at,
                at,
            ),
        )

    conn.execute("BEGIN")
    memory("0190a000-0000-7000-8000-00000000000a", A, SECRET)
    memory("0190a000-0000-7000-8000-00000000000b", B, SECRET)
    memory("0190a000-0000-7000-8000-00000000000c", A, WRONG_GUESS, deleted=True)
    for text, blob in vectors.items():
        conn.execute(
            "INSERT INTO embeddings (content_hash, model, dimensions, vector, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (normalize_content(text).content_hash, MODEL, DIM, blob, at),
        )
    conn.execute(
        "INSERT INTO vector_index (id, model, dimensions, updated_at) VALUES (1, ?, ?, ?)",
        (MODEL, DIM, at),
    )
    conn.execute(
        "INSERT INTO memory_vectors (memory_rowid, namespace, bits) "
        "SELECT m.rowid, m.namespace, vec_quantize_binary(vec_f32(e.vector)) FROM memories m "
        "JOIN embeddings e ON e.content_hash = m.content_hash WHERE m.is_deleted = 0"
    )
    conn.execute("COMMIT")
    conn.close()
    return {text: blob for text, blob in vectors.items() if blob is not None}


@pytest.mark.sqlite_only("an old SQLite file's migration; Postgres starts at the newest schema")
def test_the_migration_gives_each_namespace_its_copy_of_a_shared_vector(
    tmp_path: Path, vector_stack: Callable[..., tuple[Stack, VectorBook]]
) -> None:
    path = tmp_path / "engram.db"
    vectors = _shared_vector_database(path)
    stack, _ = vector_stack()  # the store migrates the file as it starts

    stored = {
        (r[0], r[1]): r[2]
        for r in rows(path, "SELECT namespace, content_hash, vector FROM embeddings")
    }
    secret, guess = (normalize_content(t).content_hash for t in (SECRET, WRONG_GUESS))
    assert stored == {
        (A, secret): vectors[SECRET],
        (B, secret): vectors[SECRET],
        (A, guess): vectors[WRONG_GUESS],  # a tombstone's, kept for its recovery
    }
    assert pending_embeds(stack) == 0
    for namespace in (A, B):
        [hit] = vector_hits(stack, "zebra", namespace).values()
        assert (hit.rank, hit.score) == (1, pytest.approx(A_COSINE, abs=1e-4)), namespace

    recovered = stack.store.RecoverMemory(
        store_pb2.RecoverMemoryRequest(
            namespace=A, id="0190a000-0000-7000-8000-00000000000c", reason="undo"
        )
    ).memory
    assert pending_embeds(stack) == 0
    assert vector_hits(stack, "zebra", A)[recovered.id].rank == 2
