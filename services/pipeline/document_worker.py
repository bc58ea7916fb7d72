"""The document worker (seed 000 "Document Ingest").

A fixed-interval loop (`documentWorkerIntervalMs`; a document created through
the pipeline wakes it at once) leases `document_ingest` jobs one at a time and
walks each through `extracting` → `chunking` → `embedding` → `indexing` →
`done`. Chunks alternate: embed one (outside any transaction), then the store
writes it in its own transaction. The lease is renewed while it works
(services.pipeline.leases.run_renewing), and a lost lease stops the document at
once: a renewal that finds it gone cancels the work, wherever it is (a slow
fetch, an embedding call), and every store call checks the token besides.

A failure no retry can fix (a 4xx answer, a host name that does not exist,
an address documents may not be fetched from, too many redirects, over the
size cap, not text, no text) fails the document at once: the store
marks it `failed` and finishes its job, which is therefore not a dead job.
Any other failure (5xx, timeout, connection refused, the store rejecting a
write) is a failed attempt: the store retries it with backoff and, after
`workerMaxRetries` attempts, marks the job dead and the document `failed`
with the error. A lease that expires, or a pipeline that dies holding it,
uses an attempt too (the store's reaper and a restart's release end it), so a
document that kills its worker every time fails after `workerMaxRetries`. An
embedding outage is not a failure: the chunk is written without a vector and
an embed job takes over. The store refusing a write follows the pipeline's
one rule for refusals (services/pipeline/job_outcomes.py): frozen mutations
or a full disk hand the job back unattempted, the worker backing off.

The worker always runs, whatever `memory.pipelineV2.enabled` says: documents
are explicit user requests, not background distillation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc

from engram.common.v1 import document_pb2, job_pb2
from engram.store.internal.v1 import documents_pb2 as dpb
from engram.store.internal.v1 import documents_pb2_grpc, job_queue_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from services.common import clock
from services.common.backoff import backoff_s
from services.common.config import Config
from services.common.fetch_policy import FetchPolicy
from services.common.normalize import normalize_content
from services.common.providers.embedding import EmbeddingProvider
from services.common.providers.errors import ProviderError
from services.common.remote_errors import StoreRefusal, refusing
from services.pipeline.documents import (
    DocumentEvents,
    FetchError,
    chunk_text,
    fetch_url,
    new_http_client,
)
from services.pipeline.job_outcomes import Outcome, describe, settle
from services.pipeline.leases import LeaseIdentity, LeaseLost, run_renewing
from services.pipeline.status import WorkerStatus

log = logging.getLogger("engram.pipeline.documents")


class DocumentWorker:
    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        store: documents_pb2_grpc.DocumentStoreServiceAsyncStub,
        provider: EmbeddingProvider,
        identity: LeaseIdentity,
        *,
        interval_s: float,
        chunk_size: int,
        chunk_overlap: int,
        max_content_bytes: int,
        renew_s: float,
        fetch_policy: FetchPolicy | None = None,
        max_redirects: int = 5,
    ) -> None:
        """`fetch_policy`: where a URL may be fetched from (None: public addresses only)."""
        self._jobs = jobs
        self._identity = identity
        self._store = store
        self._provider = provider
        self.events = DocumentEvents()
        self._http = new_http_client(fetch_policy or FetchPolicy())
        self._max_redirects = max_redirects
        self._interval_s = interval_s
        self._chunk_size = chunk_size
        self._overlap = chunk_overlap
        self._max_bytes = max_content_bytes
        self._renew_s = renew_s
        self._failures = 0
        self._wake = asyncio.Event()
        self.status = WorkerStatus("document")

    @classmethod
    def from_config(
        cls,
        config: Config,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        store: documents_pb2_grpc.DocumentStoreServiceAsyncStub,
        provider: EmbeddingProvider,
        identity: LeaseIdentity,
    ) -> DocumentWorker:
        settings = config.memory.pipelineV2
        return cls(
            jobs,
            store,
            provider,
            identity,
            interval_s=settings.documentWorkerIntervalMs / 1000,
            chunk_size=settings.documentChunkSize,
            chunk_overlap=settings.documentChunkOverlap,
            max_content_bytes=settings.documentMaxContentBytes,
            # Renew three times per lease timeout, so one slow call never loses the lease.
            renew_s=settings.leaseTimeoutMs / 3000,
            fetch_policy=FetchPolicy.from_config(config),
            max_redirects=config.documents.max_redirects,
        )

    def wake(self) -> None:
        """Look for work now instead of at the next tick."""
        self._wake.set()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self._http.aclose()

    async def _loop(self) -> None:
        while True:
            try:
                while await self.run_once():
                    pass
            except grpc.aio.AioRpcError as exc:
                self._failures += 1
                self.status.last_error = f"store unreachable: {exc.code().name}"
            if self._failures:
                self.status.state = "backoff"
                await asyncio.sleep(backoff_s(self._failures))
                continue
            self.status.state = "idle"
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)

    async def run_once(self) -> bool:
        """Lease and ingest one document; False when none is due."""
        leased = await self._identity.lease(job_pb2.JOB_TYPE_DOCUMENT_INGEST, 1)
        if not leased:
            return False
        job = leased[0]
        self.status.state = "busy"
        lease = jq.JobLease(job_id=job.id, lease_token=job.lease_token)
        try:
            await run_renewing(self._jobs, lease, self._ingest(lease), self._renew_s)
            self.status.completed += 1
            self._failures = 0
        except LeaseLost:
            self.status.last_error = "document lease lost; ingest stopped"
            log.warning("document lease lost; stopped", extra={"job_id": job.id})
        except StoreRefusal as exc:
            await self._refused(job, lease, exc)
        except grpc.aio.AioRpcError:
            raise  # the store is unreachable: the loop backs off, the lease lapses
        except FetchError as exc:
            await self._fail(job, lease, str(exc), permanent=exc.permanent)
        except Exception as exc:  # any other failure is a failed attempt
            await self._fail(job, lease, f"{type(exc).__name__}: {exc}", permanent=False)
        finally:
            self.status.last_batch_at = clock.now_text()
        return True

    async def _refused(self, job: jq.Job, lease: jq.JobLease, refusal: StoreRefusal) -> None:
        """The store refused a write of the ingest: the pipeline's one rule
        (services/pipeline/job_outcomes.py) releases, retries or drops the job."""
        outcome = await settle(self._jobs, [lease], refusal)
        self.status.last_error = describe(refusal)
        if outcome is Outcome.RELEASE:
            self.status.released += 1
            self._failures += 1
        elif outcome is Outcome.RETRY:
            self.status.failed += 1
            await self._publish_current(job.document_id, job.namespace)

    async def _fail(self, job: jq.Job, lease: jq.JobLease, error: str, *, permanent: bool) -> None:
        """Permanent: the document fails now. Else a failed attempt, which the
        store retries or, at the last attempt, buries."""
        self.status.failed += 1
        self.status.last_error = error
        log.warning(
            "document ingest failed",
            extra={"job_id": job.id, "error": error, "permanent": permanent},
        )
        if permanent:
            failed = await self._store.FailDocument(
                dpb.FailDocumentRequest(lease=lease, error=error)
            )
            if failed.outcome == jq.LEASE_OUTCOME_OK:
                self.events.publish(failed.document.id, failed.document)
            return
        await self._jobs.FailJobs(
            jq.FailJobsRequest(failures=[jq.JobFailure(lease=lease, error=error)])
        )
        await self._publish_current(job.document_id, job.namespace)

    async def _ingest(self, lease: jq.JobLease) -> None:
        source = await refusing(
            self._store.ReadDocumentSource(dpb.ReadDocumentSourceRequest(lease=lease))
        )
        if source.outcome != jq.LEASE_OUTCOME_OK:
            raise LeaseLost()
        await self._advance(lease, document_pb2.DOCUMENT_STATUS_EXTRACTING)
        document = source.document
        if document.source_type == "url":
            fetched = await fetch_url(
                self._http, document.url, self._max_bytes, self._max_redirects
            )
            text, title = fetched.text, fetched.title
        else:
            text, title = source.raw_content, ""
        text = normalize_content(text).storage
        if not text:
            raise FetchError("the document has no text", permanent=True)
        await self._advance(lease, document_pb2.DOCUMENT_STATUS_CHUNKING, title)
        chunks = chunk_text(text, self._chunk_size, self._overlap)
        await self._advance(
            lease, document_pb2.DOCUMENT_STATUS_EMBEDDING, expected_chunk_count=len(chunks)
        )
        for index, chunk in enumerate(chunks):
            vector = await self._embed(chunk)
            written = await refusing(
                self._store.WriteDocumentChunk(
                    dpb.WriteDocumentChunkRequest(
                        lease=lease,
                        chunk_index=index,
                        content=chunk,
                        vector=vector,
                        embedding_model=self._provider.model if vector else "",
                    )
                )
            )
            if written.outcome != jq.LEASE_OUTCOME_OK:
                raise LeaseLost()
        await self._advance(lease, document_pb2.DOCUMENT_STATUS_INDEXING)
        done = await refusing(
            self._store.CompleteDocument(dpb.CompleteDocumentRequest(lease=lease))
        )
        if done.outcome != jq.LEASE_OUTCOME_OK:
            raise LeaseLost()
        self.events.publish(done.document.id, done.document)

    async def _advance(
        self,
        lease: jq.JobLease,
        status: document_pb2.DocumentStatus.ValueType,
        title: str = "",
        *,
        expected_chunk_count: int = 0,
    ) -> None:
        response = await refusing(
            self._store.AdvanceDocument(
                dpb.AdvanceDocumentRequest(
                    lease=lease,
                    status=status,
                    title=title,
                    expected_chunk_count=expected_chunk_count,
                )
            )
        )
        if response.outcome != jq.LEASE_OUTCOME_OK:
            raise LeaseLost()
        self.events.publish(response.document.id, response.document)

    async def _embed(self, chunk: str) -> list[float]:
        """The chunk's vector, or none when embeddings are off or failing (an
        embed job then takes over: the document does not wait for the provider)."""
        if self._provider.kind == "none":
            return []
        try:
            [vector] = await self._provider.embed([chunk])
        except ProviderError as exc:
            log.warning(
                "chunk embedding failed; an embed job will retry", extra={"error": str(exc)}
            )
            return []
        return vector

    async def _publish_current(self, document_id: str, namespace: str) -> None:
        """After a failed attempt the store set `queued` or `failed`: tell watchers."""
        with contextlib.suppress(grpc.aio.AioRpcError):
            response = await self._store.GetDocument(
                dpb.GetDocumentRequest(namespace=namespace, id=document_id)
            )
            self.events.publish(document_id, response.document)
