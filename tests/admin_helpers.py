"""Helpers for store-admin and maintenance tests: a store with its admin, job
queue and memory stubs, direct writes to the test's database (SQLite or
Postgres: tests/backend_db.py) for states the API cannot reach (a corrupted
index, an old timestamp), and table snapshots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

import backend_db
from engram.common.v1 import job_pb2
from engram.store.internal.v1 import admin_pb2_grpc, job_queue_pb2_grpc
from engram.store.internal.v1 import job_queue_pb2 as jq
from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.clock import days_ago_text
from services.storage.dialect import Dialect

MODEL = "fake-embed"
DIM = 8
# Every table a repair or sweep could touch (the audit table is compared apart).
TABLES = (
    "memories",
    "memory_history",
    "memory_jobs",
    "embeddings",
    "memory_vectors",
    "entities",
    "relations",
    "memory_entity_mentions",
    "memory_links",
    "documents",
    "document_memories",
)


@dataclass
class AdminStore:
    db: Path
    port: int
    internal_port: int  # the store's internal listener (job queue, admin, documents)
    store: store_pb2_grpc.MemoryStoreServiceStub
    jobs: job_queue_pb2_grpc.JobQueueServiceStub
    admin: admin_pb2_grpc.StoreAdminServiceStub
    thread: Any  # conftest.ServerThread running the store

    def remember(self, content: str, **fields: Any) -> str:
        return str(
            self.store.Remember(store_pb2.RememberRequest(content=content, **fields)).memory.id
        )

    def delete(self, memory_id: str, **fields: Any) -> None:
        self.store.DeleteMemory(
            store_pb2.DeleteMemoryRequest(id=memory_id, reason="test", **fields)
        )

    def embed_all(self, vector: list[float] | None = None) -> int:
        """Lease every embed job and complete it with `vector` (one per content)."""
        jobs = list(
            self.jobs.LeaseJobs(
                jq.LeaseJobsRequest(job_type=job_pb2.JOB_TYPE_EMBED, max_jobs=500)
            ).jobs
        )
        if not jobs:
            return 0
        vector = vector or [1.0] + [0.5] * (DIM - 1)
        self.jobs.CompleteEmbedJobs(
            jq.CompleteEmbedJobsRequest(
                model=MODEL,
                results=[
                    jq.EmbedResult(
                        lease=jq.JobLease(job_id=j.id, lease_token=j.lease_token),
                        content_hash=j.content_hash,
                        vector=vector,
                    )
                    for j in jobs
                ],
            )
        )
        return len(jobs)

    def execute(self, sql: str, *params: Any) -> int:
        """Write to the database directly, as a crash or a bug could have."""
        return backend_db.execute(self.db, sql, *params)

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in backend_db.rows(self.db, sql, *params)]

    @property
    def dialect(self) -> Dialect:
        """ "sqlite" or "postgres": the backend this store runs on."""
        return backend_db.dialect(self.db)

    def scalar(self, sql: str, *params: Any) -> Any:
        return self.rows(sql, *params)[0][0]

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table a repair could touch, plus the FTS index's own
        entries (docsize), so 'changed nothing else' is an equality check."""
        tables = {t: sorted(self.rows(f"SELECT * FROM {t}"), key=repr) for t in TABLES}
        tables["fts_index"] = sorted(self.rows(backend_db.FTS_ENTRIES[self.dialect.name]))
        return tables

    def rowid(self, memory_id: str) -> int:
        return int(self.scalar("SELECT rowid FROM memories WHERE id = ?", memory_id))

    def index_stray_vector(self, rowid: int, bits: bytes) -> None:
        """A vector-index row for `rowid` written apart from its memory, as a bug
        could have: sign bits on SQLite, a halfvec of DIM dimensions on Postgres."""
        if self.dialect.is_postgres:
            self.execute(
                "INSERT INTO memory_vectors(memory_rowid, namespace, embedding)"
                " VALUES (?, 'default', ?::halfvec)",
                rowid,
                str([1.0] + [0.0] * (DIM - 1)),
            )
        else:
            self.execute(
                "INSERT INTO memory_vectors(memory_rowid, namespace, bits) VALUES (?, 'default', ?)",
                rowid,
                bits,
            )

    def audit_actions(self) -> list[str]:
        """maintenance_audit's actions in the order they were written."""
        order = backend_db.INSERTION_ORDER[self.dialect.name]
        return [r[0] for r in self.rows(f"SELECT action FROM maintenance_audit ORDER BY {order}")]

    def age(self, table: str, column: str, days: float, where: str, *params: Any) -> None:
        """Move a timestamp `days` into the past (tests cannot wait for weeks)."""
        self.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", days_ago_text(days), *params)


def admin_store(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any], **overrides: Any
) -> AdminStore:
    config = make_config(
        **{
            "providers.embedding.kind": "ollama",
            "providers.embedding.model": MODEL,
            "memory.pipelineV2.enabled": True,  # so that Remember queues extract jobs
            # the job counts these tests check are of embed and extract jobs: no
            # near-duplicate checks queued as vectors come in
            "dedup.enabled": False,
            **overrides,
        }
    )
    server, store = start_store_server(config)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}")
    return AdminStore(
        db=Path(config.storage.path),
        port=server.app.port,
        internal_port=server.app.internal_port,
        store=store,
        jobs=job_queue_pb2_grpc.JobQueueServiceStub(channel),
        admin=admin_pb2_grpc.StoreAdminServiceStub(channel),
        thread=server,
    )
