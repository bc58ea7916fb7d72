"""The typed inputs of SearchService's RPCs: what the parse step
(services/search/requests.py) makes of a request once every field is valid."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.common.memory_filter import MemoryFilterSpec
from services.search.query_intent import Intent


@dataclass(frozen=True)
class RecallInput:
    namespaces: tuple[str, ...]
    query: str
    limit: int  # the default when the request left it 0
    spec: MemoryFilterSpec  # checked, with the request's as_of
    track_access: bool
    min_score: float | None  # None: the configured search.min_score
    intent: Intent  # UNSPECIFIED: classify the query
    asked_at: datetime | None  # None: now


@dataclass(frozen=True)
class ContextInput:
    namespaces: tuple[str, ...]
    query: str
    budget: int  # the request's token budget, or the default for the query
    session_id: str  # "" for none
    as_of: str | None  # None: now
