"""SQL for ExplainMemory: a memory's links followed through memory_links,
every row read under the caller's namespace (a link never leads out of it)."""

from __future__ import annotations

from services.storage.memory_filter_sql import not_expired_sql
from services.storage.store.extraction_sql import DERIVED_FROM, SUPERSEDES
from services.storage.store.repository import _M_COLUMNS, Query

MAX_CHAIN = 100  # versions followed each way, and derivations listed


def _chain(namespace: str, memory_id: str, start: str, step: str) -> Query:
    """Memories reached from `memory_id` by `supersedes` links, nearest first:
    `start`/`step` name the link column followed (to_memory_id: back to older
    versions; from_memory_id: forward to newer ones)."""
    other = "from_memory_id" if start == "to_memory_id" else "to_memory_id"
    return (
        "WITH RECURSIVE chain(id, depth) AS ("
        f"SELECT {start}, 1 FROM memory_links WHERE namespace = ? AND {other} = ? "
        "AND link_type = ? "
        f"UNION SELECT l.{step}, c.depth + 1 FROM memory_links l JOIN chain c "
        f"ON l.{other} = c.id WHERE l.namespace = ? AND l.link_type = ? AND c.depth < ?) "
        f"SELECT {_M_COLUMNS} FROM (SELECT id, min(depth) AS depth FROM chain GROUP BY id) c "
        "JOIN memories m ON m.id = c.id AND m.namespace = ? "
        f"WHERE m.id <> ? AND {not_expired_sql('m')} ORDER BY c.depth, m.id LIMIT ?",
        [
            namespace,
            memory_id,
            SUPERSEDES,
            namespace,
            SUPERSEDES,
            MAX_CHAIN,
            namespace,
            memory_id,
            MAX_CHAIN,
        ],
    )


def older_versions(namespace: str, memory_id: str) -> Query:
    """What the memory superseded, and what that superseded, ... nearest first."""
    return _chain(namespace, memory_id, "to_memory_id", "to_memory_id")


def newer_versions(namespace: str, memory_id: str) -> Query:
    """What superseded the memory, and what superseded that, ... nearest first."""
    return _chain(namespace, memory_id, "from_memory_id", "from_memory_id")


def derived_from(namespace: str, memory_id: str) -> Query:
    """The memories this one was derived from."""
    return (
        f"SELECT {_M_COLUMNS} FROM memory_links l JOIN memories m "
        "ON m.id = l.to_memory_id AND m.namespace = l.namespace "
        f"WHERE l.namespace = ? AND l.from_memory_id = ? AND l.link_type = ? "
        f"AND {not_expired_sql('m')} ORDER BY m.created_at, m.id LIMIT ?",
        [namespace, memory_id, DERIVED_FROM, MAX_CHAIN],
    )


def derivations(namespace: str, memory_id: str) -> Query:
    """The memories derived from this one, oldest first."""
    return (
        f"SELECT {_M_COLUMNS} FROM memory_links l JOIN memories m "
        "ON m.id = l.from_memory_id AND m.namespace = l.namespace "
        f"WHERE l.namespace = ? AND l.to_memory_id = ? AND l.link_type = ? "
        f"AND {not_expired_sql('m')} ORDER BY m.created_at, m.id LIMIT ?",
        [namespace, memory_id, DERIVED_FROM, MAX_CHAIN],
    )


def links_query(
    namespace: str,
    memory_id: str,
    link_types: tuple[str, ...],
    outgoing: bool,
    incoming: bool,
    after: tuple[str, str] | None,
    limit: int,
) -> Query:
    """The memory's links (`outgoing`: from it; `incoming`: to it) of these
    types, oldest first, after the (created_at, id) a previous page ended at;
    only links whose other end is still present in the namespace. One SELECT
    per direction, each on its own index (an OR of the two scans the
    namespace's links)."""
    marks = ", ".join("?" * len(link_types))
    parts: list[str] = []
    args: list[object] = []
    for wanted, this_end, other_end in (
        (outgoing, "from_memory_id", "to_memory_id"),
        (incoming, "to_memory_id", "from_memory_id"),
    ):
        if not wanted:
            continue
        part = (
            "SELECT l.id AS id, l.link_type, l.from_memory_id, l.to_memory_id, "
            "l.created_at AS created_at, l.job_id, l.weight, l.confidence, "
            "coalesce(l.valid_from, l.created_at), l.valid_until, l.evidence "
            f"FROM memory_links l JOIN memories o ON o.id = l.{other_end} "
            f"AND o.namespace = l.namespace WHERE l.{this_end} = ? AND l.namespace = ? "
            f"AND l.link_type IN ({marks}) AND {not_expired_sql('o')}"
        )
        args.extend([memory_id, namespace, *link_types])
        if after is not None:
            part += " AND (l.created_at, l.id) > (?, ?)"
            args.extend(after)
        parts.append(part)
    args.append(limit)
    return " UNION ALL ".join(parts) + " ORDER BY created_at, id LIMIT ?", args
