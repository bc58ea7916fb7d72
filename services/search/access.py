"""Access tracking off the critical path: recall drops ids into a queue; a
background task sends them to the store in batches (RecordAccess)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Sequence

import grpc

from engram.store.internal.v1 import access_pb2, access_pb2_grpc

log = logging.getLogger("engram.search.access")


class AccessRecorder:
    def __init__(
        self,
        store: access_pb2_grpc.AccessServiceAsyncStub,
        *,
        flush_interval_s: float = 1.0,
        max_pending: int = 100_000,
    ) -> None:
        self._store = store
        self._interval = flush_interval_s
        self._max_pending = max_pending
        self._pending: dict[str, list[str]] = defaultdict(list)
        self._count = 0
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    def record(self, namespace: str, memory_ids: Sequence[str]) -> None:
        """Never blocks and never fails: past `max_pending` ids are dropped."""
        if self._count + len(memory_ids) > self._max_pending:
            self.dropped += len(memory_ids)
            return
        self._pending[namespace].extend(memory_ids)
        self._count += len(memory_ids)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending, self._count = self._pending, defaultdict(list), 0
        for namespace, ids in pending.items():
            for start in range(0, len(ids), 1000):
                try:
                    await self._store.RecordAccess(
                        access_pb2.RecordAccessRequest(
                            namespace=namespace, memory_ids=ids[start : start + 1000]
                        )
                    )
                except grpc.RpcError as exc:
                    self.dropped += len(ids[start : start + 1000])
                    log.warning("access tracking batch dropped", extra={"error": str(exc)})
