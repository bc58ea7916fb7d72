"""The store's write rules, each in one place: create memories, write a new
version, soft delete, purge, and index a memory's vector or queue its embed job
(storing a vector that arrived with the write first).

Every write path calls these inside its writer operation: Remember and Import,
Modify, Delete, Forget, Recover, the pipeline's controlled writes (ADD, UPDATE,
DELETE), document chunks, embed results and the retention sweep. They never
await and never call out; the SQL is in the repository modules. Whether the
store takes writes at all is the writer's one check (Writer.check_writable).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from services.common import clock, restatement
from services.common.errors import InvalidArgument
from services.common.memory_record import MemoryRecord
from services.common.normalize import NormalizedContent
from services.common.text import MAX_SENTENCES
from services.common.vectors import normalized_f32, normalized_parts_f16
from services.storage.connection import Connection
from services.storage.store import extraction_sql as link_sql
from services.storage.store import graph_sql
from services.storage.store import repository as repo
from services.storage.store.job_enums import JobKind
from services.store import session_lifecycle

# ---- vectors ------------------------------------------------------------------------


# The history events the store writes (engram.store.v1.HistoryEventType names
# each; tests/test_contracts.py checks the two agree).
CREATED_EVENT = "created"
MODIFIED_EVENT = "modified"
DELETED_EVENT = "deleted"
RECOVERED_EVENT = "recovered"
PURGED_EVENT = "purged"
MERGED_EVENT = "merged"  # soft-deleted as a near-duplicate of another (services/store/dedup.py)
# Who removes expired memories (the retention sweep, or a write that meets an
# expired twin): the same actor as the rest of retention.
RETENTION_ACTOR = "retention"
EXPIRED_REASON = "short-term memory expired"


@dataclass(frozen=True, slots=True)
class SuppliedVector:
    """A vector that arrived with a write: normalised float32 bytes and its
    model; `parts`, its content's sentence vectors (services/common/vectors.py
    normalized_parts_f16), when the embed job sent them."""

    model: str
    blob: bytes
    parts: bytes | None = None

    @property
    def dimensions(self) -> int:
        return len(self.blob) // 4


def normalized_vector_bytes(vector: Sequence[float], field: str) -> bytes:
    """A vector a caller supplied (an embed job's result, a document's chunk,
    an extracted fact's), as SuppliedVector.blob; INVALID_ARGUMENT on `field`
    when the index cannot take it."""
    if len(vector) % 8:  # the sign-bit index packs 8 dimensions per byte
        raise InvalidArgument(field, "dimensions must be a multiple of 8")
    blob = normalized_f32(vector)
    if blob is None:
        raise InvalidArgument(field, "must be a non-empty, finite, non-zero vector")
    return blob


def normalized_parts(flat: Sequence[float], dimensions: int, field: str) -> bytes | None:
    """Supplied sentence vectors, as SuppliedVector.parts (None: none)."""
    if dimensions > 0 and len(flat) > MAX_SENTENCES * dimensions:
        raise InvalidArgument(field, f"at most {MAX_SENTENCES} sentence vectors")
    try:
        return normalized_parts_f16(flat, dimensions)
    except ValueError as exc:
        raise InvalidArgument(field, str(exc)) from None


class VectorTarget(NamedTuple):
    """A live memory whose content needs a vector, with the embed job it gets
    when none is at hand (built ahead, off the writer thread, on the hot path)."""

    memory_id: str
    namespace: str
    content_hash: str
    embed_job: repo.JobRow


def vector_target(
    memory_id: str, namespace: str, content_hash: str, max_attempts: int, at: str
) -> VectorTarget:
    return VectorTarget(
        memory_id,
        namespace,
        content_hash,
        repo.job_row(namespace, memory_id, JobKind.EMBED, max_attempts, at),
    )


def index_mismatch(
    model: str, dimensions: int | None, current: tuple[str, int | None] | None
) -> str:
    """Why the vector index cannot take vectors of `model` with `dimensions`
    ("" when it can): another model, or another size once the first vector set it."""
    if current is None or current[0] != model:
        return "model"
    if dimensions is not None and current[1] is not None and current[1] != dimensions:
        return "dimensions"
    return ""


def store_vector(
    conn: Connection, namespace: str, content_hash: str, vector: SuppliedVector, at: str
) -> bool:
    """Keep `namespace`'s vector for this content when the index takes it (its
    model; its size, or the first vector sets the size); False otherwise."""
    current = repo.index_model(conn)
    if index_mismatch(vector.model, vector.dimensions, current):
        return False
    assert current is not None
    if current[1] is None:  # the first vector the index accepts sets its size
        repo.set_index_model(conn, vector.model, vector.dimensions, at)
    repo.upsert_embedding(
        conn,
        namespace,
        content_hash,
        vector.model,
        vector.blob,
        vector.dimensions,
        at,
        parts=vector.parts,
    )
    return True


def index_or_enqueue(
    conn: Connection, targets: Sequence[VectorTarget], also_enqueue: Sequence[repo.JobRow] = ()
) -> set[str]:
    """Index each target whose namespace holds a vector of the index model for
    its content (its own namespace's only: another's must neither skip an embed
    job nor be observable); queue the embed job of every other, with
    `also_enqueue`, in one statement. Returns the ids indexed."""
    hashes: dict[str, list[str]] = {}
    for target in targets:
        hashes.setdefault(target.namespace, []).append(target.content_hash)
    embedded: set[tuple[str, str]] = set()
    for namespace, of_namespace in hashes.items():
        unique = list(dict.fromkeys(of_namespace))
        embedded.update(
            (namespace, h) for h in repo.live_hashes_with_embedding(conn, namespace, unique)
        )
    indexed = [t.memory_id for t in targets if (t.namespace, t.content_hash) in embedded]
    jobs = [t.embed_job for t in targets if (t.namespace, t.content_hash) not in embedded]
    jobs.extend(also_enqueue)
    if jobs:
        repo.enqueue_jobs(conn, jobs)
    if indexed:
        repo.index_memories(conn, indexed)
    return set(indexed)


def drop_unused_vectors(conn: Connection, namespace: str, content_hashes: Sequence[str]) -> int:
    """Stored vectors of these contents that no memory of the namespace holds any more."""
    return repo.delete_unused_embeddings(conn, namespace, content_hashes)


# ---- create -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory to create: its row, its `created` event and its jobs, built
    before the writer sees them (the writer only deduplicates and executes)."""

    row: repo.MemoryRow
    history: repo.HistoryRow
    target: VectorTarget
    extract_job: repo.JobRow | None  # None: never extracted (a derived fact, a chunk)
    vector: SuppliedVector | None = None
    # On its session's timeline (Remember, Import, AppendTurn): it follows the
    # session's previous memory by a `temporal` link (seed 003 "Hot path").
    timeline: bool = False
    # its session takes part in consolidation (services/store/session_lifecycle.py)
    consolidate: bool = False
    # the valid time the write named (event_time or valid_from), None when it named
    # none: only such a write can restate a kept memory (a re-sent write without
    # one is a retry, which writes nothing)
    stated_at: str | None = None


@dataclass(frozen=True, slots=True)
class Created:
    memory_id: str
    deduplicated: bool  # a live memory of the namespace already held the content
    vector_stored: bool = False  # the supplied vector was kept


# The `created` event's metadata differs only by type on the hot path: encode each once.
_CREATED_METADATA: dict[str, str] = {}


def _created_metadata(memory_type: str, extra: dict[str, Any] | None) -> str:
    if extra:
        return json.dumps({"version": 1, "type": memory_type, **extra}, separators=(",", ":"))
    text = _CREATED_METADATA.get(memory_type)
    if text is None:
        text = _CREATED_METADATA[memory_type] = json.dumps(
            {"version": 1, "type": memory_type}, separators=(",", ":")
        )
    return text


def new_memory(
    row: repo.MemoryRow,
    *,
    actor: str,
    reason: str,
    max_attempts: int,
    metadata: dict[str, Any] | None = None,
    extract: bool = True,
    vector: SuppliedVector | None = None,
    timeline: bool = False,
    consolidate: bool = False,
    stated_at: str | None = None,
) -> NewMemory:
    """`metadata`: more for the `created` event than its version and type;
    `timeline`: see NewMemory.timeline; `consolidate`: a memory of a session
    that is tracked for consolidation."""
    at = row.created_at
    return NewMemory(
        row,
        repo.HistoryRow(
            repo.new_id(),
            row.id,
            row.namespace,
            CREATED_EVENT,
            None,
            row.content,
            actor,
            reason,
            _created_metadata(row.type, metadata),
            at,
        ),
        vector_target(row.id, row.namespace, row.content_hash, max_attempts, at),
        repo.job_row(row.namespace, row.id, JobKind.EXTRACT, max_attempts, at) if extract else None,
        vector,
        timeline,
        consolidate and bool(row.session_id),
        stated_at,
    )


def outlives(new_expire_at: str | None, old_expire_at: str | None) -> bool:
    """Whether a memory expiring at `new_expire_at` (None: never) lives longer
    than one expiring at `old_expire_at`."""
    if old_expire_at is None:
        return False
    return new_expire_at is None or new_expire_at > old_expire_at


def create(conn: Connection, items: Sequence[NewMemory]) -> list[Created]:
    """Create each item unless a live memory of its namespace (or an earlier
    item of the batch) holds its content; then that memory's id, deduplicated.
    A duplicate never shortens a life: the memory kept takes the later expiry
    of the two (none when either is long-term). An expired twin (gone from
    reads, not yet swept) never deduplicates: it is purged here, as the
    retention sweep would, and the item is created.

    One statement per table for the whole batch: rows (FTS by trigger),
    `created` events, jobs; a content the namespace embedded before is indexed
    at once instead of getting an embed job. A fresh memory of a session
    tracked for consolidation tells the session's lifecycle, in this
    transaction (services/store/session_lifecycle.py)."""
    known: dict[tuple[str, str], repo.Twin | int] = {}  # a stored twin, or an index in `fresh`
    hashes: dict[str, list[str]] = {}
    for item in items:
        hashes.setdefault(item.row.namespace, []).append(item.row.content_hash)
    for namespace, of_namespace in hashes.items():
        expired: list[PurgeTarget] = []
        for content_hash, twin in repo.twins_by_hash(conn, namespace, of_namespace).items():
            if twin.expired:
                expired.append(PurgeTarget(twin.id, namespace, content_hash))
            else:
                known[(namespace, content_hash)] = twin
        if expired:
            purge_expired(conn, expired, items[0].row.created_at)
    results: list[Created] = []
    fresh: list[NewMemory] = []
    # (the memory kept, its own valid time, the write restating it)
    restated: list[tuple[str, str, NewMemory]] = []
    for item in items:
        key = (item.row.namespace, item.row.content_hash)
        existing = known.get(key)
        if isinstance(existing, repo.Twin):
            if outlives(item.row.expire_at, existing.expire_at):
                _extend_life(conn, existing.id, item)
                known[key] = existing._replace(expire_at=item.row.expire_at)
            if item.stated_at and restatement.is_restatement(
                item.stated_at, clock.epoch_from_text(existing.valid_from)
            ):
                restated.append((existing.id, existing.valid_from, item))
            results.append(Created(existing.id, True))
            continue
        if existing is not None:
            earlier = fresh[existing]
            if outlives(item.row.expire_at, earlier.row.expire_at):
                fresh[existing] = dataclasses.replace(
                    earlier, row=earlier.row._replace(expire_at=item.row.expire_at)
                )
            if item.stated_at and restatement.is_restatement(
                item.stated_at, clock.epoch_from_text(_valid_time(earlier))
            ):
                restated.append((earlier.row.id, _valid_time(earlier), item))
            results.append(Created(earlier.row.id, True))
            continue
        known[key] = len(fresh)
        fresh.append(item)
        results.append(Created(item.row.id, False))
    if not fresh:
        _record_restatements(conn, restated)
        return results
    follows = _timeline_links(conn, fresh)
    repo.insert_memory_rows(conn, [item.row for item in fresh])
    if follows:
        link_sql.insert_links(conn, follows)
    repo.insert_history(conn, [item.history for item in fresh])
    stored = {
        item.row.id
        for item in fresh
        if item.vector is not None
        and store_vector(
            conn, item.row.namespace, item.row.content_hash, item.vector, item.row.created_at
        )
    }
    index_or_enqueue(
        conn,
        [item.target for item in fresh],
        [item.extract_job for item in fresh if item.extract_job is not None],
    )
    tracked = [item for item in fresh if item.consolidate]
    if tracked:
        session_lifecycle.track(
            conn,
            [(item.row.namespace, item.row.session_id or "") for item in tracked],
            tracked[0].row.created_at,
            tracked[0].target.embed_job.max_attempts,
        )
    _record_restatements(conn, restated)
    if stored:
        results = [Created(r.memory_id, r.deduplicated, r.memory_id in stored) for r in results]
    return results


def _valid_time(item: NewMemory) -> str:
    return item.row.valid_from or item.row.event_time


def _record_restatements(conn: Connection, restated: Sequence[tuple[str, str, NewMemory]]) -> None:
    """A `restated` event for each write that states a kept memory's content later
    than its latest statement so far (services/common/restatement.py)."""
    if not restated:
        return
    namespace_of = {memory_id: item.row.namespace for memory_id, _own, item in restated}
    own = {memory_id: valid_from for memory_id, valid_from, _item in restated}
    earlier: dict[str, list[tuple[str, str]]] = {}
    for namespace in set(namespace_of.values()):
        ids = [m for m, ns in namespace_of.items() if ns == namespace]
        earlier.update(repo.restatements(conn, namespace, ids))
    latest = {m: restatement.latest_statement(own[m], earlier.get(m, ())) for m in namespace_of}
    rows: list[repo.HistoryRow] = []
    for memory_id, _own, item in restated:
        valid_time = item.stated_at or _valid_time(item)
        if not restatement.is_restatement(valid_time, latest[memory_id]):
            continue
        latest[memory_id] = clock.epoch_from_text(valid_time)
        rows.append(
            repo.history_row(
                memory_id=memory_id,
                namespace=item.row.namespace,
                event=restatement.RESTATED_EVENT,
                old_content=None,
                new_content=item.row.content,
                actor=item.history.changed_by,
                reason=restatement.REASON,
                metadata=restatement.metadata(valid_time),
                at=item.row.created_at,
            )
        )
    if rows:
        repo.insert_history(conn, rows)


def _timeline_links(conn: Connection, fresh: Sequence[NewMemory]) -> list[link_sql.LinkRow]:
    """The `temporal` link of each new timeline memory of a session, from the
    memory before it: the first of a session in the batch follows the
    session's stored tail (read, for all the batch's sessions of a namespace
    in one statement, before the batch's rows exist), each later one the
    batch's item before it. Valid from the later memory's event time."""
    timeline = [item.row for item in fresh if item.timeline and item.row.session_id]
    if not timeline:
        return []
    sessions: dict[str, dict[str, None]] = {}
    for row in timeline:
        assert row.session_id is not None
        sessions.setdefault(row.namespace, {})[row.session_id] = None
    tails: dict[tuple[str, str], str] = {}
    for namespace, of_namespace in sessions.items():
        stored = link_sql.session_tails(conn, namespace, list(of_namespace))
        tails.update({(namespace, session): tail for session, tail in stored.items()})
    links: list[link_sql.LinkRow] = []
    for row in timeline:
        key = (row.namespace, row.session_id or "")
        previous = tails.get(key)
        if previous is not None:
            links.append(
                link_sql.LinkRow(
                    row.namespace,
                    previous,
                    row.id,
                    link_sql.TEMPORAL,
                    None,
                    row.created_at,
                    row.valid_from or row.event_time,
                )
            )
        tails[key] = row.id
    return links


def _extend_life(conn: Connection, memory_id: str, item: NewMemory) -> None:
    """The stored twin takes the duplicate's later expiry (or none): a
    `modified` event and a new version say so."""
    row = repo.fetch_one(conn, repo.get_memory_query(item.row.namespace, memory_id))
    current = MemoryRecord.from_row(row)
    new_version(
        conn,
        current,
        content=None,
        fields={"expire_at": item.row.expire_at},
        actor=item.history.changed_by,
        reason="remembered again with a longer life",
        at=item.row.created_at,
        metadata={"changes": {"expire_time": item.row.expire_at}},
        max_attempts=item.target.embed_job.max_attempts,
    )


# ---- expire -----------------------------------------------------------------------------


def purge_expired(conn: Connection, targets: Sequence[PurgeTarget], at: str) -> Purged:
    """Remove expired memories for good (the retention sweep, or a write that
    meets an expired twin of its content), each with a `purged` history event."""
    purged = purge(conn, targets, at)
    repo.insert_history(
        conn,
        [
            repo.history_row(
                memory_id=target.memory_id,
                namespace=target.namespace,
                event=PURGED_EVENT,
                old_content=None,
                new_content=None,
                actor=RETENTION_ACTOR,
                reason=EXPIRED_REASON,
                metadata={"expired": True},
                at=at,
            )
            for target in targets
        ],
    )
    return purged


def retire_expired_twins(
    conn: Connection, namespace: str, content_hashes: Sequence[str], at: str
) -> None:
    """Purge expired memories holding these contents, so that a content change
    or a recovery is not refused by a twin nobody can see any more."""
    expired = [
        PurgeTarget(twin.id, namespace, content_hash)
        for content_hash, twin in repo.twins_by_hash(conn, namespace, content_hashes).items()
        if twin.expired
    ]
    if expired:
        purge_expired(conn, expired, at)


# ---- change -----------------------------------------------------------------------------


def new_version(
    conn: Connection,
    current: MemoryRecord,
    *,
    content: NormalizedContent | None,
    fields: dict[str, Any],
    actor: str,
    reason: str,
    at: str,
    metadata: dict[str, Any],
    max_attempts: int,
    vector: SuppliedVector | None = None,
) -> int:
    """Write the next version of a live memory: new `content` (None: unchanged)
    and other column values in `fields`; the old content stays in its history
    (`modified` event with `metadata`). New content loses its vector: it is
    indexed from one at hand or gets an embed job (the old content's stored
    vector stays: a revert is indexed at once). Returns the version."""
    version = current.version + 1
    changes = dict(fields)
    if content is not None:
        retire_expired_twins(conn, current.namespace, [content.content_hash], at)
        changes.update(
            content=content.storage,
            normalized_content=content.normalized,
            content_hash=content.content_hash,
            embedding_model=None,
        )
    repo.update_memory(conn, current.id, {**changes, "version": version, "updated_at": at})
    record_event(
        conn,
        current,
        MODIFIED_EVENT,
        old_content=current.content,
        new_content=current.content if content is None else content.storage,
        actor=actor,
        reason=reason,
        at=at,
        metadata={
            "new_version": version,
            "content_changed": content is not None,
            **metadata,
        },
    )
    if content is not None:
        if vector is not None:
            store_vector(conn, current.namespace, content.content_hash, vector, at)
        index_or_enqueue(
            conn,
            [vector_target(current.id, current.namespace, content.content_hash, max_attempts, at)],
        )
    return version


def soft_delete(
    conn: Connection,
    current: MemoryRecord,
    *,
    actor: str,
    reason: str,
    at: str,
    metadata: dict[str, Any] | None = None,
    event: str = DELETED_EVENT,
) -> int:
    """Tombstone a live memory (it leaves FTS and the vector index by trigger;
    RecoverMemory brings it back within the tombstone window); a `deleted`
    event (or `event`: `merged` for a near-duplicate). Returns the new version."""
    soft_delete_many(
        conn, [current], actor=actor, reason=reason, at=at, metadata=metadata, event=event
    )
    return current.version + 1


def soft_delete_many(
    conn: Connection,
    records: Sequence[MemoryRecord],
    *,
    actor: str,
    reason: str,
    at: str,
    metadata: dict[str, Any] | None = None,
    event: str = DELETED_EVENT,
) -> None:
    """soft_delete for live memories read in this transaction: one UPDATE for all
    of them (DeleteNamespace's batches) and their events."""
    if not records:
        return
    repo.tombstone_memories(conn, [r.id for r in records], at)
    repo.insert_history(
        conn,
        [
            repo.history_row(
                memory_id=r.id,
                namespace=r.namespace,
                event=event,
                old_content=r.content,
                new_content=None,
                actor=actor,
                reason=reason,
                metadata={
                    "old_version": r.version,
                    "new_version": r.version + 1,
                    "hard": False,
                    **(metadata or {}),
                },
                at=at,
            )
            for r in records
        ],
    )


def restore_many(
    conn: Connection,
    records: Sequence[MemoryRecord],
    *,
    actor: str,
    reason: str,
    at: str,
    max_attempts: int,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Bring tombstones back (RecoverMemory, RecoverNamespace): live again with a new
    version, back in FTS and the vector index (from a stored vector, else an embed
    job), a `recovered` event each. The caller checked the tombstone window and that
    no live memory holds their contents. Recovering is a use (seed 003 decay): the
    decay clock restarts, so a memory pruned as weak is not pruned again at once."""
    if not records:
        return
    repo.restore_memories(conn, [r.id for r in records], at)
    index_or_enqueue(
        conn, [vector_target(r.id, r.namespace, r.content_hash, max_attempts, at) for r in records]
    )
    repo.insert_history(
        conn,
        [
            repo.history_row(
                memory_id=r.id,
                namespace=r.namespace,
                event=RECOVERED_EVENT,
                old_content=None,
                new_content=r.content,
                actor=actor,
                reason=reason,
                metadata={
                    "old_version": r.version,
                    "new_version": r.version + 1,
                    **(metadata or {}),
                },
                at=at,
            )
            for r in records
        ],
    )


def record_deletion(
    conn: Connection,
    record: MemoryRecord,
    *,
    actor: str,
    reason: str,
    at: str,
    metadata: dict[str, Any],
    event: str = DELETED_EVENT,
) -> None:
    """The `deleted` event of a soft delete or a forced (hard) forget."""
    record_event(
        conn,
        record,
        event,
        old_content=record.content,
        new_content=None,
        actor=actor,
        reason=reason,
        at=at,
        metadata=metadata,
    )


def record_event(
    conn: Connection,
    record: MemoryRecord,
    event: str,
    *,
    old_content: str | None,
    new_content: str | None,
    actor: str,
    reason: str,
    at: str,
    metadata: dict[str, Any],
) -> None:
    """A history event on `record` as it was before the change (its version is
    the event's `old_version`)."""
    repo.insert_history(
        conn,
        [
            repo.history_row(
                memory_id=record.id,
                namespace=record.namespace,
                event=event,
                old_content=old_content,
                new_content=new_content,
                actor=actor,
                reason=reason,
                metadata={"old_version": record.version, **metadata},
                at=at,
            )
        ],
    )


# ---- purge ------------------------------------------------------------------------------


class PurgeTarget(NamedTuple):
    memory_id: str
    namespace: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class Purged:
    memories: int
    entities_removed: int
    relations_removed: int


def purge(conn: Connection, targets: Sequence[PurgeTarget], at: str) -> Purged:
    """Remove memories for good with everything that points at them: links from
    and to them, their chunk rows, entity mentions (an entity left unmentioned
    goes with its relations), jobs, the row (its FTS entry and vector index row
    go by trigger) and the stored vectors of their contents that no memory of
    the namespace holds any more. History stays: callers record why. No orphan
    is left (diagnostics `orphans`)."""
    mentioned: list[str] = []
    by_namespace: dict[str, list[str]] = {}
    for target in targets:
        repo.delete_links(conn, target.memory_id)
        repo.delete_chunk_rows(conn, target.memory_id)
        for entity_id in graph_sql.mentioned_entities(conn, target.memory_id):
            graph_sql.delete_mention(conn, target.memory_id, entity_id, at)
            mentioned.append(entity_id)
        repo.hard_delete_memory(conn, target.memory_id)
        by_namespace.setdefault(target.namespace, []).append(target.content_hash)
    entities, relations = graph_sql.delete_orphaned_entities(conn, list(dict.fromkeys(mentioned)))
    for namespace, hashes in by_namespace.items():
        drop_unused_vectors(conn, namespace, hashes)
    return Purged(len(targets), entities, relations)


def purge_target(record: MemoryRecord) -> PurgeTarget:
    return PurgeTarget(record.id, record.namespace, record.content_hash)
