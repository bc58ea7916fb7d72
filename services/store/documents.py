"""Documents on the store's side (seed 000 "Document Ingest"): registering a
document with its ingest job, reading it, and the lease-checked writes of the
pipeline's document worker. The pipeline fetches, chunks and embeds; the store
only validates and writes, one chunk per transaction.

Rules here, SQL in document_sql / repository, every write through the writer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from services.common import clock
from services.common.config import PiiSettings
from services.common.errors import InvalidArgument, NotFound
from services.common.fetch_policy import FetchPolicy
from services.common.normalize import normalize_content
from services.common.pii import PiiGate, PiiPolicy, gate
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import document_sql as sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import mutations, rules
from services.store.document_inputs import (
    Chunk,
    ChunkPage,
    DocumentRef,
    Failure,
    HeldLease,
    NewDocument,
    Progress,
)
from services.store.page_tokens import encode_page_token
from services.store.writer import Writer

MAX_URL_CHARS = 2048
MAX_TITLE_CHARS = 512
# The title becomes one more tag on every chunk, within Remember's tag limit.
MAX_DOCUMENT_TAGS = rules.MAX_TAGS - 1
DEFAULT_CHUNK_PAGE_SIZE = 50
PROGRESS_STATUSES = ("extracting", "chunking", "embedding", "indexing")
STATUSES = ("queued", *PROGRESS_STATUSES, "done", "failed")
CHUNK_TYPE = "document_chunk"
CHUNK_IMPORTANCE = 0.3
CHUNK_SOURCE_TYPE = "document"
CHUNK_ACTOR = "document-ingest"
CHUNK_WHY = "document-chunk"


@dataclass(frozen=True)
class DocumentRecord:
    id: str
    namespace: str
    source_type: str  # url | text
    url: str
    title: str
    status: str
    error: str
    chunk_count: int
    expected_chunk_count: int
    tags: tuple[str, ...]
    created_at: str
    updated_at: str
    completed_at: str | None
    attempt: int  # the ingest job's attempts
    last_error: str  # the ingest job's last error

    @classmethod
    def from_row(cls, row: Any) -> DocumentRecord:
        return cls(
            id=row["id"],
            namespace=row["namespace"],
            source_type=row["source_type"],
            url=row["source_url"] or "",
            title=row["title"] or "",
            status=row["status"],
            error=row["error"] or "",
            chunk_count=row["chunk_count"],
            expected_chunk_count=row["expected_chunk_count"],
            tags=tuple(json.loads(row["tags"])),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            completed_at=row["completed_at"],
            attempt=row["attempt"] or 0,
            last_error=row["last_error"] or "",
        )


@dataclass(frozen=True)
class DocumentSource:
    document: DocumentRecord
    raw_content: str


@dataclass(frozen=True)
class ChunkRecord:
    chunk_index: int
    memory_id: str
    content: str


@dataclass(frozen=True)
class ChunkWrite:
    outcome: str  # created | linked | duplicate
    memory_id: str
    vector_stored: bool


def check_url(url: str, fetch_policy: FetchPolicy) -> str:
    """An absolute http(s) URL; one whose host is an IP address documents may
    not be fetched from is refused now (a host name is checked at each connect
    of the fetch: services/pipeline/fetch_guard.py)."""
    url = url.strip()
    if len(url) > MAX_URL_CHARS:
        raise InvalidArgument("url", f"must be at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError:
        raise InvalidArgument("url", "must be an absolute http or https URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise InvalidArgument("url", "must be an absolute http or https URL")
    refusal = fetch_policy.literal_refusal(host)
    if refusal is not None:
        raise InvalidArgument("url", refusal)
    return url


def title_tag(title: str) -> str | None:
    """The title as a chunk tag: Remember's tag form, cut to the tag length."""
    if not title.strip():
        return None
    return rules.check_tags([title.strip()[: rules.MAX_TAG_CHARS]], "title")[0]


def chunk_tags(tags: Sequence[str], title: str) -> tuple[str, ...]:
    tag = title_tag(title)
    return tuple(dict.fromkeys([*tags, tag] if tag else tags))


class DocumentStore:
    def __init__(
        self,
        writer: Writer,
        reads: ReadPool,
        *,
        max_job_attempts: int,
        pii: PiiGate | None = None,
    ) -> None:
        """`pii`: the namespaces' PII policies, applied to the source text on
        create (by the parse step) and to every chunk (a fetched URL's text is
        first seen there)."""
        self._pii = pii or PiiGate(PiiSettings())
        self._writer = writer
        self._reads = reads
        self._max_attempts = max_job_attempts

    # ---- the public side ----------------------------------------------------------

    def pii_policy(self, namespace: str) -> PiiPolicy:
        """The PII policy of the namespace a document is created in."""
        return self._pii.policy(namespace)

    async def create(self, new: NewDocument) -> DocumentRecord:
        """The document row and its ingest job in one transaction."""

        def operation(conn: Connection) -> DocumentRecord:
            at = clock.now_text()
            document_id = repo.new_id()
            sql.insert_document(
                conn,
                {
                    "id": document_id,
                    "namespace": new.namespace,
                    "source_type": "text" if new.content else "url",
                    "source_url": new.url or None,
                    "raw_content": new.content or None,
                    "title": new.title or None,
                    "tags": json.dumps(list(new.tags)),
                    "created_at": at,
                },
            )
            sql.insert_ingest_job(
                conn, repo.new_id(), new.namespace, document_id, self._max_attempts, at
            )
            return DocumentRecord.from_row(sql.get_document(conn, document_id))

        return await self._writer.submit(operation)

    async def get(self, ref: DocumentRef) -> DocumentRecord:
        row = await self._reads.fetch_one(sql.get_document_query(ref.namespace, ref.document_id))
        if row is None:
            raise NotFound(f"document {ref.document_id} not found in namespace {ref.namespace}")
        return DocumentRecord.from_row(row)

    async def list_chunks(self, page: ChunkPage) -> tuple[list[ChunkRecord], str]:
        size = page.page_size or DEFAULT_CHUNK_PAGE_SIZE
        ref = page.document
        await self.get(ref)
        after = -1 if page.after is None else page.after
        rows = await self._reads.fetch_all(
            sql.list_chunks_query(ref.namespace, ref.document_id, after, size + 1)
        )
        chunks = [ChunkRecord(r[0], r[1], r[2]) for r in rows[:size]]
        next_token = ""
        if len(rows) > size:
            scope = chunk_page_scope(ref.namespace, ref.document_id)
            next_token = encode_page_token("document_chunks", scope, [chunks[-1].chunk_index])
        return chunks, next_token

    # ---- the document worker's lease-checked calls ------------------------------------

    async def read_source(self, lease: HeldLease) -> DocumentSource | None:
        """None when the lease is not held."""
        row = await self._reads.fetch_one(
            sql.leased_document_query(lease.job_id, lease.lease_token)
        )
        if row is None:
            return None
        return DocumentSource(DocumentRecord.from_row(row), row["raw_content"] or "")

    async def advance(self, progress: Progress) -> DocumentRecord | None:
        """Record progress (and backfill a fetched title, and from `embedding` on
        the number of chunks); None when the lease is lost."""

        def operation(conn: Connection) -> DocumentRecord | None:
            document_id = _held_document(conn, progress.lease)
            if document_id is None:
                return None
            sql.set_status(conn, document_id, progress.status, clock.now_text())
            if progress.title:  # the namespace is known only here; PiiDetected ends the call
                namespace = DocumentRecord.from_row(sql.get_document(conn, document_id)).namespace
                title_text = rules.check_text(
                    progress.title, "title", MAX_TITLE_CHARS, pii=self._pii.policy(namespace)
                )
                sql.backfill_title(conn, document_id, title_text)
            if progress.expected_chunk_count:
                sql.set_expected_chunk_count(conn, document_id, progress.expected_chunk_count)
            return DocumentRecord.from_row(sql.get_document(conn, document_id))

        return await self._writer.submit(operation)

    async def write_chunk(self, chunk: Chunk) -> ChunkWrite | None:
        """One chunk, one transaction; None when the lease is lost."""

        def operation(conn: Connection) -> ChunkWrite | None:
            normalized, supplied = chunk.content, chunk.vector
            document_id = _held_document(conn, chunk.lease)
            if document_id is None:
                return None
            document = DocumentRecord.from_row(sql.get_document(conn, document_id))
            # the namespace is known only here (a few microseconds of the writer)
            gated = gate(normalized.storage, self._pii.policy(document.namespace), "content")
            if gated.redacted:  # the vector was made from the original: embed again
                normalized, supplied = normalize_content(gated.text), None
            at = clock.now_text()
            linked = sql.linked_memory_with_hash(conn, document_id, normalized.content_hash)
            if linked is not None:
                return ChunkWrite("duplicate", linked, False)
            [created] = mutations.create(
                conn,
                [
                    mutations.new_memory(
                        repo.MemoryRow(
                            repo.new_id(),
                            document.namespace,
                            normalized.storage,
                            normalized.normalized,
                            normalized.content_hash,
                            CHUNK_TYPE,
                            CHUNK_IMPORTANCE,
                            json.dumps(list(chunk_tags(document.tags, document.title))),
                            0,
                            CHUNK_ACTOR,
                            CHUNK_WHY,
                            CHUNK_SOURCE_TYPE,
                            document_id,
                            at,
                            at,
                        ),
                        actor=CHUNK_ACTOR,
                        reason=CHUNK_WHY,
                        max_attempts=self._max_attempts,
                        metadata={"document_id": document_id, "chunk_index": chunk.chunk_index},
                        extract=False,
                        vector=supplied,
                    )
                ],
            )
            sql.link_chunk(conn, document_id, created.memory_id, chunk.chunk_index, at)
            if created.deduplicated:  # another memory of the namespace holds this text
                return ChunkWrite("linked", created.memory_id, False)
            return ChunkWrite("created", created.memory_id, created.vector_stored)

        return await self._writer.submit(operation)

    async def complete(self, lease: HeldLease) -> DocumentRecord | None:
        """The document is done and its job completes together; None when the lease is lost."""

        def operation(conn: Connection) -> DocumentRecord | None:
            document_id = _held_document(conn, lease)
            if document_id is None:
                return None
            at = clock.now_text()
            sql.set_status(conn, document_id, "done", at)
            document = DocumentRecord.from_row(sql.get_document(conn, document_id))
            result = {"chunks": document.chunk_count}
            repo.complete_job(conn, lease.job_id, at, json.dumps(result, separators=(",", ":")))
            return document

        return await self._writer.submit(operation)

    async def fail(self, failure: Failure) -> DocumentRecord | None:
        """A document that no retry can ingest: failed, and its job finished (not
        dead) in one transaction; None when the lease is lost."""

        def operation(conn: Connection) -> DocumentRecord | None:
            document_id = _held_document(conn, failure.lease)
            if document_id is None:
                return None
            sql.fail_document(
                conn, failure.lease.job_id, document_id, failure.error, clock.now_text()
            )
            return DocumentRecord.from_row(sql.get_document(conn, document_id))

        return await self._writer.submit(operation)


def chunk_page_scope(namespace: str, document_id: str) -> str:
    """What a ListDocumentChunks page token is bound to."""
    return f"{namespace}\x00{document_id}"


def _held_document(conn: Connection, lease: HeldLease) -> str | None:
    """The document id of a document_ingest job leased with this token, else None."""
    job = repo.leased_job(conn, lease.job_id, lease.lease_token)
    if job is None or job["job_type"] != JobKind.DOCUMENT_INGEST or not job["document_id"]:
        return None
    return str(job["document_id"])
