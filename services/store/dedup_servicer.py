"""DedupService (internal): the pipeline's near-duplicate decisions."""

from __future__ import annotations

import grpc

from engram.store.internal.v1 import dedup_pb2, dedup_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from services.common.convert import memory_to_proto
from services.common.errors import Violations
from services.store.dedup import DedupStore, LeaseLost, NearDuplicateDecision
from services.store.requests import namespace_of

_ACTIONS = {
    dedup_pb2.NEAR_DUPLICATE_ACTION_MERGE: "merge",
    dedup_pb2.NEAR_DUPLICATE_ACTION_KEEP_BOTH: "keep_both",
    dedup_pb2.NEAR_DUPLICATE_ACTION_SUPERSEDE: "supersede",
}


class DedupServicer(dedup_pb2_grpc.DedupServiceServicer):
    def __init__(self, dedup: DedupStore) -> None:
        self._dedup = dedup

    async def ResolveNearDuplicate(
        self, request: dedup_pb2.ResolveNearDuplicateRequest, context: grpc.aio.ServicerContext
    ) -> dedup_pb2.ResolveNearDuplicateResponse:
        bad = Violations()
        survivor = await self._dedup.resolve(
            NearDuplicateDecision(
                namespace=namespace_of(bad, request.namespace),
                survivor_id=request.survivor_id,
                duplicate_id=request.duplicate_id,
                action=_ACTIONS.get(request.action, ""),
                similarity=request.similarity,
                reason=request.reason,
                decided_by=request.decided_by,
            ),
            bad,
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
