"""Superseding: a newer version of a fact replaces an older one without
rewriting it (issue 17, seed 003 "knowledge evolution").

The one write rule behind a ModifyMemories patch with `supersede`, a
pipeline UPDATE and a near-duplicate that states the same fact with another
value (services/store/dedup.py, where the new version exists already and
`close` is the whole rule): the new version is a new memory whose validity starts at
`valid_from`; the old one keeps its content and gets its validity closed at
that same instant (`valid_until`, unless a known end comes first, with
`invalidated_at` the transaction time of the close, so point-in-time reads
before it still see the old value, and a memory superseded once is not
superseded again); a
`supersedes` link goes from the new memory to the old one. Both get history:
the new one its `created` event naming what it supersedes, the old one a
`modified` event naming its successor. Never awaits, never calls out: it runs
inside the caller's writer operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.memory_record import MemoryRecord
from services.storage.connection import Connection
from services.storage.store import extraction_sql as links
from services.storage.store import repository as repo
from services.store import mutations

# Why a supersede cannot apply (the caller reports it its own way).
ALREADY_SUPERSEDED = "already_superseded"  # the old version's validity is closed already
STARTS_BEFORE_TARGET = "starts_before_target"  # valid_from is before the old one's own
DUPLICATE = "duplicate"  # another open memory holds the new content
UNCHANGED = "unchanged"  # the new content is the old one's


@dataclass(frozen=True)
class Superseded:
    new_memory_id: str
    old_version: int  # the old memory's version after the close


def refusal(
    conn: Connection, old: MemoryRecord, content_hash: str, valid_from: str
) -> tuple[str, str]:
    """Why `old` cannot be superseded by a memory with this content valid from
    `valid_from` ("" when it can), and the open twin's id for DUPLICATE."""
    if old.superseded_at is not None:
        return ALREADY_SUPERSEDED, ""
    if valid_from < (old.valid_from or old.event_time):
        return STARTS_BEFORE_TARGET, ""
    if content_hash == old.content_hash:
        return UNCHANGED, ""
    twin = repo.live_ids_by_hash(conn, old.namespace, [content_hash]).get(content_hash)
    if twin is not None:
        return DUPLICATE, twin
    return "", ""


def supersede(
    conn: Connection,
    old: MemoryRecord,
    new: mutations.NewMemory,
    *,
    actor: str,
    reason: str,
    at: str,
    job_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    evidence: Sequence[str] = (),
) -> Superseded:
    """Create `new` (its row's `valid_from` is set, and `refusal` found nothing)
    and close `old` at that instant. `metadata`: more for both events;
    `evidence`: the memories that justify the replacement (the `supersedes`
    link's)."""
    valid_from = new.row.valid_from
    assert valid_from is not None, "a superseding memory names when it starts"
    [created] = mutations.create(conn, [new])
    assert not created.deduplicated, "refusal() checks for an open twin first"
    version = close(
        conn,
        old,
        created.memory_id,
        valid_from,
        actor=actor,
        reason=reason,
        at=at,
        job_id=job_id,
        metadata=metadata,
        evidence=evidence,
        max_attempts=new.target.embed_job.max_attempts,
    )
    return Superseded(created.memory_id, version)


def close(
    conn: Connection,
    old: MemoryRecord,
    new_id: str,
    valid_from: str,
    *,
    actor: str,
    reason: str,
    at: str,
    max_attempts: int,
    job_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    evidence: Sequence[str] = (),
) -> int:
    """Close `old` for the memory `new_id`, true from `valid_from`: `old`'s
    validity ends then (its `modified` event names `superseded_by`), the
    `supersedes` link goes from `new_id` to it, and its relations to other
    facts end with it. Returns `old`'s version after the close. For a
    successor that exists already (a near-duplicate with a newer value,
    services/store/dedup.py) this is the whole rule; `supersede` creates one
    first."""
    until = min(old.valid_until or valid_from, valid_from)
    version = mutations.new_version(
        conn,
        old,
        content=None,
        # a known end (a short-term fact's) that comes first stays
        fields={"valid_until": until, "invalidated_at": at},
        actor=actor,
        reason=reason,
        at=at,
        metadata={
            "changes": {"valid_until": until},
            "superseded_by": new_id,
            **(metadata or {}),
        },
        max_attempts=max_attempts,
    )
    links.insert_link(
        conn,
        old.namespace,
        new_id,
        old.id,
        links.SUPERSEDES,
        job_id,
        at,
        valid_from=valid_from,
        evidence=evidence,
    )
    # The old version's relations to other facts end with it; its versions,
    # sources and place in its session stay (services/storage/store/extraction_sql.py).
    links.close_relation_links(conn, old.namespace, old.id, until)
    return version


def new_history_metadata(old: MemoryRecord, valid_from: str) -> dict[str, Any]:
    """What the new version's `created` event says about the one it replaces."""
    return {"supersedes": old.id, "valid_from": valid_from}
