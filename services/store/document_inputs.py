"""The typed inputs of the DocumentStoreService RPCs, made by their parse step
(services/store/document_requests.py) and taken by the document store."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.normalize import NormalizedContent
from services.store.mutations import SuppliedVector


@dataclass(frozen=True)
class NewDocument:
    namespace: str
    content: str  # through the namespace's PII gate; "" for a URL document
    url: str  # "" for a text document
    title: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class DocumentRef:
    namespace: str
    document_id: str


@dataclass(frozen=True)
class ChunkPage:
    document: DocumentRef
    page_size: int  # 0: the default
    after: int | None  # the page token's position: the last chunk index seen


@dataclass(frozen=True)
class HeldLease:
    job_id: str
    lease_token: str


@dataclass(frozen=True)
class Progress:
    lease: HeldLease
    status: str  # one of PROGRESS_STATUSES
    title: str  # a fetched page's title, not yet through the PII gate; "" for none
    expected_chunk_count: int


@dataclass(frozen=True)
class Chunk:
    lease: HeldLease
    chunk_index: int
    content: NormalizedContent  # not yet through the PII gate
    vector: SuppliedVector | None


@dataclass(frozen=True)
class Failure:
    lease: HeldLease
    error: str
