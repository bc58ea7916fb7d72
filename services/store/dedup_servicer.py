"""DedupService (internal): the pipeline's near-duplicate decisions."""

from __future__ import annotations

import grpc

from engram.store.internal.v1 import dedup_pb2, dedup_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from services.common.convert import memory_to_proto
from services.store import requests
from services.store.dedup import DedupStore, LeaseLost


class DedupServicer(dedup_pb2_grpc.DedupServiceServicer):
    def __init__(self, dedup: DedupStore) -> None:
        self._dedup = dedup

    async def ResolveNearDuplicate(
        self, request: dedup_pb2.ResolveNearDuplicateRequest, context: grpc.aio.ServicerContext
    ) -> dedup_pb2.ResolveNearDuplicateResponse:
        survivor = await self._dedup.resolve(
            requests.near_duplicate(request),
            (request.lease.job_id, request.lease.lease_token)
            if request.HasField("lease")
            else None,
        )
        if isinstance(survivor, LeaseLost):
            return dedup_pb2.ResolveNearDuplicateResponse(applied=False, lease_lost=True)
        if survivor is None:
            return dedup_pb2.ResolveNearDuplicateResponse(applied=False)
        return dedup_pb2.ResolveNearDuplicateResponse(
            applied=True, survivor=memory_to_proto(survivor)
        )

    async def CompleteNearDuplicateJobs(
        self,
        request: dedup_pb2.CompleteNearDuplicateJobsRequest,
        context: grpc.aio.ServicerContext,
    ) -> dedup_pb2.CompleteNearDuplicateJobsResponse:
        held = await self._dedup.complete_checks(
            [(lease.job_id, lease.lease_token) for lease in request.leases]
        )
        return dedup_pb2.CompleteNearDuplicateJobsResponse(
            outcomes=[jq.LEASE_OUTCOME_OK if h else jq.LEASE_OUTCOME_LEASE_LOST for h in held]
        )
