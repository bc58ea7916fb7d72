"""SuiteService: the store's suite id and where the suite's services listen, for
clients given only the store's address and for the other services
(services/common/suite.py)."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.config import Config


class SuiteServicer(store_pb2_grpc.SuiteServiceServicer):
    def __init__(self, suite_id: str, config: Config, store_port: Callable[[], int]) -> None:
        self._suite_id = suite_id
        self._ports = config.server.ports
        self._store_port = store_port  # the bound port, known once the listener is up

    async def GetSuite(
        self, request: store_pb2.GetSuiteRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetSuiteResponse:
        return store_pb2.GetSuiteResponse(
            suite_id=self._suite_id,
            store_port=self._store_port(),
            search_port=self._ports.search,
            pipeline_port=self._ports.pipeline,
            maintenance_port=self._ports.maintenance,
        )
