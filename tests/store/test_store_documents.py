"""DocumentStoreService (the store's side of document ingest) through its gRPC API:
creation with its job, validation, freezing, the worker's lease-checked calls,
chunk dedup and linking, vectors, failure after the last attempt, namespaces."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import document_pb2, job_pb2
from engram.store.internal.v1 import documents_pb2 as pb
from engram.store.internal.v1 import documents_pb2_grpc, job_queue_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import wait_for
from services.storage.store.repository import LEASE_EXPIRED
from store_helpers import remember, rows, scalar

MODEL = "fake-embed"


class Docs:
    """A store with its three stubs."""

    def __init__(self, server: Any, memories: Any) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
        self.channel = channel
        self.memories = memories
        self.docs = documents_pb2_grpc.DocumentStoreServiceStub(channel)
        self.jobs = job_queue_pb2_grpc.JobQueueServiceStub(channel)

    def create(self, **fields: Any) -> document_pb2.Document:
        return self.docs.CreateDocument(pb.CreateDocumentRequest(**fields)).document

    def lease(self) -> jq.Job:
        [job] = self.jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
        ).jobs
        return job

    def write(self, job: jq.Job, index: int, content: str, **fields: Any) -> Any:
        return self.docs.WriteDocumentChunk(
            pb.WriteDocumentChunkRequest(
                lease=lease_of(job), chunk_index=index, content=content, **fields
            )
        )


def lease_of(job: jq.Job) -> jq.JobLease:
    return jq.JobLease(job_id=job.id, lease_token=job.lease_token)


@pytest.fixture
def start_docs(
    make_config: Callable[..., Any], start_store_server: Callable[..., Any]
) -> Iterator[Callable[..., Docs]]:
    opened: list[Docs] = []

    def start(**overrides: Any) -> Docs:
        settings = {
            "providers.embedding.kind": "ollama",
            "providers.embedding.model": MODEL,
            **overrides,
        }
        server, stub = start_store_server(make_config(**settings))
        docs = Docs(server, stub)
        opened.append(docs)
        return docs

    yield start
    for docs in opened:
        docs.channel.close()


def counts(db_path: Path) -> dict[str, int]:
    return {
        table: scalar(db_path, f"SELECT count(*) FROM {table}")
        for table in (
            "documents",
            "document_memories",
            "memories",
            "memory_history",
            "memory_jobs",
            "embeddings",
        )
    }


def test_a_document_is_created_queued_with_its_ingest_job(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    s = start_docs()
    document = s.create(
        namespace="team", content="Some text.", title="  Notes ", tags=["Alpha", "alpha", "b"]
    )
    assert document.status == document_pb2.DOCUMENT_STATUS_QUEUED
    assert (document.namespace, document.source_type, document.title) == ("team", "text", "Notes")
    assert list(document.tags) == ["alpha", "b"]
    assert document.HasField("create_time") and not document.HasField("complete_time")
    [job] = rows(db_path, "SELECT * FROM memory_jobs")
    assert (job["job_type"], job["document_id"], job["memory_id"]) == (
        "document_ingest",
        document.id,
        None,
    )
    assert (job["namespace"], job["max_attempts"]) == ("team", 3)
    got = s.docs.GetDocument(pb.GetDocumentRequest(namespace="team", id=document.id)).document
    assert got == document


def test_another_namespace_never_sees_the_document(start_docs: Callable[..., Docs]) -> None:
    s = start_docs()
    document = s.create(namespace="team", content="Private text.")
    for call in (
        lambda: s.docs.GetDocument(pb.GetDocumentRequest(namespace="other", id=document.id)),
        lambda: s.docs.GetDocument(pb.GetDocumentRequest(id=document.id)),
        lambda: s.docs.ListDocumentChunks(
            pb.ListDocumentChunksRequest(namespace="other", document_id=document.id)
        ),
    ):
        assert error_of(call)[0] == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "content"),
        ({"content": "text", "url": "http://example.com/"}, "content"),
        ({"content": "   \n "}, "content"),
        ({"content": "x" * 1025}, "content"),
        ({"url": "ftp://example.com/file"}, "url"),
        ({"url": "file:///etc/passwd"}, "url"),
        ({"url": "gopher://example.com:70/"}, "url"),
        ({"url": "http://example.com:99999/"}, "url"),
        ({"url": "http:///no-host"}, "url"),
        ({"url": "http://example.com/" + "a" * 2048}, "url"),
        ({"content": "text", "title": "t" * 513}, "title"),
        ({"content": "text", "tags": ["ok", " "]}, "tags[1]"),
        ({"content": "text", "tags": [f"t{i}" for i in range(32)]}, "tags"),
        ({"content": "text", "namespace": "bad namespace"}, "namespace"),
    ],
)
def test_bad_input_is_named_and_writes_nothing(
    start_docs: Callable[..., Docs], db_path: Path, fields: dict[str, Any], field: str
) -> None:
    s = start_docs(**{"memory.pipelineV2.documentMaxContentBytes": 1024})
    before = counts(db_path)
    code, reason, fields_named = error_of(lambda: s.create(**fields))
    assert (code, reason, fields_named) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        [field],
    )
    assert counts(db_path) == before


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9091/metrics", "a loopback address"),  # issue 34: the store's metrics
        ("http://[::1]:50061/", "a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
        ("http://10.1.2.3/", "a private address"),
        ("http://[fd00::1]/", "a private address"),
        ("http://0.0.0.0:50051/", "an unspecified address"),
        ("http://224.0.0.1/", "a multicast address"),
        ("http://100.64.0.1/", "a reserved address"),
    ],
)
def test_a_url_naming_an_address_documents_may_not_come_from_is_refused_and_says_why(
    start_docs: Callable[..., Docs], db_path: Path, url: str, kind: str
) -> None:
    s = start_docs()
    before = counts(db_path)
    with pytest.raises(grpc.RpcError) as raised:
        s.create(url=url)
    code, _, fields = error_of(lambda: s.create(url=url))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["url"])
    message = raised.value.details() or ""
    assert kind in message and "documents.fetch_allow" in message, message
    assert counts(db_path) == before


def test_an_allow_listed_address_is_accepted(start_docs: Callable[..., Docs]) -> None:
    s = start_docs(**{"documents.fetch_allow": ["127.0.0.1", "10.0.0.0/8"]})
    for url in ("http://127.0.0.1:8080/page", "http://10.1.2.3/wiki"):
        assert s.create(url=url).status == document_pb2.DOCUMENT_STATUS_QUEUED
    code, _, fields = error_of(lambda: s.create(url="http://127.0.0.2/"))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["url"])


def test_content_at_the_size_cap_is_accepted(start_docs: Callable[..., Docs]) -> None:
    s = start_docs(**{"memory.pipelineV2.documentMaxContentBytes": 1024})
    assert s.create(content="é" * 512).status == document_pb2.DOCUMENT_STATUS_QUEUED


def test_frozen_store_refuses_documents_and_writes_nothing(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    s = start_docs(**{"memory.pipelineV2.mutationsFrozen": True})
    before = counts(db_path)
    code, reason, _ = error_of(lambda: s.create(content="Some text."))
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert counts(db_path) == before


def test_the_worker_writes_chunks_with_dedup_links_and_vectors(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    s = start_docs()
    existing = remember(s.memories, "A passage that is already a memory.", namespace="team")
    document = s.create(namespace="team", content="ignored by the store", title="Design Notes")
    job = s.lease()
    assert (job.document_id, job.memory_id, job.namespace) == (document.id, "", "team")

    source = s.docs.ReadDocumentSource(pb.ReadDocumentSourceRequest(lease=lease_of(job)))
    assert source.outcome == jq.LEASE_OUTCOME_OK
    assert (source.raw_content, source.document.id) == ("ignored by the store", document.id)
    advanced = s.docs.AdvanceDocument(
        pb.AdvanceDocumentRequest(
            lease=lease_of(job),
            status=document_pb2.DOCUMENT_STATUS_EXTRACTING,
            title="Fetched title",
        )
    )
    assert advanced.document.status == document_pb2.DOCUMENT_STATUS_EXTRACTING
    assert advanced.document.title == "Design Notes"  # a given title is never replaced

    first = s.write(
        job, 0, "  The first   chunk. ", vector=[1.0] + [0.0] * 7, embedding_model=MODEL
    )
    assert (first.outcome, first.chunk_outcome, first.vector_stored) == (
        jq.LEASE_OUTCOME_OK,
        pb.CHUNK_OUTCOME_CREATED,
        True,
    )
    repeated = s.write(job, 1, "the first chunk")  # same normalised content
    assert (repeated.chunk_outcome, repeated.memory_id) == (
        pb.CHUNK_OUTCOME_DUPLICATE,
        first.memory_id,
    )
    linked = s.write(job, 2, "A passage that is already a memory.")
    assert (linked.chunk_outcome, linked.memory_id) == (
        pb.CHUNK_OUTCOME_LINKED,
        existing.memory.id,
    )
    other_model = s.write(job, 3, "The fourth chunk.", vector=[0.5] * 8, embedding_model="other")
    assert (other_model.chunk_outcome, other_model.vector_stored) == (
        pb.CHUNK_OUTCOME_CREATED,
        False,
    )
    done = s.docs.CompleteDocument(pb.CompleteDocumentRequest(lease=lease_of(job))).document
    assert (done.status, done.chunk_count) == (document_pb2.DOCUMENT_STATUS_DONE, 3)
    assert done.HasField("complete_time")

    memory = s.memories.GetMemory(
        store_pb2.GetMemoryRequest(namespace="team", id=first.memory_id)
    ).memory
    assert (memory.content, memory.type, memory.importance) == (
        "The first chunk.",
        "document_chunk",
        pytest.approx(0.3),
    )
    assert list(memory.tags) == ["design notes"]
    assert (memory.source_type, memory.source_id, memory.who) == (
        "document",
        document.id,
        "document-ingest",
    )
    [created] = rows(
        db_path, "SELECT event, metadata FROM memory_history WHERE memory_id = ?", first.memory_id
    )
    assert created["event"] == "created"
    assert json.loads(created["metadata"])["document_id"] == document.id
    # The vector arrived with the chunk: indexed, no embed job. The other chunk waits for one.
    assert scalar(db_path, "SELECT count(*) FROM memory_vectors") == 1
    jobs_by_memory = {
        (r["memory_id"], r["job_type"])
        for r in rows(db_path, "SELECT memory_id, job_type FROM memory_jobs")
    }
    assert (other_model.memory_id, "embed") in jobs_by_memory
    assert (first.memory_id, "embed") not in jobs_by_memory
    assert not {m for m, t in jobs_by_memory if t == "extract"} & {
        first.memory_id,
        other_model.memory_id,
    }
    job_row = rows(db_path, "SELECT status, result FROM memory_jobs WHERE id = ?", job.id)[0]
    assert (job_row["status"], json.loads(job_row["result"])) == ("completed", {"chunks": 3})

    listed = s.docs.ListDocumentChunks(
        pb.ListDocumentChunksRequest(namespace="team", document_id=document.id, page_size=2)
    )
    assert [(c.chunk_index, c.memory_id) for c in listed.chunks] == [
        (0, first.memory_id),
        (2, existing.memory.id),
    ]
    rest = s.docs.ListDocumentChunks(
        pb.ListDocumentChunksRequest(
            namespace="team", document_id=document.id, page_token=listed.next_page_token
        )
    )
    assert [(c.chunk_index, c.content) for c in rest.chunks] == [(3, "The fourth chunk.")]
    assert rest.next_page_token == ""


def test_a_page_token_only_works_for_its_document(start_docs: Callable[..., Docs]) -> None:
    s = start_docs()
    first = s.create(content="one")
    second = s.create(content="two")
    job = s.lease()
    for index in range(2):
        s.write(job, index, f"chunk {index}")
    token = s.docs.ListDocumentChunks(
        pb.ListDocumentChunksRequest(document_id=first.id, page_size=1)
    ).next_page_token
    assert token
    for bad in (token, "not a token"):
        code, _, fields = error_of(
            lambda bad=bad: s.docs.ListDocumentChunks(
                pb.ListDocumentChunksRequest(document_id=second.id, page_token=bad)
            )
        )
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["page_token"])


def test_a_lost_lease_writes_nothing_more(start_docs: Callable[..., Docs], db_path: Path) -> None:
    s = start_docs()
    s.create(content="text")
    job = s.lease()
    assert s.write(job, 0, "written while the lease is held").outcome == jq.LEASE_OUTCOME_OK
    s.jobs.ReleaseStaleLeases(jq.ReleaseStaleLeasesRequest(lease_timeout_ms=1))
    before = counts(db_path)
    status_before = scalar(db_path, "SELECT status FROM documents")
    assert s.write(job, 1, "too late").outcome == jq.LEASE_OUTCOME_LEASE_LOST
    advanced = s.docs.AdvanceDocument(
        pb.AdvanceDocumentRequest(lease=lease_of(job), status=document_pb2.DOCUMENT_STATUS_CHUNKING)
    )
    assert advanced.outcome == jq.LEASE_OUTCOME_LEASE_LOST
    completed = s.docs.CompleteDocument(pb.CompleteDocumentRequest(lease=lease_of(job)))
    assert completed.outcome == jq.LEASE_OUTCOME_LEASE_LOST
    given_up = s.docs.FailDocument(pb.FailDocumentRequest(lease=lease_of(job), error="HTTP 404"))
    assert given_up.outcome == jq.LEASE_OUTCOME_LEASE_LOST
    source = s.docs.ReadDocumentSource(pb.ReadDocumentSourceRequest(lease=lease_of(job)))
    assert source.outcome == jq.LEASE_OUTCOME_LEASE_LOST and not source.HasField("document")
    assert counts(db_path) == before
    assert scalar(db_path, "SELECT status FROM documents") == status_before


def test_the_document_fails_with_its_job_after_the_last_attempt(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    s = start_docs(**{"memory.pipelineV2.workerMaxRetries": 2})
    document = s.create(content="text")
    job = s.lease()
    s.jobs.FailJobs(jq.FailJobsRequest(failures=[jq.JobFailure(lease=lease_of(job), error="e1")]))
    retrying = s.docs.GetDocument(pb.GetDocumentRequest(id=document.id)).document
    assert (retrying.status, retrying.error) == (document_pb2.DOCUMENT_STATUS_QUEUED, "")
    assert (retrying.attempt, retrying.last_error) == (1, "e1")
    [job_row] = rows(db_path, "SELECT status, attempts FROM memory_jobs")
    assert (job_row["status"], job_row["attempts"]) == ("pending", 1)
    # The retry becomes due after its backoff (1 s plus jitter); then the last attempt.
    [job] = wait_for(
        lambda: (
            s.jobs.LeaseJobs(
                jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
            ).jobs
        ),
        what="the retry to become due",
    )
    response = s.jobs.FailJobs(
        jq.FailJobsRequest(failures=[jq.JobFailure(lease=lease_of(job), error="HTTP 404")])
    )
    assert response.dead_count == 0  # a failed document, not a dead job
    failed = s.docs.GetDocument(pb.GetDocumentRequest(id=document.id)).document
    assert (failed.status, failed.error) == (document_pb2.DOCUMENT_STATUS_FAILED, "HTTP 404")
    assert (failed.attempt, failed.last_error) == (2, "HTTP 404")
    [job_row] = rows(db_path, "SELECT status, result FROM memory_jobs")
    assert dict(job_row) == {"status": "completed", "result": '{"failed":"HTTP 404"}'}


def test_a_document_whose_lease_always_expires_fails_after_the_last_attempt(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    """Issue 34: an expired lease is a used attempt, for documents too."""
    s = start_docs(**{"memory.pipelineV2.workerMaxRetries": 2})
    document = s.create(content="text")
    for n in (1, 2):
        job = s.lease()
        assert job.attempts == n
        time.sleep(0.01)
        s.jobs.ReleaseStaleLeases(jq.ReleaseStaleLeasesRequest(lease_timeout_ms=1))
        seen = s.docs.GetDocument(pb.GetDocumentRequest(id=document.id)).document
        assert (seen.attempt, seen.last_error) == (n, LEASE_EXPIRED)
    assert (seen.status, seen.error) == (document_pb2.DOCUMENT_STATUS_FAILED, LEASE_EXPIRED)
    [job_row] = rows(db_path, "SELECT status FROM memory_jobs")
    assert job_row["status"] == "completed"  # a failed document, not a dead job
    assert not s.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
    ).jobs


def test_a_document_that_can_never_be_ingested_fails_at_once_and_its_job_is_not_dead(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    s = start_docs(**{"memory.pipelineV2.workerMaxRetries": 3})
    document = s.create(url="https://example.com/missing")
    job = s.lease()
    response = s.docs.FailDocument(pb.FailDocumentRequest(lease=lease_of(job), error="HTTP 404"))
    assert response.outcome == jq.LEASE_OUTCOME_OK
    failed = response.document
    assert (failed.status, failed.error, failed.attempt, failed.last_error) == (
        document_pb2.DOCUMENT_STATUS_FAILED,
        "HTTP 404",
        1,
        "HTTP 404",
    )
    assert s.docs.GetDocument(pb.GetDocumentRequest(id=document.id)).document == failed
    [job_row] = rows(db_path, "SELECT status, lease_token, result FROM memory_jobs")
    assert (job_row["status"], job_row["lease_token"]) == ("completed", None)
    assert json.loads(job_row["result"]) == {"failed": "HTTP 404"}
    # Finished, so nothing to lease again and the token is spent.
    assert not s.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
    ).jobs
    again = s.docs.FailDocument(pb.FailDocumentRequest(lease=lease_of(job), error="HTTP 404"))
    assert again.outcome == jq.LEASE_OUTCOME_LEASE_LOST


def test_the_expected_chunk_count_is_recorded_with_the_embedding_status(
    start_docs: Callable[..., Docs],
) -> None:
    s = start_docs()
    document = s.create(content="text")
    assert (document.attempt, document.expected_chunk_count) == (0, 0)
    job = s.lease()
    advanced = s.docs.AdvanceDocument(
        pb.AdvanceDocumentRequest(
            lease=lease_of(job),
            status=document_pb2.DOCUMENT_STATUS_EMBEDDING,
            expected_chunk_count=4,
        )
    ).document
    assert (advanced.attempt, advanced.expected_chunk_count, advanced.chunk_count) == (1, 4, 0)
    s.write(job, 0, "the first chunk")
    current = s.docs.GetDocument(pb.GetDocumentRequest(id=document.id)).document
    assert (current.chunk_count, current.expected_chunk_count) == (1, 4)


def test_worker_calls_reject_bad_chunks_and_statuses(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    s = start_docs(**{"memory.pipelineV2.documentChunkSize": 200})
    s.create(content="text")
    job = s.lease()
    before = counts(db_path)
    for call, field in (
        (lambda: s.write(job, -1, "x"), "chunk_index"),
        (lambda: s.write(job, 0, "  "), "content"),
        (lambda: s.write(job, 0, "x" * 201), "content"),
        (lambda: s.write(job, 0, "x", vector=[1.0, 0.0], embedding_model=MODEL), "vector"),
        (
            lambda: s.docs.AdvanceDocument(
                pb.AdvanceDocumentRequest(
                    lease=lease_of(job), status=document_pb2.DOCUMENT_STATUS_DONE
                )
            ),
            "status",
        ),
        (
            lambda: s.docs.AdvanceDocument(
                pb.AdvanceDocumentRequest(
                    lease=lease_of(job),
                    status=document_pb2.DOCUMENT_STATUS_CHUNKING,
                    expected_chunk_count=3,
                )
            ),
            "expected_chunk_count",
        ),
        (
            lambda: s.docs.AdvanceDocument(
                pb.AdvanceDocumentRequest(
                    lease=lease_of(job),
                    status=document_pb2.DOCUMENT_STATUS_EMBEDDING,
                    expected_chunk_count=-1,
                )
            ),
            "expected_chunk_count",
        ),
        (
            lambda: s.docs.FailDocument(pb.FailDocumentRequest(lease=lease_of(job), error=" ")),
            "error",
        ),
    ):
        code, _, fields = error_of(call)
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, [field])
    every_bad_field = error_of(
        lambda: s.docs.AdvanceDocument(
            pb.AdvanceDocumentRequest(
                lease=lease_of(job),
                status=document_pb2.DOCUMENT_STATUS_DONE,
                title="t" * 513,
                expected_chunk_count=-1,
            )
        )
    )
    assert every_bad_field[2] == ["status", "title", "expected_chunk_count"]
    assert counts(db_path) == before


def test_every_bad_field_of_a_request_is_named_at_once(
    start_docs: Callable[..., Docs], db_path: Path
) -> None:
    """The parse step names every bad field before the store runs (issue 36)."""
    s = start_docs(**{"memory.pipelineV2.documentChunkSize": 200})
    s.create(content="text")
    job = s.lease()
    before = counts(db_path)
    created = error_of(
        lambda: s.create(
            namespace="Bad Space",
            content="x",
            url="http://example.com/",
            tags=["t"] * 0,
            title="t" * 513,
        )
    )
    assert created[:1] == (grpc.StatusCode.INVALID_ARGUMENT,)
    assert created[2] == ["namespace", "content", "title"]
    too_many_tags = error_of(
        lambda: s.create(url="http://10.0.0.1/", tags=[f"t{i}" for i in range(40)])
    )
    assert too_many_tags[2][0] == "url" and "tags" in too_many_tags[2]
    chunk = error_of(
        lambda: s.docs.WriteDocumentChunk(
            pb.WriteDocumentChunkRequest(
                lease=jq.JobLease(), chunk_index=-1, content=" ", vector=[float("nan")]
            )
        )
    )
    assert chunk[2] == [
        "lease.job_id",
        "lease.lease_token",
        "chunk_index",
        "content",
        "vector",
    ]
    listed = error_of(
        lambda: s.docs.ListDocumentChunks(
            pb.ListDocumentChunksRequest(document_id="", page_size=-1, page_token="junk")
        )
    )
    assert listed[2] == ["document_id", "page_size", "page_token"]
    failed = error_of(
        lambda: s.docs.FailDocument(pb.FailDocumentRequest(lease=jq.JobLease(job_id=job.id)))
    )
    assert failed[2] == ["lease.lease_token", "error"]
    assert counts(db_path) == before
