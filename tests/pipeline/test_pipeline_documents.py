"""Document ingest end to end through PipelineService: a real store, search and
pipeline, a scripted Ollama embedding server, and a real HTTP server serving
the pages to fetch."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import document_pb2, job_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.store.internal.v1 import admin_pb2 as adpb
from engram.store.internal.v1 import admin_pb2_grpc, documents_pb2_grpc
from engram.store.internal.v1 import documents_pb2 as dpb
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from http_fakes import Reply, ScriptedHttpServer, VectorBook, ollama_server
from recall_helpers import Stack, fake_embedding_overrides, wait_for
from services.common.normalize import normalize_content
from services.pipeline.documents import chunk_text
from store_helpers import rows

CHUNK, OVERLAP = 200, 20
TERMINAL = (document_pb2.DOCUMENT_STATUS_DONE, document_pb2.DOCUMENT_STATUS_FAILED)


def overrides(embed_url: str, **more: Any) -> dict[str, Any]:
    return fake_embedding_overrides(
        embed_url,
        **{
            "memory.pipelineV2.documentWorkerIntervalMs": 1000,
            "memory.pipelineV2.documentChunkSize": CHUNK,
            "memory.pipelineV2.documentChunkOverlap": OVERLAP,
            "memory.pipelineV2.workerMaxRetries": 2,
            # the pages below are served on loopback, which is refused unless allowed
            "documents.fetch_allow": ["127.0.0.1"],
            **more,
        },
    )


@pytest.fixture
def docs_stack(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> Callable[..., Stack]:
    embed = http_servers(ollama_server(VectorBook()))

    def build(search: bool = False, **more: Any) -> Stack:
        return recall_stack(overrides(embed.url, **more), search=search, pipeline=True)

    return build


def words(count: int, prefix: str = "word") -> str:
    return " ".join(f"{prefix}{i:03d}" for i in range(count))


def create(stack: Stack, **fields: Any) -> document_pb2.Document:
    return stack.pipeline.CreateDocument(pb.CreateDocumentRequest(**fields), timeout=30).document


def finished(stack: Stack, document_id: str, namespace: str = "") -> document_pb2.Document:
    def probe() -> document_pb2.Document | None:
        document = stack.pipeline.GetDocument(
            pb.GetDocumentRequest(namespace=namespace, id=document_id), timeout=30
        ).document
        return document if document.status in TERMINAL else None

    return wait_for(probe, what="the document to finish")


def chunks(stack: Stack, document_id: str, namespace: str = "") -> list[document_pb2.DocumentChunk]:
    listed: list[document_pb2.DocumentChunk] = []
    token = ""
    while True:
        response = stack.pipeline.ListDocumentChunks(
            pb.ListDocumentChunksRequest(
                namespace=namespace, document_id=document_id, page_size=2, page_token=token
            ),
            timeout=30,
        )
        listed.extend(response.chunks)
        token = response.next_page_token
        if not token:
            return listed


def page_server(http_servers: Callable[[Any], Any], path: str, reply: Reply) -> ScriptedHttpServer:
    server: ScriptedHttpServer = http_servers(
        ScriptedHttpServer({("GET", path): lambda _request: reply})
    )
    return server


def test_raw_content_becomes_ordered_overlapping_chunk_memories(
    docs_stack: Callable[..., Stack],
) -> None:
    stack = docs_stack(search=True)
    text = words(60, "alpha") + " " + words(40, "omega")  # 900 characters
    document = create(stack, namespace="team", content=text, title="Field Guide", tags=["Docs"])
    assert document.status == document_pb2.DOCUMENT_STATUS_QUEUED
    done = finished(stack, document.id, "team")
    expected = chunk_text(text, CHUNK, OVERLAP)
    assert len(expected) == 5
    assert (done.status, done.chunk_count, done.error) == (document_pb2.DOCUMENT_STATUS_DONE, 5, "")
    listed = chunks(stack, document.id, "team")
    assert [c.chunk_index for c in listed] == list(range(5))
    assert [c.content for c in listed] == [normalize_content(c).storage for c in expected]
    text_words = set(text.split())
    for before, after in itertools.pairwise(expected):
        # whole words only, and the overlap is whole words within OVERLAP characters
        assert set(before.split()) <= text_words and set(after.split()) <= text_words
        assert any(before.endswith(after[:k]) for k in range(1, OVERLAP + 1))
    for chunk in listed:
        memory = stack.store.GetMemory(
            store_pb2.GetMemoryRequest(namespace="team", id=chunk.memory_id)
        ).memory
        assert (memory.type, memory.source_type, memory.source_id) == (
            "document_chunk",
            "document",
            document.id,
        )
        assert memory.importance == pytest.approx(0.3)
        assert list(memory.tags) == ["docs", "field guide"]
    # Each chunk arrived with its vector: nothing is left for the embed worker.
    wait_for(lambda: stack.stats().indexed_memory_count == 5, what="chunks indexed")
    queue = {(c.job_type, c.status): c.count for c in stack.stats().counts}
    assert queue.get((job_pb2.JOB_TYPE_EXTRACT, job_pb2.JOB_STATUS_PENDING), 0) == 0
    found = stack.recall("omega035", namespace="team")
    assert found.results and found.results[0].memory.type == "document_chunk"
    assert "omega035" in found.results[0].memory.content
    assert not stack.recall("omega035", namespace="default").results


def test_a_document_shorter_than_one_chunk_is_not_split(
    docs_stack: Callable[..., Stack],
) -> None:
    stack = docs_stack()
    document = create(stack, content="A short note about gardens.")
    assert finished(stack, document.id).chunk_count == 1
    [chunk] = chunks(stack, document.id)
    assert chunk.content == "A short note about gardens."


def test_repeated_chunks_are_written_once(docs_stack: Callable[..., Stack]) -> None:
    stack = docs_stack(**{"memory.pipelineV2.documentChunkOverlap": 0})
    passage = ("x" * 99 + " ") * 2  # exactly one 200-character window
    document = create(stack, content=passage * 3 + "the end")
    done = finished(stack, document.id)
    assert (done.status, done.chunk_count) == (document_pb2.DOCUMENT_STATUS_DONE, 2)
    assert [c.chunk_index for c in chunks(stack, document.id)] == [0, 3]


def test_a_url_is_fetched_reduced_to_text_and_its_title_backfilled(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    html = (
        "<!doctype html><html><head><title> Tide  Tables </title>"
        "<style>body { color: red }</style></head><body><h1>Tides</h1>"
        "<script>var secret = 1;</script><p>High water at noon &amp; midnight.</p></body></html>"
    )
    server = page_server(http_servers, "/tides", Reply(200, html, content_type="text/html"))
    stack = docs_stack()
    document = create(stack, url=f"{server.url}/tides", tags=["sea"])
    assert (document.source_type, document.title) == ("url", "")
    done = finished(stack, document.id)
    assert (done.status, done.title) == (document_pb2.DOCUMENT_STATUS_DONE, "Tide Tables")
    [chunk] = chunks(stack, document.id)
    assert chunk.content == "Tides High water at noon & midnight."
    memory = stack.store.GetMemory(store_pb2.GetMemoryRequest(id=chunk.memory_id)).memory
    assert list(memory.tags) == ["sea", "tide tables"]


def ingest_jobs(stack: Stack) -> dict[int, int]:
    """Document ingest jobs by status."""
    return {
        c.status: c.count
        for c in stack.stats().counts
        if c.job_type == job_pb2.JOB_TYPE_DOCUMENT_INGEST
    }


def store_admin(stack: Stack) -> admin_pb2_grpc.StoreAdminServiceStub:
    return admin_pb2_grpc.StoreAdminServiceStub(stack.jobs_channel)


@pytest.mark.parametrize(
    ("reply", "error_part"),
    [
        (Reply(200, "y" * 3000, content_type="text/plain"), "larger than 1024 bytes"),
        (Reply(404, "nothing here", content_type="text/plain"), "HTTP 404"),
        (Reply(410, "gone for good", content_type="text/plain"), "HTTP 410"),
        (Reply(200, b"\x89PNG", content_type="image/png"), "unsupported content type"),
    ],
)
def test_a_url_that_can_never_be_ingested_fails_at_once_and_is_not_a_dead_job(
    docs_stack: Callable[..., Stack],
    http_servers: Callable[[Any], Any],
    reply: Reply,
    error_part: str,
) -> None:
    server = page_server(http_servers, "/doc", reply)
    stack = docs_stack(
        **{
            "memory.pipelineV2.documentMaxContentBytes": 1024,
            "memory.pipelineV2.workerMaxRetries": 3,
        }
    )
    document = create(stack, url=f"{server.url}/doc")
    failed = finished(stack, document.id)
    assert failed.status == document_pb2.DOCUMENT_STATUS_FAILED
    assert error_part in failed.error
    assert (failed.attempt, failed.last_error) == (1, failed.error)
    assert len(server.requests_to("GET", "/doc")) == 1  # no retry
    assert chunks(stack, document.id) == []
    # The job is finished, not dead: the health score's dead-job rate does not
    # see it and "requeue dead jobs" does not bring it back.
    assert ingest_jobs(stack) == {job_pb2.JOB_STATUS_COMPLETED: 1}
    admin = store_admin(stack)
    assert admin.GetStoreDiagnostics(adpb.GetStoreDiagnosticsRequest()).dead_jobs == 0
    assert admin.RequeueDeadJobs(adpb.RequeueDeadJobsRequest()).requeued == 0
    assert ingest_jobs(stack) == {job_pb2.JOB_STATUS_COMPLETED: 1}
    assert stack.pipeline.GetDocument(pb.GetDocumentRequest(id=document.id)).document == failed


def test_a_host_name_that_does_not_exist_fails_at_once(
    docs_stack: Callable[..., Stack],
) -> None:
    """RFC 2606 reserves `.invalid`: it resolves nowhere, network or not."""
    stack = docs_stack(**{"memory.pipelineV2.workerMaxRetries": 3})
    document = create(stack, url="http://docs.engram-test.invalid/page")
    failed = finished(stack, document.id)
    assert failed.status == document_pb2.DOCUMENT_STATUS_FAILED
    assert "docs.engram-test.invalid" in failed.error
    assert failed.attempt == 1
    assert ingest_jobs(stack) == {job_pb2.JOB_STATUS_COMPLETED: 1}


def test_a_server_error_is_retried_until_the_attempts_run_out(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = page_server(http_servers, "/doc", Reply(500, "boom", content_type="text/plain"))
    stack = docs_stack()
    document = create(stack, url=f"{server.url}/doc")
    failed = finished(stack, document.id)
    assert failed.status == document_pb2.DOCUMENT_STATUS_FAILED
    assert "HTTP 500" in failed.error
    assert failed.attempt == 2
    assert len(server.requests_to("GET", "/doc")) == 2  # workerMaxRetries attempts
    # Out of attempts, the document is failed and its job finished, not dead
    # (was: a dead job, counted in the health score's dead-job rate and
    # revived by "requeue dead jobs" to fail again).
    assert ingest_jobs(stack) == {job_pb2.JOB_STATUS_COMPLETED: 1}
    admin = store_admin(stack)
    assert admin.GetStoreDiagnostics(adpb.GetStoreDiagnosticsRequest()).dead_jobs == 0
    assert admin.RequeueDeadJobs(adpb.RequeueDeadJobsRequest()).requeued == 0
    assert stack.pipeline.GetDocument(pb.GetDocumentRequest(id=document.id)).document == failed


def test_a_retry_after_a_server_error_succeeds_and_the_watch_shows_the_attempts(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    text = words(50, "tide")  # 399 characters: three chunks
    answers = iter([Reply(503, "try later", content_type="text/plain")])

    def page(_request: Any) -> Reply:
        return next(answers, Reply(200, text, content_type="text/plain"))

    server: ScriptedHttpServer = http_servers(ScriptedHttpServer({("GET", "/tides"): page}))
    stack = docs_stack(**{"memory.pipelineV2.workerMaxRetries": 3})
    document = create(stack, url=f"{server.url}/tides")
    watch = stack.pipeline.WatchDocument(pb.WatchDocumentRequest(id=document.id), timeout=60)
    reports = [r.document for r in watch]
    done = reports[-1]
    expected = len(chunk_text(text, CHUNK, OVERLAP))
    assert expected == 3
    assert (done.status, done.attempt, done.chunk_count, done.expected_chunk_count) == (
        document_pb2.DOCUMENT_STATUS_DONE,
        2,
        expected,
        expected,
    )
    assert len(server.requests_to("GET", "/tides")) == 2
    retrying = [r for r in reports if r.attempt == 2 and r.status not in TERMINAL]
    assert retrying, [(r.status, r.attempt) for r in reports]
    assert all("HTTP 503" in r.last_error and not r.error for r in retrying)
    embedding = [r for r in reports if r.status == document_pb2.DOCUMENT_STATUS_EMBEDDING]
    assert embedding and all(r.expected_chunk_count == expected for r in embedding)


def test_a_refused_connection_fails_the_document_after_the_retries(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = page_server(http_servers, "/gone", Reply(200, "never served"))
    server.stop()
    stack = docs_stack()
    document = create(stack, url=f"{server.url}/gone")
    failed = finished(stack, document.id)
    assert failed.status == document_pb2.DOCUMENT_STATUS_FAILED
    assert "ConnectError" in failed.error
    assert failed.attempt == 2  # transient: retried until the attempts ran out
    assert ingest_jobs(stack) == {job_pb2.JOB_STATUS_COMPLETED: 1}


def test_watch_reports_every_status_in_order(
    recall_stack: Callable[..., Stack],
    start_pipeline_server: Callable[..., Any],
    http_servers: Callable[[Any], Any],
) -> None:
    embed = http_servers(ollama_server(VectorBook()))
    stack = recall_stack(overrides(embed.url), search=False)
    store_docs = documents_pb2_grpc.DocumentStoreServiceStub(stack.jobs_channel)
    created = store_docs.CreateDocument(dpb.CreateDocumentRequest(content=words(80))).document
    # Hold the job so the worker cannot start before the watch does.
    [held] = stack.jobs.LeaseJobs(
        jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
    ).jobs
    _, pipeline = start_pipeline_server(stack.config)
    stream = pipeline.WatchDocument(pb.WatchDocumentRequest(id=created.id), timeout=60)
    first = next(stream)
    assert first.document.status == document_pb2.DOCUMENT_STATUS_QUEUED
    stack.jobs.ReleaseJobs(
        jq.ReleaseJobsRequest(leases=[jq.JobLease(job_id=held.id, lease_token=held.lease_token)])
    )
    reports = [first.document] + [r.document for r in stream]
    statuses = [r.status for r in reports]
    # a status may repeat while other fields (chunk_count) change: collapse runs
    seen = [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]]
    assert seen == [
        document_pb2.DOCUMENT_STATUS_QUEUED,
        document_pb2.DOCUMENT_STATUS_EXTRACTING,
        document_pb2.DOCUMENT_STATUS_CHUNKING,
        document_pb2.DOCUMENT_STATUS_EMBEDDING,
        document_pb2.DOCUMENT_STATUS_INDEXING,
        document_pb2.DOCUMENT_STATUS_DONE,
    ]
    # from EMBEDDING on, chunk_count counts up to the known total
    total = len(chunk_text(words(80), CHUNK, OVERLAP))
    counted = [
        (r.chunk_count, r.expected_chunk_count)
        for r in reports
        if r.status >= document_pb2.DOCUMENT_STATUS_EMBEDDING
    ]
    assert counted[0] == (0, total) and counted[-1] == (total, total)
    assert [c for c, _ in counted] == sorted(c for c, _ in counted)
    assert all(r.attempt == 1 and not r.last_error for r in reports[1:])


def test_watch_of_a_finished_document_ends_after_one_report(
    docs_stack: Callable[..., Stack],
) -> None:
    stack = docs_stack()
    document = create(stack, content="Done quickly.")
    finished(stack, document.id)
    reports = list(stack.pipeline.WatchDocument(pb.WatchDocumentRequest(id=document.id)))
    assert [r.document.status for r in reports] == [document_pb2.DOCUMENT_STATUS_DONE]


def test_documents_stay_in_their_namespace(docs_stack: Callable[..., Stack]) -> None:
    stack = docs_stack()
    document = create(stack, namespace="team", content="Team only.")
    for call in (
        lambda: stack.pipeline.GetDocument(
            pb.GetDocumentRequest(namespace="other", id=document.id)
        ),
        lambda: stack.pipeline.ListDocumentChunks(
            pb.ListDocumentChunksRequest(namespace="other", document_id=document.id)
        ),
        lambda: list(
            stack.pipeline.WatchDocument(pb.WatchDocumentRequest(namespace="other", id=document.id))
        ),
    ):
        assert error_of(call)[0] == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "content"),
        ({"content": "x", "url": "http://example.com/"}, "content"),
        ({"url": "file:///etc/passwd"}, "url"),
        ({"content": "x", "tags": [""]}, "tags[0]"),
        ({"content": "x", "namespace": "no spaces"}, "namespace"),
    ],
)
def test_bad_input_is_named_through_the_pipeline(
    docs_stack: Callable[..., Stack], fields: dict[str, Any], field: str
) -> None:
    stack = docs_stack()
    code, reason, named = error_of(lambda: create(stack, **fields))
    assert (code, reason, named) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", [field])
    assert error_of(lambda: stack.pipeline.GetDocument(pb.GetDocumentRequest()))[2] == ["id"]
    watch_error = error_of(lambda: list(stack.pipeline.WatchDocument(pb.WatchDocumentRequest())))
    assert watch_error[2] == ["id"]


@pytest.mark.parametrize("bad", ["d" * 129, "d" * (1 << 20)], ids=["129 chars", "1 MiB"])
def test_document_ids_over_128_characters_are_invalid_argument(
    docs_stack: Callable[..., Stack], bad: str
) -> None:
    """Was: any length went through, and NOT_FOUND echoed the whole id (1 MiB
    overflows the metadata limit: the caller saw RESOURCE_EXHAUSTED)."""
    stack = docs_stack()
    calls = [
        ("id", lambda: stack.pipeline.GetDocument(pb.GetDocumentRequest(id=bad))),
        (
            "document_id",
            lambda: stack.pipeline.ListDocumentChunks(
                pb.ListDocumentChunksRequest(document_id=bad)
            ),
        ),
        ("id", lambda: list(stack.pipeline.WatchDocument(pb.WatchDocumentRequest(id=bad)))),
    ]
    for field, call in calls:
        with pytest.raises(grpc.RpcError) as caught:
            call()
        assert len(caught.value.details()) < 1024  # type: ignore[attr-defined]
        code, reason, named = error_of(call)
        assert (code, reason, named) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ARGUMENT",
            [field],
        )


def test_frozen_mutations_refuse_documents_and_write_nothing(
    docs_stack: Callable[..., Stack],
) -> None:
    stack = docs_stack(**{"memory.pipelineV2.mutationsFrozen": True})
    code, reason, _ = error_of(lambda: create(stack, content="Nothing to see."))
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert not [c for c in stack.stats().counts if c.job_type == job_pb2.JOB_TYPE_DOCUMENT_INGEST]


def test_status_lists_the_document_worker(docs_stack: Callable[..., Stack]) -> None:
    stack = docs_stack()
    document = create(stack, content="Counted.")
    finished(stack, document.id)
    status = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
    [worker] = [w for w in status.workers if w.name == "document"]
    assert worker.completed_count == 1


def test_a_lost_lease_stops_the_document_mid_work_and_nothing_more_is_written(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    """The lease is taken away while the page is still being fetched: the
    worker's renewal finds it gone and stops at once, without waiting for the
    fetch, and writes nothing after."""
    gate = threading.Event()

    def held_page(_request: Any) -> Reply:
        gate.wait(60)
        return Reply(200, "A page that arrives too late.", content_type="text/plain")

    server: ScriptedHttpServer = http_servers(ScriptedHttpServer({("GET", "/slow"): held_page}))
    stack = docs_stack(**{"memory.pipelineV2.leaseTimeoutMs": 10000})  # renewed every 3.3 s
    try:
        document = create(stack, url=f"{server.url}/slow")
        wait_for(lambda: server.requests_to("GET", "/slow"), what="the fetch to start")
        [(job_id, token)] = rows(
            Path(stack.config.storage.path),
            "SELECT id, lease_token FROM memory_jobs WHERE job_type = 'document_ingest'",
        )
        lease = jq.JobLease(job_id=job_id, lease_token=token)
        assert list(stack.jobs.ReleaseJobs(jq.ReleaseJobsRequest(leases=[lease])).outcomes) == [
            jq.LEASE_OUTCOME_OK
        ]
        [taken] = stack.jobs.LeaseJobs(
            jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_DOCUMENT_INGEST, max_jobs=1)
        ).jobs
        assert taken.id == job_id  # the job is someone else's now

        def stopped() -> str:
            status = stack.pipeline.GetStatus(pb.GetStatusRequest(), timeout=10)
            [worker] = [w for w in status.workers if w.name == "document"]
            return worker.last_error if "lease lost" in worker.last_error else ""

        wait_for(stopped, timeout=15, what="the worker to stop while the fetch still hangs")
    finally:
        gate.set()
    assert len(server.requests_to("GET", "/slow")) == 1
    assert chunks(stack, document.id) == []
    current = stack.pipeline.GetDocument(pb.GetDocumentRequest(id=document.id), timeout=10)
    assert current.document.status == document_pb2.DOCUMENT_STATUS_EXTRACTING
    assert current.document.chunk_count == 0


# ---- where a URL may be fetched from (issue 34: server-side request forgery) -------------


def test_without_the_allow_list_no_loopback_page_is_ever_fetched(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    """A literal refused address is refused at once; a name is resolved and
    checked where the fetch connects (`localhost`, and 127.0.0.1 spelled as one
    decimal number, which only the resolver reads as an address)."""
    server = page_server(http_servers, "/metrics", Reply(200, "secret", content_type="text/plain"))
    stack = docs_stack(**{"documents.fetch_allow": [], "memory.pipelineV2.workerMaxRetries": 3})
    code, _, fields = error_of(lambda: create(stack, url=f"{server.url}/metrics"))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["url"])
    for host in ("localhost", str(0x7F000001)):
        url = f"http://{host}:{server.port}/metrics"
        failed = finished(stack, create(stack, url=url).id)
        assert failed.status == document_pb2.DOCUMENT_STATUS_FAILED
        assert failed.error.startswith(f"fetching {url} refused: {host} resolves to "), failed.error
        assert "a loopback address" in failed.error and "documents.fetch_allow" in failed.error
        assert failed.attempt == 1  # no retry can help
    assert server.requests_to("GET", "/metrics") == []
    assert ingest_jobs(stack) == {job_pb2.JOB_STATUS_COMPLETED: 2}


def test_an_allow_listed_host_name_is_fetched(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = page_server(
        http_servers, "/wiki", Reply(200, "Intranet page.", content_type="text/plain")
    )
    stack = docs_stack(**{"documents.fetch_allow": ["localhost"]})
    done = finished(stack, create(stack, url=f"http://localhost:{server.port}/wiki").id)
    assert (done.status, done.error) == (document_pb2.DOCUMENT_STATUS_DONE, "")
    assert [c.content for c in chunks(stack, done.id)] == ["Intranet page."]


def redirecting_server(
    http_servers: Callable[[Any], Any], hops: dict[str, str]
) -> ScriptedHttpServer:
    """`hops`: path -> Location of a 302; /final answers a page."""
    routes: dict[tuple[str, str], Callable[[Any], Reply]] = {
        ("GET", path): (lambda _r, to=to: Reply(302, "", headers={"Location": to}))
        for path, to in hops.items()
    }
    routes[("GET", "/final")] = lambda _r: Reply(200, "Arrived.", content_type="text/plain")
    server: ScriptedHttpServer = http_servers(ScriptedHttpServer(routes))
    return server


def test_every_redirect_hop_is_checked_like_the_first(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = redirecting_server(http_servers, {})
    base = server.url
    server.routes.update(
        {
            ("GET", "/allowed"): lambda _r: Reply(302, "", headers={"Location": "/final"}),
            ("GET", "/to-v6-loopback"): lambda _r: Reply(
                302, "", headers={"Location": f"http://[::1]:{server.port}/final"}
            ),
            ("GET", "/to-file"): lambda _r: Reply(
                302, "", headers={"Location": "file:///etc/passwd"}
            ),
        }
    )
    stack = docs_stack(**{"memory.pipelineV2.workerMaxRetries": 3})  # 127.0.0.1 only
    done = finished(stack, create(stack, url=f"{base}/allowed").id)
    assert done.status == document_pb2.DOCUMENT_STATUS_DONE
    assert [c.content for c in chunks(stack, done.id)] == ["Arrived."]

    refused = finished(stack, create(stack, url=f"{base}/to-v6-loopback").id)
    assert refused.status == document_pb2.DOCUMENT_STATUS_FAILED
    assert refused.error.startswith(
        f"fetching {base}/to-v6-loopback (redirected to http://[::1]:{server.port}/final) "
        "refused: ::1 is a loopback address"
    ), refused.error
    assert refused.attempt == 1
    not_http = finished(stack, create(stack, url=f"{base}/to-file").id)
    assert not_http.status == document_pb2.DOCUMENT_STATUS_FAILED
    assert "file:///etc/passwd, which is not an http or https URL" in not_http.error
    assert len(server.requests_to("GET", "/final")) == 1  # the allowed hop's only


def test_redirects_past_the_limit_fail_the_document(
    docs_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> None:
    server = redirecting_server(http_servers, {"/r0": "/r1", "/r1": "/r2", "/r2": "/final"})
    stack = docs_stack(**{"documents.max_redirects": 2})
    within = finished(stack, create(stack, url=f"{server.url}/r1").id)  # two redirects
    assert within.status == document_pb2.DOCUMENT_STATUS_DONE
    past = finished(stack, create(stack, url=f"{server.url}/r0").id)  # three
    assert (past.status, past.attempt) == (document_pb2.DOCUMENT_STATUS_FAILED, 1)
    assert past.error == (
        f"fetching {server.url}/r0: more than 2 redirects (documents.max_redirects)"
    )
    assert len(server.requests_to("GET", "/final")) == 1


def test_a_bad_watch_names_every_bad_field(docs_stack: Callable[..., Stack]) -> None:
    watch = docs_stack().pipeline.WatchDocument(
        pb.WatchDocumentRequest(namespace="Bad NS"), timeout=10
    )
    code, _, fields = error_of(lambda: next(iter(watch)))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace", "id"])
