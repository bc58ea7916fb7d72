"""The parse step of the PipelineService RPCs the pipeline answers itself: the
request becomes one typed input, or INVALID_ARGUMENT naming every bad field,
before a model is asked or the store is read. The document RPCs it relays are
parsed by the store (services/store/document_requests.py), one set of rules
whichever door a client uses."""

from __future__ import annotations

from dataclasses import dataclass

from engram.pipeline.v1 import pipeline_pb2 as pb
from services.common.errors import Violations
from services.common.validation import validate_id, validate_namespace

MAX_EXTRACT_REQUEST_BYTES = 64 * 1024


@dataclass(frozen=True)
class ExtractInput:
    namespace: str
    content: str  # as the caller sent it: the namespace's PII gate comes next


@dataclass(frozen=True)
class WatchInput:
    namespace: str
    document_id: str


def extract(request: pb.ExtractRequest) -> ExtractInput:
    bad = Violations()
    namespace = bad.check("", validate_namespace, request.namespace)
    if not request.content.strip():
        bad.add("content", "must not be empty")
    elif len(request.content.encode()) > MAX_EXTRACT_REQUEST_BYTES:
        bad.add("content", "must be at most 64 KiB")
    bad.raise_if_any()
    return ExtractInput(namespace, request.content)


def watch_document(request: pb.WatchDocumentRequest) -> WatchInput:
    bad = Violations()
    namespace = bad.check("", validate_namespace, request.namespace)
    document_id = bad.check("", validate_id, request.id, "id")
    bad.raise_if_any()
    return WatchInput(namespace, document_id)
