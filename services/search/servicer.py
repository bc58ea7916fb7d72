"""SearchService: translate proto <-> domain, nothing else."""

from __future__ import annotations

import grpc

from engram.search.v1 import search_pb2, search_pb2_grpc
from services.common import clock
from services.common.convert import (
    filter_from_proto,
    memory_to_proto,
    text_from_timestamp,
    with_as_of,
)
from services.common.errors import Violations
from services.common.validation import (
    DEFAULT_NAMESPACE,
    check_session_id,
    validate_namespaces,
)
from services.search.context import AssembledContext, ContextAssembler
from services.search.query_intent import Intent
from services.search.recall import Recaller

_INTENTS = frozenset(int(i) for i in Intent)


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, recaller: Recaller, assembler: ContextAssembler) -> None:
        self._recaller = recaller
        self._assembler = assembler

    async def Recall(
        self, request: search_pb2.RecallRequest, context: grpc.aio.ServicerContext
    ) -> search_pb2.RecallResponse:
        bad = Violations()
        if request.intent not in search_pb2.QueryIntent.values():
            bad.add("intent", "must be a QueryIntent value")
        asked_at = bad.check(
            None, text_from_timestamp, request.asked_at, request.HasField("asked_at"), "asked_at"
        )
        outcome = await self._recaller.recall(
            bad.check(
                (DEFAULT_NAMESPACE,), validate_namespaces, request.namespaces, request.namespace
            ),
            request.query,
            request.limit,
            with_as_of(filter_from_proto(request.filter, bad=bad), request, bad),
            track_access=not request.skip_access_tracking,
            min_score=request.min_score if request.HasField("min_score") else None,
            bad=bad,
            intent=Intent(request.intent) if request.intent in _INTENTS else Intent.UNSPECIFIED,
            asked_at=clock.from_text(asked_at) if asked_at else None,
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
        bad = Violations()
        assembled = await self._assembler.assemble(
            bad.check((DEFAULT_NAMESPACE,), validate_namespaces, request.namespaces),
            request.query,
            request.token_budget,
            bad.check("", check_session_id, request.session_id, "session_id")
            if request.session_id
            else "",
            as_of=bad.check(
                None, text_from_timestamp, request.as_of, request.HasField("as_of"), "as_of"
            ),
            bad=bad,
        )
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
