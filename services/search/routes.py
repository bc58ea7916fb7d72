"""Intent routes (seed 003 "Intent-based strategy routing"): what Recall reads
or lifts besides its keyword and vector channels, by the query's intent
(services.search.query_intent).

- entity: the entities the query names, resolved by name in the entity graph
  (services.search.graph_boost), lead to the memories mentioning them or their
  one-hop neighbours.
- every intent, general included (`search.intent_speaker_any_intent`; off:
  entity only): memories remembered by someone the query names (`who`) are
  lifted, and so are a conversation's turns by the speaker the query's
  grammatical person addresses (`speakers_addressed`).
- temporal: memories stating a time (a date, "yesterday", "last Saturday",
  "two weeks ago") are lifted, and so are the memories one `temporal` link
  (previous or next in the session) from the best matches; the range the query
  names is a boost for every intent (services.search.scoring, time_boost), and a
  routed question naming a past range also reads the facts valid during it,
  superseded or ended since (services/storage/memory_filter_sql.py live_sql).
- causal: breadth first over `causal` links, both directions, from the best
  keyword and vector matches; each hop halves the lift.

Every route is additive and bounded: a failure or an empty graph leaves the
flat recipe's answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from services.common.memory_filter import MemoryFilterSpec
from services.common.text import words
from services.common.turn_roles import ASSISTANT, USER
from services.search.scoring import Candidate
from services.storage.db import Reads
from services.storage.dialect import SQLITE, Dialect
from services.storage.search import graph_queries, queries

log = logging.getLogger("engram.search.routes")

CAUSAL_LINK_TYPES = ("causal",)
TEMPORAL_LINK_TYPES = ("temporal",)
CAUSAL_SEEDS = 5  # best matches per channel a link route starts from
MAX_REACHED = 200
TIME_STATEMENT_POOL = 100  # best fused candidates checked for a stated time

_WEEKDAY = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december)"
_STATES_TIME = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|last night|this morning|recently|just now"
    rf"|(last|this|next|past) ({_WEEKDAY}|week|weekend|month|year|summer|winter|spring|fall|autumn)"
    r"|(a|an|one|two|three|four|five|six|seven|few|couple of|\d+) (days?|weeks?|months?|years?) ago"
    rf"|on {_WEEKDAY}|in {_MONTH}|{_MONTH} \d{{1,2}}|\d{{1,2}} {_MONTH}"
    r"|\d{4}-\d{2}-\d{2}|(19|20)\d\d)\b",
    re.I,
)


def states_time(text: str) -> bool:
    return _STATES_TIME.search(text) is not None


# "What did you recommend?" asks about the assistant's words; "Where did I go?"
# about the user's own (a captured turn's `who` is its role unless named).
_SPOKE = (
    r"(say|tell|give|write|come up with|mention|suggest|recommend|list|explain|propose"
    r"|provide|create|share|describe|name)"
)
_SPOKE_PAST = (
    r"(said|told|gave|wrote|came up with|mentioned|suggested|recommended|listed|explained"
    r"|proposed|provided|created|shared|described|named)"
)
# past tense, or "did you ...": "can you tell me" is a request, not a question about
# what was said
_ASKS_WHAT_YOU_SAID = re.compile(
    rf"\byou\s+(\w+\s+)?{_SPOKE_PAST}\b|\bdid\s+you\s+(\w+\s+)?{_SPOKE}\b", re.I
)
_FIRST_PERSON = re.compile(r"\b(i|me|my|mine|myself|i'm|i've|i'd|i'll)\b", re.I)


def speakers_addressed(query: str) -> set[str]:
    """The conversation role the query's grammatical person points at: the
    assistant for what "you" said, else the user for a question in the first person."""
    if _ASKS_WHAT_YOU_SAID.search(query):
        return {ASSISTANT}
    if _FIRST_PERSON.search(query):
        return {USER}
    return set()


def speakers_named(query: str, candidates: Sequence[Candidate]) -> set[str]:
    """The `who` values (lower case) the query names as a word, and the role its
    grammatical person addresses when the candidates hold turns of other speakers
    too (a lift every candidate gets would only inflate the scores)."""
    held = {c.who.lower() for c in candidates if c.who}
    named = {w.lower() for w in words(query)} & held
    addressed = speakers_addressed(query) & held
    if addressed and held - addressed:
        named |= addressed
    return named


async def time_statements(
    reads: Reads, namespace: str, candidates: Sequence[Candidate], *, dialect: Dialect = SQLITE
) -> set[int]:
    """Rowids of the best-ranked candidates (by their best channel rank) whose
    content states a time."""
    best = sorted(candidates, key=_best_rank)[:TIME_STATEMENT_POOL]
    if not best:
        return set()
    rows = await reads.fetch_all(
        queries.contents(namespace, [c.rowid for c in best], dialect=dialect)
    )
    return {row[0] for row in rows if states_time(row[1])}


def _best_rank(c: Candidate) -> tuple[int, int]:
    ranks = [r for r in (c.keyword_rank, c.vector_rank, c.route_rank) if r]
    return (min(ranks) if ranks else 1 << 30, c.rowid)


async def linked_reach(
    reads: Reads,
    namespace: str,
    seeds: Sequence[int],
    link_types: Sequence[str],
    spec: MemoryFilterSpec,
    depth: int,
    at: str,
    *,
    dialect: Dialect = SQLITE,
) -> dict[int, int]:
    """Rowids reached over links of `link_types` valid at `at` from `seeds`
    (not themselves), both directions, with their hop count, nearest first."""
    reached: dict[int, int] = {}
    seen = set(seeds)
    frontier = list(dict.fromkeys(seeds))
    for hop in range(1, depth + 1):
        if not frontier or len(reached) >= MAX_REACHED:
            break
        rows = await reads.fetch_all(
            graph_queries.linked_memories(
                namespace, frontier, link_types, spec, at, dialect=dialect
            )
        )
        frontier = []
        # by rowid for a stable order; the pair, not the row: sqlite3.Row does not
        # order (a hop reaching two memories or more went INTERNAL, issue 34)
        for rowid, _ in sorted((row[0], row[1]) for row in rows):
            if rowid not in seen:
                seen.add(rowid)
                reached[rowid] = hop
                frontier.append(rowid)
    return dict(list(reached.items())[:MAX_REACHED])
