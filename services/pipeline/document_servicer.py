"""PipelineService document RPCs: translate proto <-> the store's
DocumentStoreService (mixed into PipelineServicer).

The store validates and owns every document row; these RPCs relay its answers
and its errors unchanged (same code, reason and field), so one set of rules
holds whichever door a client uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc

from engram.common.v1 import document_pb2
from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.pipeline.v1 import pipeline_pb2_grpc
from engram.store.internal.v1 import documents_pb2 as dpb
from engram.store.internal.v1 import documents_pb2_grpc
from services.common.remote_errors import relayed_error
from services.pipeline import requests
from services.pipeline.documents import DocumentEvents

WATCH_POLL_S = 0.25
_TERMINAL = (document_pb2.DOCUMENT_STATUS_DONE, document_pb2.DOCUMENT_STATUS_FAILED)


@dataclass
class Documents:
    """What the document RPCs need: the store, the worker's events and wake-up."""

    store: documents_pb2_grpc.DocumentStoreServiceAsyncStub
    events: DocumentEvents
    wake: Callable[[], None]
    poll_s: float = WATCH_POLL_S


def _changed_after(document: document_pb2.Document, last: document_pb2.Document) -> bool:
    """Newer than what the watcher already saw (every store change moves update_time)."""
    return document.update_time.ToNanoseconds() > last.update_time.ToNanoseconds()


class DocumentRpcs(pipeline_pb2_grpc.PipelineServiceServicer):
    """CreateDocument, GetDocument, ListDocumentChunks, WatchDocument; `documents`
    is set by PipelineServicer."""

    documents: Documents

    async def _get(self, namespace: str, document_id: str) -> document_pb2.Document:
        try:
            response = await self.documents.store.GetDocument(
                dpb.GetDocumentRequest(namespace=namespace, id=document_id),
            )
        except grpc.aio.AioRpcError as exc:
            raise relayed_error(exc) from exc
        return response.document

    async def CreateDocument(
        self, request: pb.CreateDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateDocumentResponse:
        try:
            response = await self.documents.store.CreateDocument(
                dpb.CreateDocumentRequest(
                    namespace=request.namespace,
                    content=request.content,
                    url=request.url,
                    title=request.title,
                    tags=request.tags,
                ),
            )
        except grpc.aio.AioRpcError as exc:
            raise relayed_error(exc) from exc
        self.documents.wake()
        return pb.CreateDocumentResponse(document=response.document)

    async def GetDocument(
        self, request: pb.GetDocumentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetDocumentResponse:
        document = await self._get(request.namespace, request.id)
        return pb.GetDocumentResponse(document=document)

    async def ListDocumentChunks(
        self, request: pb.ListDocumentChunksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDocumentChunksResponse:
        try:
            response = await self.documents.store.ListDocumentChunks(
                dpb.ListDocumentChunksRequest(
                    namespace=request.namespace,
                    document_id=request.document_id,
                    page_size=request.page_size,
                    page_token=request.page_token,
                ),
            )
        except grpc.aio.AioRpcError as exc:
            raise relayed_error(exc) from exc
        return pb.ListDocumentChunksResponse(
            chunks=response.chunks,
            next_page_token=response.next_page_token,
        )

    async def WatchDocument(
        self, request: pb.WatchDocumentRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WatchDocumentResponse]:
        """The current state, then every change the worker here publishes (in
        order) or a poll of the store finds (a worker elsewhere), until done or
        failed. A client that cancels ends the generator where it waits."""
        asked = requests.watch_document(request)
        namespace = asked.namespace
        with self.documents.events.watch(asked.document_id) as changes:
            last = await self._get(namespace, asked.document_id)
            yield pb.WatchDocumentResponse(document=last)
            while last.status not in _TERMINAL:
                try:
                    current = await asyncio.wait_for(changes.get(), self.documents.poll_s)
                except TimeoutError:
                    current = await self._get(namespace, asked.document_id)
                if current.namespace == namespace and _changed_after(current, last):
                    last = current
                    yield pb.WatchDocumentResponse(document=last)
