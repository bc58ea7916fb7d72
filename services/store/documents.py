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
from services.common.errors import FieldViolation, InvalidArgument, NotFound
from services.common.fetch_policy import FetchPolicy
from services.common.normalize import normalize_content
from services.common.pii import PiiGate, gate
from services.common.validation import check_no_control, validate_id, without_control
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import document_sql as sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import mutations, rules
from services.store.jobs import MAX_ERROR_CHARS
from services.store.memories import _page_size
from services.store.page_tokens import decode_int_position, encode_page_token
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
        max_content_bytes: int,
        max_chunk_chars: int,
        pii: PiiGate | None = None,
        fetch_policy: FetchPolicy | None = None,
    ) -> None:
        """`pii`: the namespaces' PII policies, applied to the source text on
        create and to every chunk (a fetched URL's text is first seen there).
        `fetch_policy`: `documents.fetch_allow` (None: public addresses only)."""
        self._fetch_policy = fetch_policy or FetchPolicy()
        self._pii = pii or PiiGate(PiiSettings())
        self._writer = writer
        self._reads = reads
        self._max_attempts = max_job_attempts
        self._max_content_bytes = max_content_bytes
        self._max_chunk_chars = max_chunk_chars

    # ---- the public side ----------------------------------------------------------

    async def create(
        self, namespace: str, content: str, url: str, title: str, tags: Sequence[str]
    ) -> DocumentRecord:
        """Validate, then the document row and its ingest job in one transaction."""
        if bool(content) == bool(url):
            raise InvalidArgument("content", "exactly one of content and url must be set")
        policy = self._pii.policy(namespace)
        if content:
            rules.check_not_blank(content, "content")
            check_no_control(content, "content", whitespace_ok=True)
            if len(content.encode("utf-8")) > self._max_content_bytes:
                raise InvalidArgument(
                    "content",
                    f"must be at most {self._max_content_bytes} bytes "
                    "(memory.pipelineV2.documentMaxContentBytes)",
                )
            content = gate(content, policy, "content").text
        else:
            url = check_url(url, self._fetch_policy)
        # the title and tags are free text like the content: through the same gate
        title = rules.check_text(title, "title", MAX_TITLE_CHARS, pii=policy)
        cleaned_tags = rules.check_tags(tags, "tags", pii=policy)
        if len(cleaned_tags) > MAX_DOCUMENT_TAGS:
            raise InvalidArgument("tags", f"at most {MAX_DOCUMENT_TAGS} tags")

        def operation(conn: Connection) -> DocumentRecord:
            at = clock.now_text()
            document_id = repo.new_id()
            sql.insert_document(
                conn,
                {
                    "id": document_id,
                    "namespace": namespace,
                    "source_type": "text" if content else "url",
                    "source_url": url or None,
                    "raw_content": content or None,
                    "title": title or None,
                    "tags": json.dumps(list(cleaned_tags)),
                    "created_at": at,
                },
            )
            sql.insert_ingest_job(
                conn, repo.new_id(), namespace, document_id, self._max_attempts, at
            )
            return DocumentRecord.from_row(sql.get_document(conn, document_id))

        return await self._writer.submit(operation)

    async def get(self, namespace: str, document_id: str, field: str = "id") -> DocumentRecord:
        validate_id(document_id, field)
        row = await self._reads.fetch_one(sql.get_document_query(namespace, document_id))
        if row is None:
            raise NotFound(f"document {document_id} not found in namespace {namespace}")
        return DocumentRecord.from_row(row)

    async def list_chunks(
        self, namespace: str, document_id: str, page_size: int, page_token: str
    ) -> tuple[list[ChunkRecord], str]:
        size = _page_size(page_size, DEFAULT_CHUNK_PAGE_SIZE)
        await self.get(namespace, document_id, "document_id")
        scope = f"{namespace}\x00{document_id}"
        after = decode_int_position(page_token, "document_chunks", scope)
        rows = await self._reads.fetch_all(
            sql.list_chunks_query(namespace, document_id, -1 if after is None else after, size + 1)
        )
        chunks = [ChunkRecord(r[0], r[1], r[2]) for r in rows[:size]]
        next_token = ""
        if len(rows) > size:
            next_token = encode_page_token("document_chunks", scope, [chunks[-1].chunk_index])
        return chunks, next_token

    # ---- the document worker's lease-checked calls ------------------------------------

    async def read_source(self, job_id: str, token: str) -> DocumentSource | None:
        """None when the lease is not held."""
        row = await self._reads.fetch_one(sql.leased_document_query(job_id, token))
        if row is None:
            return None
        return DocumentSource(DocumentRecord.from_row(row), row["raw_content"] or "")

    async def advance(
        self, job_id: str, token: str, status: str, title: str, expected_chunk_count: int = 0
    ) -> DocumentRecord | None:
        """Record progress (and backfill a fetched title, and from `embedding` on
        the number of chunks); None when the lease is lost."""
        bad: list[FieldViolation] = []
        if status not in PROGRESS_STATUSES:
            bad.append(FieldViolation("status", f"must be one of {', '.join(PROGRESS_STATUSES)}"))
        try:  # a fetched page's title: its control characters become spaces
            title = rules.check_text(without_control(title), "title", MAX_TITLE_CHARS)
        except InvalidArgument as bad_title:
            bad.extend(bad_title.violations)
        if expected_chunk_count < 0:
            bad.append(FieldViolation("expected_chunk_count", "must not be negative"))
        elif expected_chunk_count and status != "embedding":
            bad.append(FieldViolation("expected_chunk_count", "is set only with status EMBEDDING"))
        if bad:
            error = InvalidArgument(bad[0].field, bad[0].description)
            error.violations = bad
            raise error

        def operation(conn: Connection) -> DocumentRecord | None:
            document_id = _held_document(conn, job_id, token)
            if document_id is None:
                return None
            sql.set_status(conn, document_id, status, clock.now_text())
            if title:  # the namespace is known only here; PiiDetected ends the call
                namespace = DocumentRecord.from_row(sql.get_document(conn, document_id)).namespace
                title_text = rules.check_text(
                    title, "title", MAX_TITLE_CHARS, pii=self._pii.policy(namespace)
                )
                sql.backfill_title(conn, document_id, title_text)
            if expected_chunk_count:
                sql.set_expected_chunk_count(conn, document_id, expected_chunk_count)
            return DocumentRecord.from_row(sql.get_document(conn, document_id))

        return await self._writer.submit(operation)

    async def write_chunk(
        self,
        job_id: str,
        token: str,
        chunk_index: int,
        content: str,
        vector: Sequence[float],
        embedding_model: str,
    ) -> ChunkWrite | None:
        """One chunk, one transaction; None when the lease is lost."""
        if chunk_index < 0:
            raise InvalidArgument("chunk_index", "must not be negative")
        if len(content) > self._max_chunk_chars:
            raise InvalidArgument(
                "content",
                f"must be at most {self._max_chunk_chars} characters "
                "(memory.pipelineV2.documentChunkSize)",
            )
        # a chunk of a fetched page: control characters become spaces (a caller's
        # content document was refused them at creation)
        normalized = normalize_content(without_control(content))
        rules.check_not_blank(normalized.storage, "content")
        supplied = None
        if vector:  # a bad vector is rejected before anything is written
            supplied = mutations.SuppliedVector(
                embedding_model, mutations.normalized_vector_bytes(vector, "vector")
            )

        def operation(conn: Connection) -> ChunkWrite | None:
            nonlocal normalized, supplied
            document_id = _held_document(conn, job_id, token)
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
                        metadata={"document_id": document_id, "chunk_index": chunk_index},
                        extract=False,
                        vector=supplied,
                    )
                ],
            )
            sql.link_chunk(conn, document_id, created.memory_id, chunk_index, at)
            if created.deduplicated:  # another memory of the namespace holds this text
                return ChunkWrite("linked", created.memory_id, False)
            return ChunkWrite("created", created.memory_id, created.vector_stored)

        return await self._writer.submit(operation)

    async def complete(self, job_id: str, token: str) -> DocumentRecord | None:
        """The document is done and its job completes together; None when the lease is lost."""

        def operation(conn: Connection) -> DocumentRecord | None:
            document_id = _held_document(conn, job_id, token)
            if document_id is None:
                return None
            at = clock.now_text()
            sql.set_status(conn, document_id, "done", at)
            document = DocumentRecord.from_row(sql.get_document(conn, document_id))
            result = {"chunks": document.chunk_count}
            repo.complete_job(conn, job_id, at, json.dumps(result, separators=(",", ":")))
            return document

        return await self._writer.submit(operation)

    async def fail(self, job_id: str, token: str, error: str) -> DocumentRecord | None:
        """A document that no retry can ingest: failed, and its job finished (not
        dead) in one transaction; None when the lease is lost."""
        message = error.strip()[:MAX_ERROR_CHARS]
        if not message:
            raise InvalidArgument("error", "required")

        def operation(conn: Connection) -> DocumentRecord | None:
            document_id = _held_document(conn, job_id, token)
            if document_id is None:
                return None
            sql.fail_document(conn, job_id, document_id, message, clock.now_text())
            return DocumentRecord.from_row(sql.get_document(conn, document_id))

        return await self._writer.submit(operation)


def _held_document(conn: Connection, job_id: str, token: str) -> str | None:
    """The document id of a document_ingest job leased with this token, else None."""
    job = repo.leased_job(conn, job_id, token)
    if job is None or job["job_type"] != JobKind.DOCUMENT_INGEST or not job["document_id"]:
        return None
    return str(job["document_id"])
