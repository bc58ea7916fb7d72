"""PipelineService document RPCs: translate proto <-> domain (mixed into PipelineServicer)."""

from __future__ import annotations

from typing import Any

from engram.pipeline.v1 import pipeline_pb2_grpc


class DocumentRpcs(pipeline_pb2_grpc.PipelineServiceServicer):
    """CreateDocument, GetDocument, ListDocumentChunks, WatchDocument; `documents`
    is set by PipelineServicer."""

    documents: Any = None
