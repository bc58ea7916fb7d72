"""DocumentStoreService: translate proto <-> domain, nothing else."""

from __future__ import annotations

import grpc

from engram.common.v1 import document_pb2
from engram.store.internal.v1 import documents_pb2 as pb
from engram.store.internal.v1 import documents_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from services.common.convert import timestamp_from_text
from services.store import document_requests as requests
from services.store.document_requests import STATUS_VALUES
from services.store.documents import DocumentRecord, DocumentStore

_CHUNK_OUTCOMES = {
    "created": pb.CHUNK_OUTCOME_CREATED,
    "linked": pb.CHUNK_OUTCOME_LINKED,
    "duplicate": pb.CHUNK_OUTCOME_DUPLICATE,
}
_LOST = jq.LEASE_OUTCOME_LEASE_LOST
_OK = jq.LEASE_OUTCOME_OK


def document_to_proto(document: DocumentRecord) -> document_pb2.Document:
    return document_pb2.Document(
        id=document.id,
        namespace=document.namespace,
        source_type=document.source_type,
        url=document.url,
        title=document.title,
        status=STATUS_VALUES[document.status],
        error=document.error,
        chunk_count=document.chunk_count,
        expected_chunk_count=document.expected_chunk_count,
        tags=document.tags,
        create_time=timestamp_from_text(document.created_at),
        update_time=timestamp_from_text(document.updated_at),
        complete_time=timestamp_from_text(document.completed_at),
        attempt=document.attempt,
        last_error=document.last_error,
    )


class DocumentStoreServicer(documents_pb2_grpc.DocumentStoreServiceServicer):
    def __init__(self, documents: DocumentStore, limits: requests.DocumentLimits) -> None:
        self._documents = documents
        self._limits = limits

    async def CreateDocument(
        self, request: pb.CreateDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateDocumentResponse:
        new = requests.create(request, self._limits, self._documents.pii_policy)
        document = await self._documents.create(new)
        return pb.CreateDocumentResponse(document=document_to_proto(document))

    async def GetDocument(
        self, request: pb.GetDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDocumentResponse:
        document = await self._documents.get(requests.get(request))
        return pb.GetDocumentResponse(document=document_to_proto(document))

    async def ListDocumentChunks(
        self, request: pb.ListDocumentChunksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDocumentChunksResponse:
        chunks, next_token = await self._documents.list_chunks(requests.list_chunks(request))
        return pb.ListDocumentChunksResponse(
            chunks=[
                document_pb2.DocumentChunk(
                    chunk_index=c.chunk_index, memory_id=c.memory_id, content=c.content
                )
                for c in chunks
            ],
            next_page_token=next_token,
        )

    async def ReadDocumentSource(
        self, request: pb.ReadDocumentSourceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadDocumentSourceResponse:
        source = await self._documents.read_source(requests.read_source(request))
        if source is None:
            return pb.ReadDocumentSourceResponse(outcome=_LOST)
        return pb.ReadDocumentSourceResponse(
            outcome=_OK,
            document=document_to_proto(source.document),
            raw_content=source.raw_content,
        )

    async def AdvanceDocument(
        self, request: pb.AdvanceDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.AdvanceDocumentResponse:
        document = await self._documents.advance(requests.advance(request))
        if document is None:
            return pb.AdvanceDocumentResponse(outcome=_LOST)
        return pb.AdvanceDocumentResponse(outcome=_OK, document=document_to_proto(document))

    async def WriteDocumentChunk(
        self, request: pb.WriteDocumentChunkRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteDocumentChunkResponse:
        written = await self._documents.write_chunk(requests.write_chunk(request, self._limits))
        if written is None:
            return pb.WriteDocumentChunkResponse(outcome=_LOST)
        return pb.WriteDocumentChunkResponse(
            outcome=_OK,
            chunk_outcome=_CHUNK_OUTCOMES[written.outcome],
            memory_id=written.memory_id,
            vector_stored=written.vector_stored,
        )

    async def CompleteDocument(
        self, request: pb.CompleteDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CompleteDocumentResponse:
        document = await self._documents.complete(requests.complete(request))
        if document is None:
            return pb.CompleteDocumentResponse(outcome=_LOST)
        return pb.CompleteDocumentResponse(outcome=_OK, document=document_to_proto(document))

    async def FailDocument(
        self, request: pb.FailDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.FailDocumentResponse:
        document = await self._documents.fail(requests.fail(request))
        if document is None:
            return pb.FailDocumentResponse(outcome=_LOST)
        return pb.FailDocumentResponse(outcome=_OK, document=document_to_proto(document))
