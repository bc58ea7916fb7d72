"""The memory filter: validated once, turned into SQL in one place.

Used by store listings and forget selection, and by every search channel, so a
filter means the same thing everywhere and is applied inside each query (never
after a top-k cut). The rule for which memories any read may return at all
(`live_sql`: not soft-deleted, not expired) lives here too, for the same reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.errors import Violations, echo
from services.common.validation import check_session_id
from services.storage.dialect import SQLITE, Dialect

# Caps on the repeated filter fields (documented on engram.common.v1.MemoryFilter).
# Each tag adds one clause to every channel's query; SQLite refuses a query whose
# expression tree is deeper than 1000, which an uncapped list reached at 934 tags.
# A memory carries at most 32 tags (services.store.rules.MAX_TAGS), so a filter
# needing more can never match; types are from a short fixed list.
MAX_FILTER_TAGS = 32
MAX_FILTER_CATEGORIES = 8  # a memory carries at most 8 (services/common/facts.py)
MAX_FILTER_TYPES = 16

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


@dataclass(frozen=True)
class MemoryFilterSpec:
    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    who: str = ""
    pinned: bool | None = None
    source_type: str = ""
    since: str | None = None
    until: str | None = None
    importance_min: float | None = None
    session_id: str = ""
    # Not a MemoryFilter field: the requests' `as_of` (stored text), carried
    # here so every query built from the spec reads the same instant.
    as_of: str | None = None
    categories: tuple[str, ...] = ()
    # Not a MemoryFilter field either: the past ranges a Recall's question
    # names (services/search/recall.py), read as `live_sql`'s `valid_during`.
    # Not part of `is_empty`: a range widens what is valid, it filters nothing.
    valid_during: tuple[tuple[str, str], ...] = ()

    def live_sql(self, alias: str = "m", *, keep_plan: bool = False) -> str:
        """`live_sql` at this spec's instant and ranges."""
        return live_sql(
            alias, keep_plan=keep_plan, as_of=self.as_of, valid_during=self.valid_during
        )

    def is_empty(self) -> bool:
        return not (
            self.types
            or self.tags
            or self.who
            or self.pinned is not None
            or self.source_type
            or self.since
            or self.until
            or self.importance_min is not None
            or self.session_id
            or self.categories
            or self.as_of
        )

    def fingerprint(self) -> str:
        """Stable digest of the filter, to bind page tokens to it."""
        body = json.dumps(
            [
                sorted(self.types),
                sorted(self.tags),
                self.who,
                self.pinned,
                self.source_type,
                self.since,
                self.until,
                self.importance_min,
                *([self.session_id] if self.session_id else []),
                *([sorted(self.categories)] if self.categories else []),
                *([{"as_of": self.as_of}] if self.as_of else []),
            ]
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def check_filter(
    spec: MemoryFilterSpec,
    known_types: tuple[str, ...],
    field_name: str = "filter",
    bad: Violations | None = None,
) -> MemoryFilterSpec:
    """The filter, cleaned. Its bad fields are added to `bad` when given (the
    caller raises), else raised here, all of them in one InvalidArgument."""
    found = bad if bad is not None else Violations()
    if len(spec.types) > MAX_FILTER_TYPES:
        found.add(f"{field_name}.types", f"at most {MAX_FILTER_TYPES} types")
    if len(spec.tags) > MAX_FILTER_TAGS:
        found.add(f"{field_name}.tags", f"at most {MAX_FILTER_TAGS} tags")
    if len(spec.categories) > MAX_FILTER_CATEGORIES:
        found.add(f"{field_name}.categories", f"at most {MAX_FILTER_CATEGORIES} categories")
    for index, memory_type in enumerate(spec.types[:MAX_FILTER_TYPES]):
        if memory_type not in known_types:
            found.add(f"{field_name}.types[{index}]", f"unknown type {echo(memory_type)}")
    if spec.since and spec.until and spec.since > spec.until:
        found.add(f"{field_name}.since", "must not be after until")
    if spec.importance_min is not None and not 0.0 <= spec.importance_min <= 1.0:
        found.add(f"{field_name}.importance_min", "must be between 0 and 1")
    if spec.session_id:
        found.check("", check_session_id, spec.session_id, f"{field_name}.session_id")
    if bad is None:
        found.raise_if_any()
    return MemoryFilterSpec(
        types=spec.types,
        tags=tuple(t.strip().lower() for t in spec.tags if t.strip()),
        who=spec.who,
        pinned=spec.pinned,
        source_type=spec.source_type,
        since=spec.since,
        until=spec.until,
        importance_min=spec.importance_min,
        session_id=spec.session_id,
        categories=tuple(c.strip().lower() for c in spec.categories if c.strip()),
        as_of=spec.as_of,
    )


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
