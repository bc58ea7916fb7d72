"""The parse step of each DocumentStoreService RPC: the proto request becomes one
typed input, or INVALID_ARGUMENT naming every bad field, before the document
store runs, so a bad request writes nothing. What needs the database (a lease
still held, the document's namespace and so its PII policy for a fetched title
or chunk) is judged inside the write (services/store/documents.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engram.common.v1 import document_pb2
from engram.store.internal.v1 import documents_pb2 as pb
from engram.store.internal.v1 import job_queue_pb2 as jq
from services.common.errors import InvalidArgument, Violations
from services.common.fetch_policy import FetchPolicy
from services.common.normalize import normalize_content
from services.common.pii import PiiPolicy, gate
from services.common.validation import (
    check_no_control,
    validate_id,
    validate_namespace,
    without_control,
)
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
from services.store.documents import (
    MAX_DOCUMENT_TAGS,
    MAX_TITLE_CHARS,
    PROGRESS_STATUSES,
    check_url,
    chunk_page_scope,
)
from services.store.job_requests import lease_fields
from services.store.jobs import MAX_ERROR_CHARS
from services.store.memories import MAX_PAGE_SIZE
from services.store.page_tokens import decode_int_position

PiiPolicyOf = Callable[[str], PiiPolicy]

# a document's status as stored and as the proto numbers it
STATUS_VALUES = {
    "queued": document_pb2.DOCUMENT_STATUS_QUEUED,
    "extracting": document_pb2.DOCUMENT_STATUS_EXTRACTING,
    "chunking": document_pb2.DOCUMENT_STATUS_CHUNKING,
    "embedding": document_pb2.DOCUMENT_STATUS_EMBEDDING,
    "indexing": document_pb2.DOCUMENT_STATUS_INDEXING,
    "done": document_pb2.DOCUMENT_STATUS_DONE,
    "failed": document_pb2.DOCUMENT_STATUS_FAILED,
}
# the statuses the document worker may report (AdvanceDocument)
_PROGRESS_NAMES = {STATUS_VALUES[name]: name for name in PROGRESS_STATUSES}


@dataclass(frozen=True)
class DocumentLimits:
    max_content_bytes: int  # memory.pipelineV2.documentMaxContentBytes
    max_chunk_chars: int  # memory.pipelineV2.documentChunkSize
    fetch_policy: FetchPolicy  # documents.fetch_allow


def create(
    request: pb.CreateDocumentRequest, limits: DocumentLimits, pii_policy: PiiPolicyOf
) -> NewDocument:
    bad = Violations()
    namespace = bad.check("", validate_namespace, request.namespace)
    policy = pii_policy(namespace)
    content, url = request.content, request.url
    if bool(content) == bool(url):
        bad.add("content", "exactly one of content and url must be set")
    elif content:
        content = bad.check("", _document_text, content, limits.max_content_bytes, policy)
    else:
        url = bad.check("", check_url, url, limits.fetch_policy)
    # the title and tags are free text like the content: through the same gate
    title = bad.check("", rules.check_text, request.title, "title", MAX_TITLE_CHARS, pii=policy)
    tags = bad.check((), rules.check_tags, request.tags, "tags", pii=policy)
    if len(tags) > MAX_DOCUMENT_TAGS:
        bad.add("tags", f"at most {MAX_DOCUMENT_TAGS} tags")
    bad.raise_if_any()
    return NewDocument(namespace, content, url, title, tags)


def _document_text(content: str, max_bytes: int, policy: PiiPolicy) -> str:
    rules.check_not_blank(content, "content")
    check_no_control(content, "content", whitespace_ok=True)
    if len(content.encode("utf-8")) > max_bytes:
        raise InvalidArgument(
            "content",
            f"must be at most {max_bytes} bytes (memory.pipelineV2.documentMaxContentBytes)",
        )
    return gate(content, policy, "content").text


def get(request: pb.GetDocumentRequest) -> DocumentRef:
    bad = Violations()
    ref = _document(bad, request.namespace, request.id, "id")
    bad.raise_if_any()
    return ref


def list_chunks(request: pb.ListDocumentChunksRequest) -> ChunkPage:
    bad = Violations()
    ref = _document(bad, request.namespace, request.document_id, "document_id")
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        bad.add("page_size", f"must be between 0 and {MAX_PAGE_SIZE}")
    after = bad.check(
        None,
        decode_int_position,
        request.page_token,
        "document_chunks",
        chunk_page_scope(ref.namespace, ref.document_id),
    )
    bad.raise_if_any()
    return ChunkPage(ref, request.page_size, after)


def _document(bad: Violations, namespace: str, document_id: str, field: str) -> DocumentRef:
    return DocumentRef(
        bad.check("", validate_namespace, namespace),
        bad.check("", validate_id, document_id, field),
    )


# ---- the document worker's lease-checked calls ----------------------------------------


def read_source(request: pb.ReadDocumentSourceRequest) -> HeldLease:
    return _lease_only(request.lease)


def complete(request: pb.CompleteDocumentRequest) -> HeldLease:
    return _lease_only(request.lease)


def _lease_only(message: jq.JobLease) -> HeldLease:
    bad = Violations()
    lease = _lease(bad, message)
    bad.raise_if_any()
    return lease


def _lease(bad: Violations, message: jq.JobLease) -> HeldLease:
    return HeldLease(*lease_fields(bad, message))


def advance(request: pb.AdvanceDocumentRequest) -> Progress:
    """Progress (and a fetched title, and from `embedding` on the number of chunks)."""
    bad = Violations()
    lease = _lease(bad, request.lease)
    status = _PROGRESS_NAMES.get(request.status, "")
    if not status:
        bad.add("status", f"must be one of {', '.join(PROGRESS_STATUSES)}")
    # a fetched page's title: its control characters become spaces
    title = bad.check(
        "", rules.check_text, without_control(request.title), "title", MAX_TITLE_CHARS
    )
    count = request.expected_chunk_count
    if count < 0:
        bad.add("expected_chunk_count", "must not be negative")
    elif count and status != "embedding":
        bad.add("expected_chunk_count", "is set only with status EMBEDDING")
    bad.raise_if_any()
    return Progress(lease, status, title, count)


def write_chunk(request: pb.WriteDocumentChunkRequest, limits: DocumentLimits) -> Chunk:
    """One chunk of a fetched page or a text document; a bad vector is refused
    here, before anything is written."""
    bad = Violations()
    lease = _lease(bad, request.lease)
    if request.chunk_index < 0:
        bad.add("chunk_index", "must not be negative")
    # a fetched page's chunk: control characters become spaces (a caller's text
    # document was refused them at creation)
    content = normalize_content(without_control(request.content))
    if len(request.content) > limits.max_chunk_chars:
        bad.add(
            "content",
            f"must be at most {limits.max_chunk_chars} characters "
            "(memory.pipelineV2.documentChunkSize)",
        )
    else:
        bad.check("", rules.check_not_blank, content.storage, "content")
    vector = None
    if request.vector:
        blob = bad.check(b"", mutations.normalized_vector_bytes, list(request.vector), "vector")
        vector = mutations.SuppliedVector(request.embedding_model, blob)
    bad.raise_if_any()
    return Chunk(lease, request.chunk_index, content, vector)


def fail(request: pb.FailDocumentRequest) -> Failure:
    """A document no retry can ingest; the error is kept cut to the job's limit."""
    bad = Violations()
    lease = _lease(bad, request.lease)
    error = request.error.strip()[:MAX_ERROR_CHARS]
    if not error:
        bad.add("error", "required")
    bad.raise_if_any()
    return Failure(lease, error)
