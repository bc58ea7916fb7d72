"""The memory filter and the live rule as SQL, the one place either is spelled
(the filter itself is validated in services/common/memory_filter.py).

Used by store listings and forget selection, and by every search channel, so a
filter means the same thing everywhere and is applied inside each query (never
after a top-k cut). The rule for which memories any read may return at all
(`live_sql`: not soft-deleted, not expired) lives here too, for the same reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from services.common.memory_filter import MemoryFilterSpec
from services.storage.dialect import SQLITE, Dialect

# SQLite's clock in the stored fixed-width form (services/common/clock.py:
# `YYYY-MM-DDTHH:MM:SS.fffffffffZ`; SQLite keeps milliseconds, the zeros pad
# the fraction to nine digits), so it compares with stored times as text.
# SQLite reads 'now' once per statement: every row of one query sees one instant.
NOW_SQL = "strftime('%Y-%m-%dT%H:%M:%f000000Z', 'now')"
# The stored form (services/common/clock.py): the only text `live_sql` inlines.
_STORED_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z")


def live_sql(
    alias: str = "m",
    *,
    keep_plan: bool = False,
    as_of: str | None = None,
    valid_during: Sequence[tuple[str, str]] = (),
) -> str:
    """The one rule for a memory any read may return: not soft-deleted, not
    expired (an expired short-term memory is gone at once, though its row stays
    until the retention sweep purges it), and valid.

    Valid, by default, means valid now: its validity was not closed before now
    (`valid_until`, set when a newer version superseded it). A memory whose
    `valid_from` lies ahead (an `event_time` in the future) is returned: what is
    known now about the future is part of now.

    With `as_of` (stored timestamp text), valid means valid at that instant as
    known at that instant (bi-temporal, like a point-in-time query): recorded
    by then (`created_at <= as_of`), its validity begun (`valid_from <= as_of`)
    and not closed by then, where a close written after `as_of`
    (`invalidated_at > as_of`) was not known yet. Deleted and expired memories
    are never returned, whatever `as_of`: deleting is forgetting, not a change
    of fact (superseding is).

    `valid_during` (half-open windows of stored timestamp text, without
    `as_of`): valid now, or valid at some instant of one of the windows (a
    question naming a past range asks what was true then: a fact superseded
    since counts, one whose validity ended before the range or began after it
    does not).

    A predicate without parameters (`as_of` and the windows are checked and
    inlined), so it slots into any query. `keep_plan` prefixes the columns with
    `+` so the planner keeps the query's own index (rowid lookups, FTS outer
    loops)."""
    p = f"{'+' if keep_plan else ''}{alias}."
    rule = present_sql(alias, keep_plan=keep_plan)
    if as_of is None:
        valid = [f"{p}valid_until IS NULL", f"{p}valid_until > {NOW_SQL}"]
        for start, end in valid_during:
            s, e = _inlined(start, "window start"), _inlined(end, "window end")
            valid.append(f"({p}valid_until > {s} AND {p}valid_from < {e})")
        return f"{rule} AND ({' OR '.join(valid)})"
    at = _inlined(as_of, "as_of")
    return (
        f"{rule} AND {p}created_at <= {at} AND {p}valid_from <= {at} AND "
        f"({p}valid_until IS NULL OR {p}valid_until > {at} OR {p}invalidated_at > {at})"
    )


def _inlined(stored: str, what: str) -> str:
    """A stored timestamp as an SQL literal, checked (nothing else is inlined)."""
    if not _STORED_TIME.fullmatch(stored):
        raise ValueError(f"{what} is not a stored timestamp: {stored[:40]!r}")
    return f"'{stored}'"


def present_sql(alias: str = "m", *, keep_plan: bool = False) -> str:
    """`live_sql` without validity: not soft-deleted and not expired, valid or
    superseded. What ForgetMemories selects from: forgetting by a query or a
    filter must reach a fact's earlier versions too."""
    p = f"{'+' if keep_plan else ''}{alias}."
    return f"{p}is_deleted = 0 AND ({p}expire_at IS NULL OR {p}expire_at > {NOW_SQL})"


def not_expired_sql(alias: str = "m") -> str:
    """The expiry half of `live_sql`, for reads of tombstones (a soft-deleted
    memory that expired is gone too: it can no longer be listed or recovered)."""
    return f"({alias}.expire_at IS NULL OR {alias}.expire_at > {NOW_SQL})"


def spec_live_sql(spec: MemoryFilterSpec, alias: str = "m", *, keep_plan: bool = False) -> str:
    """`live_sql` at the spec's instant (`as_of`) and ranges (`valid_during`)."""
    return live_sql(alias, keep_plan=keep_plan, as_of=spec.as_of, valid_during=spec.valid_during)


def filter_sql(
    spec: MemoryFilterSpec, alias: str = "m", dialect: Dialect = SQLITE
) -> tuple[str, list[Any]]:
    """`AND ...` clauses (possibly empty) and their parameters (`?`), for table
    `alias`, in the backend's `dialect`."""
    clauses: list[str] = []
    params: list[Any] = []
    if spec.types:
        clauses.append(f"{alias}.type IN ({', '.join('?' * len(spec.types))})")
        params.extend(spec.types)
    for tag in spec.tags:
        clauses.append(dialect.json_array_holds(f"{alias}.tags"))
        params.append(tag)
    for category in spec.categories:
        clauses.append(dialect.json_array_holds(f"{alias}.categories"))
        params.append(category)
    if spec.who:
        clauses.append(f"{alias}.who = ?")
        params.append(spec.who)
    if spec.pinned is not None:
        clauses.append(f"{alias}.pinned = ?")
        params.append(1 if spec.pinned else 0)
    if spec.source_type:
        clauses.append(f"{alias}.source_type = ?")
        params.append(spec.source_type)
    if spec.since:
        clauses.append(f"{alias}.created_at >= ?")
        params.append(spec.since)
    if spec.until:
        clauses.append(f"{alias}.created_at < ?")
        params.append(spec.until)
    if spec.importance_min is not None:
        clauses.append(f"{alias}.importance >= ?")
        params.append(spec.importance_min)
    if spec.session_id:
        clauses.append(f"{alias}.session_id = ?")
        params.append(spec.session_id)
    return "".join(f" AND {c}" for c in clauses), params
