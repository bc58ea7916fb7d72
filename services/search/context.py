"""AssembleContext (seed 003 "Context injection", issue 16): the block an agent puts in
front of its model on a turn, within a token budget.

Four sections share the budget in order: PINNED 40%, FACTS 25%, SESSION 25%,
ENTITIES 10%. A section takes its best lines while they fit its allowance (its share
plus what the sections before it left unused); what the last section leaves goes round
again, and what is still left then takes shorter lines that fit, in section order.
A section with nothing to show has no header. No memory
appears twice: a memory shown by an earlier section is left out of later ones.

The relevant memories come from Recall (services.search.recall): the FACTS section is
Recall's ranking (pinned memories it finds join PINNED); this session's short-term memories fill SESSION. Every read runs in one
snapshot. Tokens are counted with a real tokenizer (services.search.tokens), per line
with its newline; no tokenizer joins text across a line break (Renderer), so the
block's count is the sum of its lines' and never above the budget.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

from services.common.config import ContextSettings
from services.common.errors import Violations
from services.common.memory_filter import MemoryFilterSpec
from services.common.memory_record import SESSION_SUMMARY_TYPE, MemoryRecord
from services.common.text import unspaced, words
from services.search.graph_boost import MAX_ENTITY_HITS, query_tokens
from services.search.inputs import ContextInput
from services.search.recall import MAX_LIMIT, Recaller, check_recall_request
from services.search.tokens import Tokenizer, cached
from services.storage.db import ReadPool, Reads
from services.storage.dialect import dialect_of
from services.storage.search import context_queries as queries
from services.storage.search import graph_queries

_NO_FILTER = MemoryFilterSpec()


class SectionKind(enum.IntEnum):
    """Values match engram.search.v1.ContextSectionKind."""

    PINNED = 1
    FACTS = 2
    SESSION = 3
    ENTITIES = 4


# seed 003: facts 40% | entity profiles 25% | temporal context 25% | evidence 10%,
# as issue 16 names the sections
SHARES: tuple[tuple[SectionKind, float], ...] = (
    (SectionKind.PINNED, 0.40),
    (SectionKind.FACTS, 0.25),
    (SectionKind.SESSION, 0.25),
    (SectionKind.ENTITIES, 0.10),
)
HEADERS = {
    SectionKind.PINNED: "## Pinned memories",
    SectionKind.FACTS: "## Relevant memories",
    SectionKind.SESSION: "## This session",
    SectionKind.ENTITIES: "## Entities involved",
}
# Standing instructions: true from when they were said until changed, so their lines
# carry no date. Every other memory line says when it was true or said.
UNDATED_TYPES = frozenset({"rule", "preference"})
SUMMARY_TYPE = SESSION_SUMMARY_TYPE

# A query is complex (seed 003's 3000-token budget) when it is long, asks more than
# one question, or names a reasoning cue; else simple (1000).
COMPLEX_MIN_WORDS = 12
COMPLEX_CUES = frozenset(
    [
        "why",
        "how",
        "compare",
        "explain",
        "difference",
        "between",
        "versus",
        "vs",
        "relationship",
        "timeline",
        "history",
        "summarize",
        "summarise",
    ]
)
_QUESTION_MARKS = re.compile(r"[?？]")
_SPACE = re.compile(r"\s+")


def is_complex(query: str) -> bool:
    """Deterministic, from the text alone (no model): documented on the RPC."""
    found = [w.lower() for w in words(query)]
    return (
        len(found) >= COMPLEX_MIN_WORDS
        or len(_QUESTION_MARKS.findall(query)) >= 2
        or any(w in COMPLEX_CUES for w in found)
    )


_SETTINGS = ContextSettings()  # the defaults (written in services/common/config.py only)


@dataclass(frozen=True)
class ContextParams:
    """Each field is the `search.context.*` key of its name; its default is that key's."""

    simple_budget: int = _SETTINGS.simple_budget
    complex_budget: int = _SETTINGS.complex_budget
    max_budget: int = _SETTINGS.max_budget
    pinned_limit: int = _SETTINGS.pinned_limit
    session_limit: int = _SETTINGS.session_limit
    entity_limit: int = _SETTINGS.entity_limit
    relations_per_entity: int = _SETTINGS.relations_per_entity

    @classmethod
    def from_settings(cls, settings: ContextSettings) -> ContextParams:
        """The parameters `search.context.*` configures."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class EntityLine:
    id: str
    namespace: str
    name: str
    entity_type: str
    relations: tuple[str, ...]


@dataclass(frozen=True)
class Line:
    """A line of the block; its tokens (with its newline) are counted when first
    needed, so candidates a full budget never reaches are never tokenized."""

    text: str
    counter: Callable[[str], int] = field(repr=False, compare=False)
    memory: MemoryRecord | None = None
    entity: EntityLine | None = None

    @functools.cached_property
    def tokens(self) -> int:
        return self.counter(self.text + "\n")


@dataclass
class Section:
    kind: SectionKind
    budget: int = 0  # its share plus what earlier sections left to it
    header: Line | None = None
    lines: list[Line] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """The section's lines and header, each newline counted with its line."""
        if not self.lines:
            return 0
        header = self.header.tokens if self.header is not None else 0
        return header + sum(line.tokens for line in self.lines)

    @property
    def memories(self) -> list[MemoryRecord]:
        return [line.memory for line in self.lines if line.memory is not None]

    @property
    def entities(self) -> list[EntityLine]:
        return [line.entity for line in self.lines if line.entity is not None]


@dataclass(frozen=True)
class AssembledContext:
    text: str
    token_count: int
    budget: int
    sections: list[Section]
    tokenizer: str
    degraded: bool = False
    warnings: tuple[str, ...] = ()


def memory_line_text(memory: MemoryRecord, show_namespace: bool) -> str:
    """One memory as one line: `- [date] (namespace) content`; the date is the event
    time (when it was true or said), left off standing rules and preferences. A
    session's summary says up to when it summarises (its event time), a session turn
    when and by whom it was said, to the minute."""
    parts = ["-"]
    if memory.type == SUMMARY_TYPE:
        parts.append(f"[summary to {_minute(memory.event_time)}]")
    elif memory.expire_at is not None and memory.session_id:
        parts.append(f"[{_minute(memory.event_time)}]")
    elif memory.type not in UNDATED_TYPES and memory.event_time:
        parts.append(f"[{memory.event_time[:10]}]")
    if show_namespace:
        parts.append(f"({memory.namespace})")
    if memory.type != SUMMARY_TYPE and memory.expire_at is not None and memory.who.strip():
        parts.append(f"{_SPACE.sub(' ', memory.who).strip()}:")
    parts.append(_SPACE.sub(" ", memory.content).strip())
    return " ".join(parts)


def _minute(stored: str) -> str:
    """`YYYY-MM-DD HH:MM` (UTC) of stored timestamp text."""
    return f"{stored[:10]} {stored[11:16]}"


def session_memories(rows: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """The SESSION section's candidates from the session's live short-term memories:
    its newest summary first, then the turns the summary does not cover (created after
    the newest turn it summarises, its event time), newest first, so that a small
    share keeps the latest turns (the section shows them oldest first)."""
    summaries = sorted(
        (m for m in rows if m.type == SUMMARY_TYPE), key=lambda m: m.event_time, reverse=True
    )
    through = summaries[0].event_time if summaries else ""
    turns = [m for m in rows if m.type != SUMMARY_TYPE and m.created_at > through]
    turns.sort(key=lambda m: (m.created_at, m.id), reverse=True)
    return [*summaries[:1], *turns]


def entity_line_text(entity: EntityLine, show_namespace: bool) -> str:
    kind = f" ({entity.entity_type})" if entity.entity_type not in ("", "unknown") else ""
    where = f" [{entity.namespace}]" if show_namespace else ""
    relations = f": {'; '.join(entity.relations)}" if entity.relations else ""
    return _SPACE.sub(" ", f"- {entity.name}{kind}{where}{relations}").strip()


class Renderer:
    """Lines and their token counts with one tokenizer. Each line is counted with the
    newline that ends it, and the block ends with one, so the block's count is the sum
    of its lines': a line holds no newline, does not end in whitespace and starts with
    `-` or `#`, so neither tokenizer joins text across a line break (cl100k_base's
    pre-tokenizer splits there: a newline stays alone or ends the line's last
    punctuation; WordPiece splits on whitespace). The property test in
    tests/search/test_search_context.py checks the sum against the block's own count."""

    def __init__(self, tokenizer: Tokenizer, show_namespace: bool) -> None:
        self.tokenizer = tokenizer
        self.show_namespace = show_namespace

    def line(
        self, text: str, memory: MemoryRecord | None = None, entity: EntityLine | None = None
    ) -> Line:
        return Line(text, self.tokenizer.count, memory, entity)

    def memory(self, memory: MemoryRecord) -> Line:
        return self.line(memory_line_text(memory, self.show_namespace), memory=memory)

    def entity(self, entity: EntityLine) -> Line:
        return self.line(entity_line_text(entity, self.show_namespace), entity=entity)

    def join(self, sections: Sequence[Section]) -> str:
        texts: list[str] = []
        for section in sections:
            if section.lines:
                if section.header is not None:
                    texts.append(section.header.text)
                texts.extend(line.text for line in section.lines)
        return "".join(f"{text}\n" for text in texts)


def fill(section: Section, candidates: list[Line], allowance: int, *, skip: bool) -> int:
    """Move candidates that fit `allowance` (header included when the section is still
    empty) into the section, in order; returns the tokens used. Without `skip` it stops
    at the first that does not fit (a section's best lines come first); with `skip` it
    passes over such a line for later, shorter ones. The rest stay in `candidates`."""
    used = 0
    kept: list[Line] = []
    for index, line in enumerate(candidates):
        if used >= allowance:  # every line takes a token at least: the rest wait
            kept.extend(candidates[index:])
            break
        cost = line.tokens
        if not section.lines and section.header is not None:
            cost += section.header.tokens
        if used + cost <= allowance:
            section.lines.append(line)
            used += cost
        elif skip:
            kept.append(line)
        else:
            kept.extend(candidates[index:])
            break
    candidates[:] = kept
    return used


def allocate(
    budget: int, sections: Sequence[Section], candidates: dict[SectionKind, list[Line]]
) -> None:
    """Fill the sections in order by their shares, best lines first, the unused share
    flowing to the next; what the last leaves goes round again, in order; then what is
    still left takes the shorter lines that fit, in section order."""
    carry = 0
    total = 0
    shares = dict(SHARES)
    for section in sections:
        allowance = int(budget * shares[section.kind]) + carry
        section.budget = allowance
        used = fill(section, candidates[section.kind], allowance, skip=False)
        total += used
        carry = allowance - used
    for skip in (False, True):  # the leftover goes round to the first, then fills gaps
        for section in sections:
            left = budget - total
            if left <= 0:
                return
            used = fill(section, candidates[section.kind], left, skip=skip)
            section.budget += used
            total += used


def candidates_for(
    pinned: Sequence[MemoryRecord],
    relevant: Sequence[MemoryRecord],
    session: Sequence[MemoryRecord],
    entities: Sequence[EntityLine],
    renderer: Renderer,
) -> dict[SectionKind, list[Line]]:
    """Each memory once, in the first section that wants it: this session's short-term
    memories in SESSION; pinned memories (those the query is about first) in PINNED;
    the other relevant long-term memories in FACTS, in Recall's order (a relevant rule
    or preference that is not pinned ranks as Recall ranks it: put first, a type the
    store guessed would push better-ranked memories out of a tight budget). Another session's short-term memories are left out:
    they are that session's working context, not long-term knowledge."""
    relevant_ids = {m.id for m in relevant}
    seen = {m.id for m in session}
    seen.update(m.id for m in relevant if m.expire_at is not None)
    chosen: dict[SectionKind, list[MemoryRecord]] = {kind: [] for kind, _ in SHARES}
    chosen[SectionKind.SESSION] = list(session)
    for memory in sorted(pinned, key=lambda m: m.id not in relevant_ids):  # stable
        if memory.id not in seen:
            seen.add(memory.id)
            chosen[SectionKind.PINNED].append(memory)
    for memory in relevant:
        if memory.id in seen:
            continue
        seen.add(memory.id)
        chosen[SectionKind.PINNED if memory.pinned else SectionKind.FACTS].append(memory)
    lines = {kind: [renderer.memory(m) for m in memories] for kind, memories in chosen.items()}
    lines[SectionKind.ENTITIES] = [renderer.entity(e) for e in entities]
    return lines


def layout(
    budget: int,
    pinned: Sequence[MemoryRecord],
    relevant: Sequence[MemoryRecord],
    session: Sequence[MemoryRecord],
    entities: Sequence[EntityLine],
    renderer: Renderer,
) -> tuple[list[Section], str, int]:
    """The sections shown (in order, empty ones left out), the block, and its token
    count (never above `budget`). Pure: every read happened before. A block of one
    section goes without its header (it would only cost tokens): the section is laid
    out again without one, so the tokens it frees can take another line."""
    budget = max(budget, 0)
    candidates = candidates_for(pinned, relevant, session, entities, renderer)
    sections = [Section(kind, header=renderer.line(HEADERS[kind])) for kind, _ in SHARES]
    allocate(budget, sections, {kind: list(lines) for kind, lines in candidates.items()})
    shown = [s for s in sections if s.lines]
    if len(shown) == 1:
        [alone] = shown
        shown = [Section(alone.kind)]
        only = {kind: candidates[kind] if kind == alone.kind else [] for kind, _ in SHARES}
        allocate(budget, shown, only)
    for section in shown:  # the session reads in order: summary, then turns oldest first
        if section.kind == SectionKind.SESSION:
            section.lines.sort(
                key=lambda line: (
                    line.memory is None or line.memory.type != SUMMARY_TYPE,
                    line.memory.created_at if line.memory else "",
                )
            )
    return shown, renderer.join(shown), sum(s.tokens for s in shown)


class ContextAssembler:
    """The domain side of AssembleContext: every read, then the layout."""

    def __init__(
        self,
        recaller: Recaller,
        reads: ReadPool,
        tokenizer: Tokenizer,
        params: ContextParams,
    ) -> None:
        self._recaller = recaller
        self._reads = reads
        self._dialect = dialect_of(reads)  # the query builders' SQL
        # a memory's line recurs across an agent's turns: its count is kept
        self._tokenizer = cached(tokenizer)
        self._params = params

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def budget_for(self, query: str, requested: int) -> int:
        """The request's budget, or seed 003's default for the query's complexity."""
        if requested > 0:
            return requested
        return self._params.complex_budget if is_complex(query) else self._params.simple_budget

    def check_question(self, query: str, token_budget: int) -> int:
        """AssembleContext's parse step ends here: the budget (the request's or the
        default for the query) once the budget, the query and the Recall limit it
        makes are valid; every bad field in one InvalidArgument."""
        bad = Violations()
        if not 0 <= token_budget <= self._params.max_budget:
            bad.add("token_budget", f"must be between 0 and {self._params.max_budget}")
        budget = self.budget_for(query, max(token_budget, 0))
        bad.check_all(None, check_recall_request, query, recall_limit(budget), _NO_FILTER)
        bad.raise_if_any()
        return budget

    async def assemble(self, asked: ContextInput) -> AssembledContext:
        """Every read before the layout. `as_of`: read what was valid then
        (services/storage/memory_filter_sql.py live_sql), else now."""
        namespaces, query, budget = asked.namespaces, asked.query, asked.budget
        session_id, as_of = asked.session_id, asked.as_of
        limit = recall_limit(budget)
        spec = MemoryFilterSpec(as_of=as_of)
        # every read in one snapshot: the sections see one state of the database
        async with self._reads.snapshot() as reads:
            # the other reads run while Recall waits for the query's embedding
            recall = asyncio.create_task(
                self._recaller.recall(namespaces, query, limit, spec, snapshot=reads)
            )
            try:
                standing = await self._standing(reads, namespaces, query, session_id, as_of)
                outcome = await recall
            except BaseException:
                recall.cancel()  # the snapshot ends below: nothing may still read from it
                await asyncio.gather(recall, return_exceptions=True)
                raise
            relevant = [hit.memory for hit in outcome.hits]
            pinned = standing.pinned
            session = session_memories(standing.session)
            entities = await self._entities(reads, standing, [*session, *pinned, *relevant])
        renderer = Renderer(self._tokenizer, show_namespace=len(namespaces) > 1)
        sections, text, count = layout(budget, pinned, relevant, session, entities, renderer)
        return AssembledContext(
            text=text,
            token_count=count,
            budget=budget,
            sections=sections,
            tokenizer=self._tokenizer.name,
            degraded=outcome.degraded,
            warnings=tuple(outcome.warnings),
        )

    async def _standing(
        self,
        reads: Reads,
        namespaces: Sequence[str],
        query: str,
        session_id: str,
        as_of: str | None,
    ) -> _Standing:
        """Each namespace's pinned memories valid now (or at `as_of`), most important
        first, the session's live short-term memories, and whether it has a knowledge
        graph, with the entities the query names."""
        standing = _Standing()
        tokens = query_tokens(query)
        for namespace in namespaces:
            if session_id and self._params.session_limit > 0:
                rows = await reads.fetch_all(
                    queries.session_memories(
                        namespace, session_id, self._params.session_limit, as_of
                    )
                )
                standing.session.extend(MemoryRecord.from_row(row) for row in rows)
            if self._params.pinned_limit > 0:
                rows = await reads.fetch_all(
                    queries.pinned_memories(namespace, self._params.pinned_limit, as_of)
                )
                standing.pinned.extend(MemoryRecord.from_row(row) for row in rows)
            if self._params.entity_limit <= 0:
                continue
            if not (await reads.fetch_one(queries.has_entities(namespace)))[0]:
                continue
            standing.graphs.append(namespace)
            if tokens:
                matched = await reads.fetch_all(
                    graph_queries.matching_entities(
                        namespace,
                        tokens,
                        [t for t in tokens if unspaced(t)],
                        MAX_ENTITY_HITS,
                        dialect=self._dialect,
                    )
                )
                standing.query_entities[namespace] = [row[0] for row in matched]
        standing.pinned.sort(key=lambda m: (-m.importance, _descending(m.updated_at), m.id))
        return standing

    async def _entities(
        self, reads: Reads, standing: _Standing, shown: list[MemoryRecord]
    ) -> list[EntityLine]:
        """The entities that the memories which may be shown name (most named first),
        then those the query names, with their strongest relations; per namespace (the
        graph never crosses namespaces), and only where there is a graph."""
        limit = self._params.entity_limit
        found: list[EntityLine] = []
        if not standing.graphs:
            return found
        for namespace in standing.graphs:
            ids = [m.id for m in shown if m.namespace == namespace]
            rows = []
            if ids:
                rows = await reads.fetch_all(queries.mentioned_entities(namespace, ids, limit))
            named = {row[0]: (row[1], row[2]) for row in rows}
            extra = [e for e in standing.query_entities.get(namespace, []) if e not in named]
            extra = extra[: max(0, limit - len(named))]
            if extra:
                for row in await reads.fetch_all(queries.entities_by_id(namespace, extra)):
                    named[row[0]] = (row[1], row[2])
            if not named:
                continue
            relations: dict[str, list[str]] = {}
            if self._params.relations_per_entity > 0:
                for row in await reads.fetch_all(
                    queries.entity_relations(
                        namespace, list(named), self._params.relations_per_entity
                    )
                ):
                    entity_id, relation, other, outgoing = row[0], row[1], row[2], row[3]
                    text = f"{relation} {other}" if outgoing else f"{other} {relation} it"
                    relations.setdefault(entity_id, []).append(text)
            found.extend(
                EntityLine(
                    entity_id, namespace, name, entity_type, tuple(relations.get(entity_id, ()))
                )
                for entity_id, (name, entity_type) in named.items()
            )
        return found


@dataclass
class _Standing:
    """What AssembleContext reads besides Recall (ContextAssembler._standing)."""

    pinned: list[MemoryRecord] = field(default_factory=list)
    session: list[MemoryRecord] = field(default_factory=list)  # the session's short-term
    graphs: list[str] = field(default_factory=list)  # namespaces with any entity
    query_entities: dict[str, list[str]] = field(default_factory=dict)  # the query names


def recall_limit(budget: int) -> int:
    """How many relevant memories to ask Recall for: about one per 20 tokens of budget
    (a memory line is rarely shorter), 10 to Recall's maximum."""
    return max(10, min(MAX_LIMIT, budget // 20))


def _descending(text: str) -> tuple[int, ...]:
    """A sort key that orders fixed-width timestamp text newest first."""
    return tuple(-ord(c) for c in text)
