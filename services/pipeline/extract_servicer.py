"""PipelineService.Extract: translate proto <-> domain (mixed into PipelineServicer)."""

from __future__ import annotations

from typing import Any

from engram.pipeline.v1 import pipeline_pb2_grpc


class ExtractRpcs(pipeline_pb2_grpc.PipelineServiceServicer):
    """The Extract dry run; `extraction` is set by PipelineServicer."""

    extraction: Any = None
