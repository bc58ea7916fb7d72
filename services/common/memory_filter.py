"""The memory filter: validated once here, turned into SQL in one place
(services/storage/memory_filter_sql.py).

Used by store listings and forget selection, and by every search channel, so a
filter means the same thing everywhere and is applied inside each query (never
after a top-k cut).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from services.common.errors import Violations, echo
from services.common.validation import check_session_id

# Caps on the repeated filter fields (documented on engram.common.v1.MemoryFilter).
# Each tag adds one clause to every channel's query; SQLite refuses a query whose
# expression tree is deeper than 1000, which an uncapped list reached at 934 tags.
# A memory carries at most 32 tags (services.store.rules.MAX_TAGS), so a filter
# needing more can never match; types are from a short fixed list.
MAX_FILTER_TAGS = 32
MAX_FILTER_CATEGORIES = 8  # a memory carries at most 8 (services/common/facts.py)
MAX_FILTER_TYPES = 16


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
