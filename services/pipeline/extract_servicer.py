"""PipelineService.Extract: translate proto <-> domain (mixed into PipelineServicer)."""

from __future__ import annotations

import grpc

from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.pipeline.v1 import pipeline_pb2_grpc
from services.common.config import LLM_HINT, PiiSettings
from services.common.convert import temporal_to_proto, timestamp_from_text
from services.common.errors import LlmNotConfigured
from services.common.pii import PiiGate, gate
from services.pipeline import requests
from services.pipeline.extraction import Extractor


class ExtractRpcs(pipeline_pb2_grpc.PipelineServiceServicer):
    """The Extract dry run; `extraction` and `pii` (the configured `pii.*`
    policies) are set by PipelineServicer."""

    extraction: Extractor | None = None
    pii: PiiGate = PiiGate(PiiSettings())
    llm_configured = True  # config.llm_configured: without one the dry run says how to add it

    async def Extract(
        self, request: pb.ExtractRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExtractResponse:
        assert self.extraction is not None, "PipelineServicer is built with an Extractor"
        asked = requests.extract(request)
        if not self.llm_configured:
            raise LlmNotConfigured(
                "the Extract dry run asks an LLM, and none is configured", LLM_HINT
            )
        # The text goes to the LLM provider, off this machine perhaps: through the
        # namespace's PII policy first, as Remember would store it (REDACT: the
        # model sees placeholders; REJECT: INVALID_ARGUMENT / PII_DETECTED).
        content = gate(asked.content, self.pii.policy(asked.namespace), "content").text
        result = await self.extraction.dry_run(content)
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
