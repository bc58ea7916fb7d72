"""PipelineService.Extract: translate proto <-> domain (mixed into PipelineServicer)."""

from __future__ import annotations

import grpc

from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.pipeline.v1 import pipeline_pb2_grpc
from services.common.convert import temporal_to_proto, timestamp_from_text
from services.pipeline.extraction import Extractor


class ExtractRpcs(pipeline_pb2_grpc.PipelineServiceServicer):
    """The Extract dry run; `extraction` is set by PipelineServicer."""

    extraction: Extractor | None = None

    async def Extract(
        self, request: pb.ExtractRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExtractResponse:
        assert self.extraction is not None, "PipelineServicer is built with an Extractor"
        result = await self.extraction.dry_run(request.namespace, request.content)
        return pb.ExtractResponse(
            facts=[
                pb.ExtractedFact(
                    content=f.content,
                    type=f.type,
                    confidence=f.confidence,
                    importance=f.confidence if f.importance is None else f.importance,
                    temporal_class=temporal_to_proto(f.temporal_class),
                    valid_until=timestamp_from_text(f.valid_until),
                    categories=f.categories,
                )
                for f in result.facts
            ],
            entities=[
                pb.ExtractedEntity(
                    source=e.source,
                    relationship=e.relationship,
                    target=e.target,
                    confidence=e.confidence,
                )
                for e in result.entities
            ],
            warnings=result.warnings,
            model=self.extraction.llm.model,
            named_entities=[
                pb.ExtractedNamedEntity(name=n.name, entity_type=n.type, aliases=n.aliases)
                for n in result.named
            ],
        )
