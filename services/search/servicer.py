"""SearchService: translate proto <-> domain, nothing else."""

from __future__ import annotations

import grpc

from engram.search.v1 import search_pb2, search_pb2_grpc
from services.common.convert import filter_from_proto, memory_to_proto
from services.common.errors import Violations
from services.common.validation import DEFAULT_NAMESPACE, validate_namespace
from services.search.recall import Recaller


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, recaller: Recaller) -> None:
        self._recaller = recaller

    async def Recall(
        self, request: search_pb2.RecallRequest, context: grpc.aio.ServicerContext
    ) -> search_pb2.RecallResponse:
        bad = Violations()
        outcome = await self._recaller.recall(
            bad.check(DEFAULT_NAMESPACE, validate_namespace, request.namespace),
            request.query,
            request.limit,
            filter_from_proto(request.filter, bad=bad),
            track_access=not request.skip_access_tracking,
            min_score=request.min_score if request.HasField("min_score") else None,
            bad=bad,
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
                )
                for hit in outcome.hits
            ],
            degraded=outcome.degraded,
            warnings=outcome.warnings,
        )
