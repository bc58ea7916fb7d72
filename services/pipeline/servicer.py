"""PipelineService: translate proto <-> domain, nothing else."""

from __future__ import annotations

from typing import Any

import grpc

from engram.pipeline.v1 import pipeline_pb2 as pb
from engram.pipeline.v1 import pipeline_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.internal.v1 import job_queue_pb2_grpc
from services.common import provider_state
from services.common.convert import timestamp_from_text
from services.common.pii import PiiGate
from services.pipeline.document_servicer import DocumentRpcs
from services.pipeline.extract_servicer import ExtractRpcs
from services.pipeline.status import ProviderHealth, WorkerStatus

_WORKER_STATES = {
    "idle": pb.WORKER_STATE_IDLE,
    "busy": pb.WORKER_STATE_BUSY,
    "backoff": pb.WORKER_STATE_BACKOFF,
    "stopped": pb.WORKER_STATE_STOPPED,
}


class PipelineServicer(ExtractRpcs, DocumentRpcs, pipeline_pb2_grpc.PipelineServiceServicer):
    def __init__(
        self,
        jobs: job_queue_pb2_grpc.JobQueueServiceAsyncStub,
        providers: list[ProviderHealth],
        workers: list[WorkerStatus],
        *,
        extraction: Any = None,
        documents: Any = None,
        pii: PiiGate | None = None,
        llm_configured: bool = True,
    ) -> None:
        self.extraction = extraction
        self.llm_configured = llm_configured
        if pii is not None:
            self.pii = pii
        self.documents = documents
        self._jobs = jobs
        self._providers = providers
        self._workers = workers

    async def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStatusResponse:
        stats: jq.GetQueueStatsResponse | None = None
        store_error = ""
        try:
            stats = await self._jobs.GetQueueStats(jq.GetQueueStatsRequest())
        except grpc.aio.AioRpcError as exc:
            store_error = f"{exc.code().name}: {exc.details()}"
        response = pb.GetStatusResponse(
            providers=[
                pb.ProviderStatus(
                    role=p.role,
                    kind=p.kind,
                    model=p.model,
                    state=provider_state.to_proto(p.state),
                    last_error=p.last_error,
                    check_time=timestamp_from_text(p.checked_at),
                    chain_position=p.position,
                )
                for p in self._providers
            ],
            workers=[
                pb.WorkerStatus(
                    name=w.name,
                    state=_WORKER_STATES[w.state],
                    completed_count=w.completed,
                    failed_count=w.failed,
                    released_count=w.released,
                    last_error=w.last_error,
                    last_batch_time=timestamp_from_text(w.last_batch_at),
                )
                for w in self._workers
            ],
            store_available=stats is not None,
            store_error=store_error,
        )
        if stats is not None:
            response.queue.extend(stats.counts)
            response.index_model = stats.index_model
            response.indexed_memory_count = stats.indexed_memory_count
            response.live_memory_count = stats.live_memory_count
        return response
