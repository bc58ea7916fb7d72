"""AccessService (internal): recall's access counts, from the search service."""

from __future__ import annotations

import grpc

from engram.store.internal.v1 import access_pb2, access_pb2_grpc
from services.store import requests
from services.store.memories import MemoryStore


class AccessServicer(access_pb2_grpc.AccessServiceServicer):
    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def RecordAccess(
        self, request: access_pb2.RecordAccessRequest, context: grpc.aio.ServicerContext
    ) -> access_pb2.RecordAccessResponse:
        updated = await self._store.record_access(requests.record_access(request))
        return access_pb2.RecordAccessResponse(updated_count=updated)
