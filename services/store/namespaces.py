"""Removing a whole namespace (issue 35): DeleteNamespace and RecoverNamespace.

A deletion is ForgetMemories' two steps for the whole namespace: a preview that
counts what it holds with a confirm token bound to it, then an execute that
soft-deletes every memory live when it began (mutations.soft_delete_many, the
soft-delete rule), all with one deleted time. Its audit row (namespace_sql) keeps
that time, so recovery brings back exactly those memories (mutations.restore_many,
RecoverMemory's rule) within the tombstone window; after it, the retention
sweep's tombstone steps purge them like any tombstone (services/store/admin.py).

The memories go through the single writer in transactions of at most BATCH: a
50,000-memory namespace is 100 short transactions, and other writes queue behind
one of them at most, instead of behind one transaction holding the write lock for
the whole namespace."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from services.common import clock
from services.common.errors import FailedPrecondition, NotFound
from services.common.memory_record import MemoryRecord
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.store import namespace_sql as sql
from services.storage.store import repository as repo
from services.store import mutations
from services.store.inputs import DeleteNamespaceInput, RecoverNamespaceInput
from services.store.writer import Writer

# Memories per writer transaction.
BATCH = 500
NAMESPACE_DELETED = "namespace_deleted"  # the `deleted` events' metadata key
NANOS_PER_DAY = 86_400 * 10**9


@dataclass(frozen=True)
class Contents:
    memories: int
    pinned_memories: int
    deleted_memories: int
    entities: int
    documents: int
    last_change: str | None

    @classmethod
    def from_row(cls, row: Any) -> Contents:
        return cls(
            int(row["memories"]),
            int(row["pinned_memories"]),
            int(row["deleted_memories"]),
            int(row["entities"]),
            int(row["documents"]),
            row["last_change"],
        )

    def token(self, namespace: str) -> str:
        """Binds the namespace and its live memories as they are (how many, how many
        pinned, the last change to any): an execute deletes what a preview counted."""
        body = json.dumps(
            [
                "delete-namespace-v1",
                namespace,
                self.memories,
                self.pinned_memories,
                self.last_change,
            ]
        )
        return base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()[:18]).decode()


@dataclass(frozen=True)
class Deletion:
    contents: Contents
    confirm_token: str  # a preview's only
    deleted_count: int = 0
    deleted_at: str | None = None
    recover_until: str | None = None


@dataclass(frozen=True)
class Recovery:
    recovered: int
    skipped_duplicates: int
    deletions: tuple[str, ...]  # the deleted times recovered from


class Namespaces:
    def __init__(
        self, writer: Writer, reads: ReadPool, *, tombstone_days: float, max_job_attempts: int
    ) -> None:
        self._writer = writer
        self._reads = reads
        self._tombstone_days = tombstone_days
        self._max_attempts = max_job_attempts

    async def delete(self, asked: DeleteNamespaceInput) -> Deletion:
        """A preview counts what would go, with a token bound to it; an execute
        needs that token."""
        namespace, execute, reason = asked.namespace, asked.execute, asked.reason
        confirm_token, actor = asked.confirm_token, asked.actor
        if not execute:
            contents = Contents.from_row(await self._reads.fetch_one(sql.contents_query(namespace)))
            return Deletion(contents, contents.token(namespace))
        if not confirm_token:
            raise FailedPrecondition(
                "deleting a namespace needs the confirm_token of a PREVIEW",
                reason="CONFIRM_TOKEN_REQUIRED",
            )
        began = clock.now_text()

        def first(conn: Connection) -> tuple[Contents, int]:
            """Check the token and record the deletion (so that recovery finds its
            memories even if the store stops before the last batch), then the
            first batch, in one transaction."""
            contents = Contents.from_row(repo.fetch_one(conn, sql.contents_query(namespace)))
            if confirm_token != contents.token(namespace):
                raise FailedPrecondition(
                    "confirm_token does not match the namespace as it is now; preview again",
                    reason="CONFIRM_TOKEN_MISMATCH",
                )
            sql.record_deletion(
                conn,
                {"namespace": namespace, "deleted_at": began, "memories": contents.memories},
                began,
            )
            return contents, self._delete_batch(conn, namespace, began, actor, reason)

        contents, deleted = await self._writer.submit(first)
        done = deleted
        while done == BATCH:
            done = await self._writer.submit(
                lambda conn: self._delete_batch(conn, namespace, began, actor, reason)
            )
            deleted += done
        return Deletion(
            contents,
            "",
            deleted,
            began,
            clock.plus_nanos(began, int(self._tombstone_days * NANOS_PER_DAY)),
        )

    def _delete_batch(
        self, conn: Connection, namespace: str, began: str, actor: str, reason: str
    ) -> int:
        rows = repo.fetch_all(conn, sql.live_batch_query(namespace, began, BATCH))
        mutations.soft_delete_many(
            conn,
            [MemoryRecord.from_row(r) for r in rows],
            actor=actor,
            reason=reason,
            at=began,
            metadata={NAMESPACE_DELETED: True},
        )
        return len(rows)

    async def recover(self, asked: RecoverNamespaceInput) -> Recovery:
        namespace, reason, actor = asked.namespace, asked.reason, asked.actor
        deletions = [
            str(result["deleted_at"])
            for result in (
                json.loads(row["result"])
                for row in await self._reads.fetch_all(sql.deletions_query())
            )
            if result.get("namespace") == namespace
        ]
        if not deletions:
            raise NotFound(f"namespace {namespace} was never deleted with DeleteNamespace")
        cutoff = clock.days_ago_text(self._tombstone_days)
        within = tuple(d for d in deletions if d >= cutoff)
        if not within:
            raise FailedPrecondition(
                f"namespace {namespace} was deleted more than {self._tombstone_days:g} days "
                "ago; retention purges its memories",
                reason="RETENTION_EXPIRED",
            )
        recovered = skipped = 0
        for deleted_at in within:
            after = 0  # rowids start at 1
            while True:

                def batch(
                    conn: Connection, d: str = deleted_at, a: int = after
                ) -> tuple[int, int, int]:
                    return self._recover_batch(conn, namespace, d, a, actor, reason)

                restored, left, after = await self._writer.submit(batch)
                recovered += restored
                skipped += left
                if restored + left < BATCH:
                    break
        return Recovery(recovered, skipped, within)

    def _recover_batch(
        self, conn: Connection, namespace: str, deleted_at: str, after: int, actor: str, reason: str
    ) -> tuple[int, int, int]:
        """(recovered, left deleted, the last rowid read) of the next batch of one
        deletion's tombstones, those after rowid `after`."""
        rows = repo.fetch_all(conn, sql.deleted_batch_query(namespace, deleted_at, after, BATCH))
        records = [MemoryRecord.from_row(r) for r in rows]
        taken = set(repo.live_ids_by_hash(conn, namespace, [r.content_hash for r in records]))
        back: list[MemoryRecord] = []
        for record in records:
            if record.content_hash in taken:  # a live memory (or one recovered here) has it
                continue
            taken.add(record.content_hash)
            back.append(record)
        mutations.restore_many(
            conn,
            back,
            actor=actor,
            reason=reason,
            at=clock.now_text(),
            max_attempts=self._max_attempts,
            metadata={NAMESPACE_DELETED: deleted_at},
        )
        return len(back), len(records) - len(back), int(rows[-1]["position"]) if rows else after
