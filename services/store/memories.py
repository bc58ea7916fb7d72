"""The memory lifecycle: remember, import, read, modify, delete, forget, recover,
history. Validation and decisions live here; SQL lives in the repository; all
writes go through the single writer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common import clock
from services.common.config import PiiSettings
from services.common.errors import (
    AlreadyExists,
    EngramError,
    ErrorKind,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    VersionConflict,
)
from services.common.memory_record import MemoryRecord
from services.common.pii import PiiAction, PiiGate, PiiPolicy
from services.storage.connection import Connection
from services.storage.db import ReadPool
from services.storage.dialect import Dialect
from services.storage.store import repository as repo
from services.storage.store.admin_sql import purged_marker_query
from services.store import mutations, rules, supersede
from services.store.inputs import (
    AccessInput,
    ForgetInput,
    ForgetSelection,
    GetMemoryInput,
    HistoryInput,
    ListMemoriesInput,
    ModifyInput,
    OneMemoryChange,
    Patch,
)
from services.store.page_tokens import encode_page_token
from services.store.privacy import PrivacyBlocked, PrivacyPolicy
from services.store.rules import MemoryDraft
from services.store.writer import Writer

MAX_PAGE_SIZE = 500
DEFAULT_LIST_PAGE_SIZE = 50
DEFAULT_HISTORY_PAGE_SIZE = 100
MAX_PATCHES = 200
MAX_FORGET = 200
FORGET_CONFIRM_THRESHOLD = 25
MAX_ACCESS_IDS = 1000
# ImportMemories: items per stream (store.proto). Its reply lists a result per
# item, so the cap bounds the reply (about 2.5 MB at most, under gRPC's default
# 4 MB receive limit) and the memory that holds the results until then.
MAX_IMPORT_STREAM_ITEMS = 25_000
# Valid items are committed in chunks of this many as the stream arrives...
IMPORT_CHUNK = 500
# ...with at most this many chunks queued at the writer while more are read:
# a client that sends faster than the store commits waits (gRPC flow control)
# instead of filling the store's memory.
IMPORT_CHUNKS_IN_FLIGHT = 2


class ImportStreamLimit(EngramError):
    """A stream's item past MAX_IMPORT_STREAM_ITEMS. Every item before it was read
    and is committed when this is raised (not INVALID_ARGUMENT, which writes
    nothing); the message and metadata say how many, and where to go on from."""

    kind = ErrorKind.RESOURCE_EXHAUSTED
    reason = "IMPORT_STREAM_LIMIT"

    def __init__(self, stored: int, failed: int) -> None:
        last = MAX_IMPORT_STREAM_ITEMS
        super().__init__(
            f"ImportMemories takes at most {last} items per stream: items 0 to {last - 1} "
            f"were read and are committed ({stored} stored, created or deduplicated; "
            f"{failed} invalid, not stored), item {last} and later were not read; send "
            "them in another stream (sending the first ones again gives their results: "
            "the stored ones come back DEDUPLICATED)",
            metadata={"committed": str(stored), "failed": str(failed), "next_index": str(last)},
        )


@dataclass(frozen=True, slots=True)
class ImportOutcome:
    index: int
    status: str  # created | deduplicated | failed
    memory_id: str = ""
    error: str = ""


@dataclass(frozen=True)
class PatchOutcome:
    id: str
    # updated | unchanged | version_conflict | not_found | duplicate_content |
    # already_superseded | starts_before_target
    status: str
    current_version: int = 0
    new_version: int = 0
    content_changed: bool = False
    duplicate_memory_id: str = ""
    new_memory_id: str = ""  # supersede: the memory that replaces this one


@dataclass(frozen=True)
class ForgetOutcome:
    candidates: tuple[MemoryRecord, ...]
    confirm_token: str  # a preview's only
    deleted_count: int
    hard_deleted: bool
    more_matching: bool = False  # more memories match than the limit let in
    matching_count: int = 0  # how many match in all


@dataclass(frozen=True)
class HistoryEntry:
    id: str
    memory_id: str
    event: str
    old_content: str | None
    new_content: str | None
    actor: str
    reason: str
    metadata: dict[str, Any]
    created_at: str

    @classmethod
    def from_row(cls, r: Any) -> HistoryEntry:
        """From a row of repository.history_query."""
        return cls(
            id=r["id"],
            memory_id=r["memory_id"],
            event=r["event"],
            old_content=r["old_content"],
            new_content=r["new_content"],
            actor=r["changed_by"],
            reason=r["reason"],
            metadata=json.loads(r["metadata"]),
            created_at=r["created_at"],
        )


class MemoryStore:
    def __init__(
        self,
        writer: Writer,
        reads: ReadPool,
        *,
        max_job_attempts: int = 3,
        tombstone_days: float = 30,
        extract_on_create: bool = False,
        privacy: PrivacyPolicy | None = None,
        pii: PiiGate | None = None,
        consolidate_sessions: bool = False,
    ) -> None:
        """`extract_on_create`: `memory.pipelineV2.enabled`. A new memory gets an
        `extract` job only then: nothing would ever take it otherwise, and the
        queue would grow with every memory (StoreAdminService.BackfillExtraction
        queues the memories remembered while it was off). `consolidate_sessions`
        (services.common.config.consolidation_enabled): the sessions of new
        memories are tracked, and consolidated when they end."""
        self._writer = writer
        self._reads = reads
        # the SQL the database speaks: reads and the writer are on the same one
        self._dialect = reads.dialect
        self._max_attempts = max_job_attempts
        self._tombstone_days = tombstone_days
        self._extract = extract_on_create
        self._consolidate = consolidate_sessions
        self.privacy = privacy or PrivacyPolicy({})
        self._pii = pii or PiiGate(PiiSettings())

    @property
    def reads(self) -> ReadPool:
        """The read pool, for read-only services over the same file (ExplainMemory)."""
        return self._reads

    def pii_policy(self, namespace: str, requested: PiiAction | None) -> PiiPolicy:
        """The PII policy of a write to `namespace` (`requested`: the request's own)."""
        return self._pii.policy(namespace, requested)

    # ---- remember / import -----------------------------------------------------

    async def remember(self, draft: MemoryDraft, privacy: str = "") -> tuple[MemoryRecord, bool]:
        """Raw-first: row, FTS, history and jobs commit together before we reply.
        `privacy`: the request's level (PRIVACY_BLOCKED when it, or the
        namespace's, forbids the write)."""
        self.privacy.check_write(draft.namespace, privacy, long_term=draft.long_term)
        [prepared] = prepare_drafts(
            [draft],
            clock.now_text(),
            self._max_attempts,
            extract=self._extract,
            consolidate=self._consolidate,
        )
        # Concurrent Remembers in one writer group run as one batch: one statement
        # per table for all of them (dedup within the batch included).
        return await self._writer.submit_batched(_remember_batch, (draft, prepared))

    def start_import(self) -> ImportSession:
        """One ImportMemories stream (refused at once when mutations are frozen)."""
        self._writer.check_writable()
        return ImportSession(
            self._writer,
            self._max_attempts,
            extract=self._extract,
            privacy=self.privacy,
            consolidate=self._consolidate,
        )

    async def import_drafts(
        self, items: Sequence[MemoryDraft | InvalidArgument]
    ) -> list[ImportOutcome]:
        """The whole of `items` as one import stream (a convenience for callers
        that already hold every item, such as benchmarks)."""
        session = self.start_import()
        try:
            for item in items:
                await session.add(item)
            return await session.finish()
        finally:
            await session.close()

    # ---- reads -------------------------------------------------------------------

    async def get(self, asked: GetMemoryInput) -> MemoryRecord:
        """The inputs here come from services/store/requests.py, every field valid."""
        namespace, memory_id = asked.namespace, asked.id
        row = await self._reads.fetch_one(repo.get_memory_query(namespace, memory_id))
        if row is None:
            raise NotFound(f"memory {memory_id} not found in namespace {namespace}")
        return MemoryRecord.from_row(row)

    async def list_memories(self, asked: ListMemoriesInput) -> tuple[list[MemoryRecord], str]:
        """Live memories newest first; with `deleted`, the tombstones that can
        still be recovered (deleted within the tombstone window), most recently
        deleted first."""
        namespace, spec, size, after = asked.namespace, asked.spec, asked.page_size, asked.after
        deleted, kind, scope = asked.deleted, asked.kind, asked.scope
        if deleted:
            query = repo.list_tombstones_query(
                namespace,
                spec,
                clock.days_ago_text(self._tombstone_days),
                after,
                size + 1,
                dialect=self._dialect,
            )
        else:
            query = repo.list_memories_query(
                namespace, spec, after, size + 1, dialect=self._dialect
            )
        rows = await self._reads.fetch_all(query)
        records = [MemoryRecord.from_row(r) for r in rows[:size]]
        next_token = ""
        if len(rows) > size:
            last = records[-1]
            key = last.deleted_at if deleted else last.created_at
            next_token = encode_page_token(kind, scope, [key, last.id])
        return records, next_token

    async def history(self, asked: HistoryInput) -> tuple[list[HistoryEntry], str]:
        namespace, memory_id, size = asked.namespace, asked.memory_id, asked.page_size
        after_seq, scope = asked.after_seq, asked.scope
        rows = await self._reads.fetch_all(
            repo.history_query(namespace, memory_id, after_seq or 0, size + 1)
        )
        if (
            not rows
            and after_seq is None
            and await self._reads.fetch_one(repo.get_memory_query(namespace, memory_id)) is None
        ):
            raise NotFound(f"memory {memory_id} not found in namespace {namespace}")
        entries = [HistoryEntry.from_row(r) for r in rows[:size]]
        next_token = ""
        if len(rows) > size:
            next_token = encode_page_token("history", scope, [rows[size - 1]["seq"]])
        return entries, next_token

    # ---- modify --------------------------------------------------------------------

    async def modify(self, asked: ModifyInput) -> list[PatchOutcome]:
        """Every patch in one transaction (each with its own outcome)."""
        namespace, actor = asked.namespace, asked.actor

        def operation(conn: Connection) -> list[PatchOutcome]:
            at = clock.now_text()
            return [self._apply_patch(conn, namespace, patch, actor, at) for patch in asked.patches]

        return await self._writer.submit(operation)

    def _apply_patch(
        self, conn: Connection, namespace: str, patch: Patch, actor: str, at: str
    ) -> PatchOutcome:
        row = repo.fetch_one(conn, repo.get_memory_query(namespace, patch.id))
        if row is None or row["is_deleted"]:
            return PatchOutcome(patch.id, "not_found")
        version = row["version"]
        if patch.if_version is not None and patch.if_version != version:
            return PatchOutcome(patch.id, "version_conflict", version, version)
        current = MemoryRecord.from_row(row)
        # Raised inside the transaction: the whole request writes nothing.
        self.privacy.check_write(namespace, "", long_term=current.expire_at is None)
        if patch.supersede:
            return self._supersede(conn, current, patch, actor, at)
        changes: dict[str, Any] = {}
        changed: dict[str, Any] = {}
        content_changed = patch.content is not None and patch.content.storage != current.content
        if (
            content_changed
            and patch.content is not None
            and patch.content.content_hash != current.content_hash
        ):
            other = repo.live_ids_by_hash(conn, namespace, [patch.content.content_hash])
            if other:
                return PatchOutcome(
                    patch.id,
                    "duplicate_content",
                    version,
                    version,
                    duplicate_memory_id=other[patch.content.content_hash],
                )
        for name, new in (("type", patch.type), ("who", patch.who)):
            if new is not None and new != getattr(current, name):
                changes[name] = changed[name] = new
        if patch.tags is not None and patch.tags != current.tags:
            changes["tags"] = json.dumps(list(patch.tags))
            changed["tags"] = list(patch.tags)
        if patch.categories is not None and patch.categories != current.categories:
            changes["categories"] = json.dumps(list(patch.categories))
            changed["categories"] = list(patch.categories)
        pinned = current.pinned if patch.pinned is None else patch.pinned
        importance = current.importance if patch.importance is None else patch.importance
        importance = rules.effective_importance(pinned, importance)
        if pinned != current.pinned:
            changes["pinned"] = int(pinned)
            changed["pinned"] = pinned
        if importance != current.importance:
            changes["importance"] = changed["importance"] = importance
        if patch.decay_rate is not None and patch.decay_rate != current.decay_rate:
            changes["decay_rate"] = changed["decay_rate"] = patch.decay_rate
        if not changes and not content_changed:
            return PatchOutcome(patch.id, "unchanged", version, version)
        new_version = mutations.new_version(
            conn,
            current,
            content=patch.content if content_changed else None,
            fields=changes,
            actor=actor,
            reason=patch.reason,
            at=at,
            metadata={"changes": changed},
            max_attempts=self._max_attempts,
        )
        return PatchOutcome(patch.id, "updated", version, new_version, content_changed)

    def _supersede(
        self, conn: Connection, current: MemoryRecord, patch: Patch, actor: str, at: str
    ) -> PatchOutcome:
        """A new memory with the patch's content (and its other fields, the rest
        copied from `current`) replaces `current`, which keeps its content and
        gets its validity closed (services/store/supersede.py)."""
        version = current.version
        valid_from = patch.valid_from or at
        content = patch.content
        assert content is not None  # the parse step requires it with supersede
        why, twin = supersede.refusal(conn, current, content.content_hash, valid_from)
        if why == supersede.DUPLICATE:
            return PatchOutcome(
                patch.id, "duplicate_content", version, version, duplicate_memory_id=twin
            )
        if why:
            status = "unchanged" if why == supersede.UNCHANGED else why
            return PatchOutcome(patch.id, status, version, version)
        pinned = current.pinned if patch.pinned is None else patch.pinned
        importance = current.importance if patch.importance is None else patch.importance
        new = mutations.new_memory(
            repo.MemoryRow(
                repo.new_id(),
                current.namespace,
                content.storage,
                content.normalized,
                content.content_hash,
                current.type if patch.type is None else patch.type,
                rules.effective_importance(pinned, importance),
                json.dumps(list(current.tags if patch.tags is None else patch.tags)),
                int(pinned),
                current.who if patch.who is None else patch.who,
                current.why,
                current.source_type,
                "",
                at,
                valid_from,
                session_id=current.session_id or None,
                expire_at=current.expire_at,
                valid_from=valid_from,
                categories=json.dumps(
                    list(current.categories if patch.categories is None else patch.categories)
                ),
                decay_rate=current.decay_rate if patch.decay_rate is None else patch.decay_rate,
            ),
            actor=actor,
            reason=patch.reason,
            max_attempts=self._max_attempts,
            metadata=supersede.new_history_metadata(current, valid_from),
            extract=self._extract and current.expire_at is None,
        )
        done = supersede.supersede(conn, current, new, actor=actor, reason=patch.reason, at=at)
        return PatchOutcome(
            patch.id, "updated", version, done.old_version, new_memory_id=done.new_memory_id
        )

    # ---- delete / forget / recover ----------------------------------------------

    async def delete(self, asked: OneMemoryChange) -> MemoryRecord:
        namespace, memory_id, reason, actor = asked.namespace, asked.id, asked.reason, asked.actor
        if_version, force = asked.if_version, asked.force

        def operation(conn: Connection) -> MemoryRecord:
            record = self._load(conn, namespace, memory_id)
            if record.deleted:
                raise FailedPrecondition(
                    f"memory {memory_id} is already deleted", reason="ALREADY_DELETED"
                )
            _check_version(record, if_version)
            if record.pinned and not force:
                raise FailedPrecondition(
                    f"memory {memory_id} is pinned; pass force to delete it",
                    reason="PINNED_REQUIRES_FORCE",
                )
            mutations.soft_delete(conn, record, actor=actor, reason=reason, at=clock.now_text())
            return self._load(conn, namespace, memory_id)

        return await self._writer.submit(operation)

    async def forget(self, asked: ForgetInput) -> ForgetOutcome:
        """A preview lists the candidates with a token bound to them; an execute
        over FORGET_CONFIRM_THRESHOLD candidates needs that token, so nobody
        deletes that many without having been shown them."""
        namespace, selection, execute = asked.namespace, asked.selection, asked.execute
        reason, confirm_token, actor = asked.reason, asked.confirm_token, asked.actor
        query, count_query = _selection_queries(asked, self._dialect)
        limit = selection.limit or MAX_FORGET

        if not execute:
            rows = await self._reads.fetch_all(query)
            candidates = tuple(MemoryRecord.from_row(r) for r in rows[:limit])
            more = len(rows) > limit
            return ForgetOutcome(
                candidates,
                _confirm_token(namespace, selection, candidates),
                0,
                False,
                more_matching=more,
                matching_count=int((await self._reads.fetch_one(count_query))[0])
                if more
                else len(candidates),
            )

        def operation(conn: Connection) -> ForgetOutcome:
            rows = repo.fetch_all(conn, query)
            candidates = tuple(MemoryRecord.from_row(r) for r in rows[:limit])
            more = len(rows) > limit
            matching = int(repo.fetch_one(conn, count_query)[0]) if more else len(candidates)
            token = _confirm_token(namespace, selection, candidates)
            if confirm_token and confirm_token != token:
                raise FailedPrecondition(
                    "confirm_token does not match the current candidate set; preview again",
                    reason="CONFIRM_TOKEN_MISMATCH",
                )
            if len(candidates) > FORGET_CONFIRM_THRESHOLD and not confirm_token:
                # The token is not in the error: it comes from a preview alone.
                raise FailedPrecondition(
                    f"{len(candidates)} candidates exceed {FORGET_CONFIRM_THRESHOLD}; "
                    "run a PREVIEW and pass its confirm_token",
                    reason="CONFIRM_TOKEN_REQUIRED",
                    metadata={"candidate_count": str(len(candidates))},
                )
            at = clock.now_text()
            if selection.purge:
                mutations.purge(conn, [mutations.purge_target(r) for r in candidates], at)
                for record in candidates:
                    mutations.record_deletion(
                        conn, record, actor=actor, reason=reason, at=at, metadata={"hard": True}
                    )
            else:
                for record in candidates:
                    mutations.soft_delete(conn, record, actor=actor, reason=reason, at=at)
            return ForgetOutcome(
                candidates,
                "",
                len(candidates),
                selection.purge,
                more_matching=more,
                matching_count=matching,
            )

        return await self._writer.submit(operation)

    async def recover(self, asked: OneMemoryChange) -> MemoryRecord:
        namespace, memory_id, reason, actor = asked.namespace, asked.id, asked.reason, asked.actor
        if_version = asked.if_version

        def operation(conn: Connection) -> MemoryRecord:
            if repo.fetch_one(conn, purged_marker_query(namespace, memory_id)) is not None:
                raise FailedPrecondition(
                    f"memory {memory_id} was purged by retention after its tombstone window",
                    reason="RETENTION_EXPIRED",
                )
            record = self._load(conn, namespace, memory_id)
            if not record.deleted:
                raise FailedPrecondition(f"memory {memory_id} is not deleted", reason="NOT_DELETED")
            if record.deleted_at is None or record.deleted_at < clock.days_ago_text(
                self._tombstone_days
            ):
                raise FailedPrecondition(
                    f"memory {memory_id} was deleted more than {self._tombstone_days:g} days ago",
                    reason="RETENTION_EXPIRED",
                )
            _check_version(record, if_version)
            duplicate = repo.live_ids_by_hash(conn, namespace, [record.content_hash])
            if duplicate:
                other = duplicate[record.content_hash]
                raise AlreadyExists(
                    f"memory {other} already holds this content",
                    reason="DUPLICATE_CONTENT",
                    metadata={"duplicate_memory_id": other},
                )
            mutations.restore_many(
                conn,
                [record],
                actor=actor,
                reason=reason,
                at=clock.now_text(),
                max_attempts=self._max_attempts,
            )
            return self._load(conn, namespace, memory_id)

        return await self._writer.submit(operation)

    async def record_access(self, asked: AccessInput) -> int:
        """Access tracking: counters only; content, history and FTS stay untouched."""
        namespace, memory_ids = asked.namespace, asked.memory_ids
        counts: dict[str, int] = {}
        for memory_id in memory_ids:
            counts[memory_id] = counts.get(memory_id, 0) + 1
        if not counts:
            return 0
        return await self._writer.submit(
            lambda conn: repo.record_access(conn, namespace, counts, clock.now_text())
        )

    def _load(self, conn: Connection, namespace: str, memory_id: str) -> MemoryRecord:
        row = repo.fetch_one(conn, repo.get_memory_query(namespace, memory_id))
        if row is None:
            raise NotFound(f"memory {memory_id} not found in namespace {namespace}")
        return MemoryRecord.from_row(row)


def _selection_queries(asked: ForgetInput, dialect: Dialect) -> tuple[repo.Query, repo.Query]:
    """The candidates' query and the count of every match."""
    selection = asked.selection
    limit = selection.limit if 0 < selection.limit <= MAX_FORGET else MAX_FORGET
    selected = (
        asked.namespace,
        selection.ids,
        list(asked.terms),
        asked.spec,
        selection.include_pinned,
    )
    # One more than the limit, to tell the caller that more memories match.
    return (
        repo.forget_candidates_query(*selected, limit + 1, dialect=dialect),
        repo.forget_candidates_query(*selected, 0, dialect=dialect, count=True),
    )


def _confirm_token(
    namespace: str, selection: ForgetSelection, candidates: Sequence[MemoryRecord]
) -> str:
    """Binds the selection, its mode and exactly this candidate set (ids and
    versions): an execute confirms what a preview of the same request showed."""
    body = "\n".join(
        [
            "forget-v3",
            namespace,
            json.dumps(
                [
                    sorted(selection.ids),
                    selection.query,
                    selection.spec.fingerprint(),
                    selection.limit or MAX_FORGET,
                ]
            ),
            f"include_pinned={selection.include_pinned}",
            f"purge={selection.purge}",
            *sorted(f"{c.id}@{c.version}" for c in candidates),
        ]
    )
    return base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()[:18]).decode()


def _check_version(record: MemoryRecord, if_version: int | None) -> None:
    if if_version is not None and if_version != record.version:
        raise VersionConflict(if_version, record.version)


def _page_size(requested: int, default: int) -> int:
    if requested < 0 or requested > MAX_PAGE_SIZE:
        raise InvalidArgument("page_size", f"must be between 0 and {MAX_PAGE_SIZE}")
    return requested or default


class ImportSession:
    """One ImportMemories stream, committed as it arrives.

    Valid items are committed in chunks of IMPORT_CHUNK, in stream order, each
    chunk its own writer transaction (an acknowledged chunk is committed); rows
    for the next chunk are built on the event loop while the writer executes the
    previous one. Nothing holds the stream: only each item's outcome (for the
    reply) and the items of the chunk being filled. If the stream stops early,
    the whole chunks before that point are committed and the rest is dropped."""

    def __init__(
        self,
        writer: Writer,
        max_attempts: int,
        *,
        extract: bool,
        privacy: PrivacyPolicy,
        consolidate: bool = False,
    ) -> None:
        self._writer = writer
        self._consolidate = consolidate
        self._privacy = privacy
        self._max_attempts = max_attempts
        self._extract = extract
        self._outcomes: list[ImportOutcome | None] = []
        self._pending: list[tuple[int, MemoryDraft]] = []
        self._in_flight: deque[asyncio.Future[list[ImportOutcome]]] = deque()

    @property
    def count(self) -> int:
        """Items received so far (the stream index of the next one)."""
        return len(self._outcomes)

    async def add(self, item: MemoryDraft | InvalidArgument) -> None:
        """The next item of the stream (an invalid one as its error)."""
        index = len(self._outcomes)
        if index >= MAX_IMPORT_STREAM_ITEMS:
            await self._refuse_past_limit()
        if not isinstance(item, InvalidArgument):
            try:  # the namespace's privacy level (an import item names none)
                self._privacy.check_write(item.namespace, "", long_term=item.long_term)
            except PrivacyBlocked as blocked:
                item = InvalidArgument(f"items[{index}]", f"PRIVACY_BLOCKED: {blocked.message}")
        if isinstance(item, InvalidArgument):
            self._outcomes.append(ImportOutcome(index, "failed", error=item.message))
            return
        self._outcomes.append(None)
        self._pending.append((index, item))
        if len(self._pending) >= IMPORT_CHUNK:
            await self._flush()

    async def _refuse_past_limit(self) -> None:
        """Commit every item read (the partial chunk too: the reply then says
        exactly what is stored), then ImportStreamLimit."""
        outcomes = await self.finish()
        stored = sum(1 for outcome in outcomes if outcome.status != "failed")
        raise ImportStreamLimit(stored, len(outcomes) - stored)

    async def finish(self) -> list[ImportOutcome]:
        """Commit what is pending; every item's outcome, in stream order."""
        await self._flush()
        while self._in_flight:
            self._settle(await self._in_flight.popleft())
        return [outcome for outcome in self._outcomes if outcome is not None]

    async def close(self) -> None:
        """The stream is over, however it ended: drop the items of the partial
        chunk and wait until the chunks already queued are committed, so that
        an error reply comes after every whole chunk before it."""
        self._pending = []
        while self._in_flight:
            with contextlib.suppress(Exception):
                await self._in_flight.popleft()

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        while len(self._in_flight) >= IMPORT_CHUNKS_IN_FLIGHT:
            self._settle(await self._in_flight.popleft())
        prepared = prepare_drafts(
            [draft for _, draft in batch],
            clock.now_text(),
            self._max_attempts,
            extract=self._extract,
            consolidate=self._consolidate,
        )
        indexes = [index for index, _ in batch]

        def operation(conn: Connection) -> list[ImportOutcome]:
            return [
                ImportOutcome(index, "deduplicated" if c.deduplicated else "created", c.memory_id)
                for index, c in zip(indexes, mutations.create(conn, prepared), strict=True)
            ]

        self._in_flight.append(
            asyncio.ensure_future(self._writer.submit(operation, retryable=True))
        )
        # Let the chunk reach the writer's queue before the next one is read.
        await asyncio.sleep(0)

    def _settle(self, outcomes: list[ImportOutcome]) -> None:
        for outcome in outcomes:
            self._outcomes[outcome.index] = outcome


def prepare_drafts(
    drafts: Sequence[MemoryDraft],
    at: str,
    max_attempts: int,
    *,
    extract: bool,
    consolidate: bool = False,
) -> list[mutations.NewMemory]:
    """The rows of Remembered or imported drafts, built before the writer sees them;
    `extract`: each gets an `extract` job (the pipeline is enabled); `consolidate`:
    their sessions are tracked for consolidation."""
    new_id = repo.new_id
    new_memory = mutations.new_memory
    prepared: list[mutations.NewMemory] = []
    for draft in drafts:
        content = draft.content
        prepared.append(
            new_memory(
                repo.MemoryRow(
                    new_id(),
                    draft.namespace,
                    content.storage,
                    content.normalized,
                    content.content_hash,
                    draft.type,
                    draft.importance,
                    json.dumps(list(draft.tags)),
                    int(draft.pinned),
                    draft.who,
                    draft.why,
                    draft.source_type,
                    draft.source_id,
                    at,
                    draft.event_time or at,
                    session_id=draft.session_id or None,
                    expire_at=draft.expire_at
                    if draft.ttl_nanos is None
                    else clock.plus_nanos(at, draft.ttl_nanos),
                    valid_from=draft.valid_from,
                    categories=json.dumps(list(draft.categories)),
                    temporal_class=draft.temporal_class,
                    valid_until=draft.valid_until,
                    confidence=draft.confidence,
                    decay_rate=draft.decay_rate,
                ),
                actor=draft.actor or draft.who or rules.DEFAULT_ACTOR,
                reason=draft.why or "remember",
                max_attempts=max_attempts,
                # A short-term memory is not distilled: facts derived from it
                # would outlive the ttl it was given.
                extract=extract and draft.long_term,
                timeline=True,
                consolidate=consolidate,
                stated_at=draft.valid_from or draft.event_time or None,
            )
        )
    return prepared


def _remember_batch(
    conn: Connection, batch: list[tuple[MemoryDraft, mutations.NewMemory]]
) -> list[tuple[MemoryRecord, bool]]:
    """(record, deduplicated) per Remember, written in this transaction."""
    out: list[tuple[MemoryRecord, bool]] = []
    created = mutations.create(conn, [new for _, new in batch])
    # A duplicate later in the batch may have lengthened a new memory's life.
    reread = {r.memory_id for r in created if r.deduplicated}
    for (draft, new), result in zip(batch, created, strict=True):
        if result.deduplicated or result.memory_id in reread:
            row = repo.fetch_one(conn, repo.get_memory_query(draft.namespace, result.memory_id))
            out.append((MemoryRecord.from_row(row), result.deduplicated))
        else:
            out.append((_new_record(draft, new.row), False))
    return out


def _new_record(draft: MemoryDraft, row: repo.MemoryRow) -> MemoryRecord:
    """The record of a freshly inserted memory, without a re-read."""
    return MemoryRecord(
        id=row.id,
        namespace=draft.namespace,
        content=draft.content.storage,
        content_hash=draft.content.content_hash,
        type=draft.type,
        importance=draft.importance,
        tags=tuple(draft.tags),
        pinned=draft.pinned,
        who=draft.who,
        why=draft.why,
        source_type=draft.source_type,
        source_id=draft.source_id,
        version=1,
        deleted=False,
        deleted_at=None,
        created_at=row.created_at,
        updated_at=row.created_at,
        event_time=row.event_time,
        access_count=0,
        last_accessed=None,
        session_id=row.session_id or "",
        expire_at=row.expire_at,
        valid_from=row.valid_from or row.event_time,
        valid_until=row.valid_until,
        categories=tuple(draft.categories),
        temporal_class=row.temporal_class,
        confidence=row.confidence,
        decay_rate=row.decay_rate,
    )
