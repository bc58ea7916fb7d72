"""SearchService: parse the request (services/search/requests.py), call the
domain with the typed input, translate the result to proto; nothing else."""

from __future__ import annotations

import grpc

from engram.search.v1 import search_pb2, search_pb2_grpc
from services.common.convert import memory_to_proto
from services.search import requests
from services.search.context import AssembledContext, ContextAssembler
from services.search.recall import Recaller


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, recaller: Recaller, assembler: ContextAssembler) -> None:
        self._recaller = recaller
        self._assembler = assembler

    async def Recall(
        self, request: search_pb2.RecallRequest, context: grpc.aio.ServicerContext
    ) -> search_pb2.RecallResponse:
        asked = requests.recall(request)
        outcome = await self._recaller.recall(
            asked.namespaces,
            asked.query,
            asked.limit,
            asked.spec,
            track_access=asked.track_access,
            min_score=asked.min_score,
            intent=asked.intent,
            asked_at=asked.asked_at,
        )
        return search_pb2.RecallResponse(
            results=[
                search_pb2.RecallResult(
                    memory=memory_to_proto(hit.memory),
                    score=hit.score,
                    keyword=search_pb2.ChannelHit(rank=hit.keyword_rank, score=hit.keyword_score),
                    vector=search_pb2.ChannelHit(rank=hit.vector_rank, score=hit.vector_score),
                    rerank_rank=hit.rerank_rank,
                    graph_boost=hit.graph_boost,
                    intent_boost=hit.intent_boost,
                )
                for hit in outcome.hits
            ],
            degraded=outcome.degraded,
            warnings=outcome.warnings,
            intent=int(outcome.intent.intent),  # type: ignore[arg-type]
            intent_basis=outcome.intent.basis,
        )

    async def AssembleContext(
        self, request: search_pb2.AssembleContextRequest, context: grpc.aio.ServicerContext
    ) -> search_pb2.AssembleContextResponse:
        asked = requests.assemble_context(request, self._assembler.check_question)
        assembled = await self._assembler.assemble(asked)
        return context_to_proto(assembled)


def context_to_proto(assembled: AssembledContext) -> search_pb2.AssembleContextResponse:
    return search_pb2.AssembleContextResponse(
        context=assembled.text,
        token_count=assembled.token_count,
        token_budget=assembled.budget,
        tokenizer=assembled.tokenizer,
        degraded=assembled.degraded,
        warnings=assembled.warnings,
        sections=[
            search_pb2.ContextSection(
                kind=int(section.kind),  # type: ignore[arg-type]
                memories=[memory_to_proto(m) for m in section.memories],
                entities=[
                    search_pb2.ContextEntity(
                        id=e.id,
                        namespace=e.namespace,
                        name=e.name,
                        entity_type=e.entity_type,
                        relations=e.relations,
                    )
                    for e in section.entities
                ],
                token_count=section.tokens,
                token_budget=section.budget,
            )
            for section in assembled.sections
        ],
    )
