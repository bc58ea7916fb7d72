"""The typed inputs of MemoryStoreService's RPCs: what a parse step
(services/store/requests.py) makes of a request once every field is valid, and
what the domain (memories, sessions, explain, entities, ...) takes. Holding one
means the request's own rules passed; the domain checks only what needs the
database (NOT_FOUND, versions, confirm tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.memory_filter import MemoryFilterSpec
from services.common.normalize import NormalizedContent
from services.common.pii import PiiPolicy
from services.store.rules import MemoryDraft

TimePosition = tuple[str, str]  # a time-ordered page token's position


@dataclass(frozen=True)
class RememberInput:
    draft: MemoryDraft
    privacy: str  # the request's level; "" for the namespace's


@dataclass(frozen=True)
class ImportBatch:
    """One ImportMemoriesRequest's own fields; its items are parsed one by one."""

    namespace: str
    pii: PiiPolicy  # the batch's policy (an item may name its own)


@dataclass(frozen=True)
class GetMemoryInput:
    namespace: str
    id: str


@dataclass(frozen=True)
class AccessInput:
    """AccessService.RecordAccess (internal): the ids Recall returned."""

    namespace: str
    memory_ids: tuple[str, ...]


@dataclass(frozen=True)
class ListMemoriesInput:
    namespace: str
    spec: MemoryFilterSpec  # checked
    page_size: int
    after: TimePosition | None
    deleted: bool
    scope: str  # what the page token is bound to

    @property
    def kind(self) -> str:
        return "tombstones" if self.deleted else "memories"


@dataclass(frozen=True)
class Patch:
    """A MemoryPatch with every field checked (None: left as it is)."""

    id: str
    content: NormalizedContent | None
    type: str | None
    importance: float | None
    tags: tuple[str, ...] | None
    pinned: bool | None
    who: str | None
    reason: str
    if_version: int | None
    supersede: bool = False  # a new memory replaces this one (services/store/supersede.py)
    valid_from: str | None = None  # with supersede: when the new one starts (None: now)
    categories: tuple[str, ...] | None = None
    decay_rate: float | None = None  # seed 003; 0 protects from decay


@dataclass(frozen=True)
class ModifyInput:
    namespace: str
    patches: tuple[Patch, ...]
    actor: str


@dataclass(frozen=True)
class OneMemoryChange:
    """DeleteMemory's and RecoverMemory's input (`force`: delete a pinned one)."""

    namespace: str
    id: str
    reason: str
    if_version: int | None
    actor: str
    force: bool = False


@dataclass(frozen=True)
class ForgetSelection:
    """What ForgetMemories selects, as the request gave it (its confirm token is
    bound to this, not to the cleaned filter)."""

    ids: tuple[str, ...] = ()
    query: str = ""
    spec: MemoryFilterSpec = field(default_factory=MemoryFilterSpec)
    limit: int = 0
    include_pinned: bool = False
    purge: bool = False


@dataclass(frozen=True)
class ForgetInput:
    namespace: str
    selection: ForgetSelection
    spec: MemoryFilterSpec  # the selection's filter, checked
    terms: tuple[str, ...]  # the query's keyword terms, quoted for FTS
    execute: bool
    reason: str
    confirm_token: str
    actor: str


@dataclass(frozen=True)
class HistoryInput:
    namespace: str
    memory_id: str
    page_size: int
    after_seq: int | None
    scope: str


@dataclass(frozen=True)
class TurnInput:
    """AppendTurn, drafted: the memory it would write and how it was decided."""

    draft: MemoryDraft
    level: str  # the privacy level of the write
    intent: bool  # the user asked for it to be remembered
    promoted: bool  # so it is a long-term memory


@dataclass(frozen=True)
class SessionInput:
    """SummarizeSession's and GetSession's input."""

    namespace: str
    session_id: str


@dataclass(frozen=True)
class ListLinksInput:
    namespace: str
    memory_id: str
    link_types: tuple[str, ...]  # sorted, distinct; every type when none was named
    direction: str  # both | outgoing | incoming
    page_size: int
    after: TimePosition | None
    scope: str


@dataclass(frozen=True)
class GetEntityInput:
    namespace: str
    id: str  # "" when asked by name
    name: str  # as asked (the NOT_FOUND message echoes it)
    canonical: str  # the name to look up
    max_facts: int
    max_neighbors: int


@dataclass(frozen=True)
class ListEntitiesInput:
    namespace: str
    name_prefix: str  # canonical
    entity_type: str
    min_mentions: int
    page_size: int
    after: tuple[int, str, str] | None
    scope: str


@dataclass(frozen=True)
class WeakPageInput:
    namespace: str
    page_size: int
    after: int | None


@dataclass(frozen=True)
class DeleteNamespaceInput:
    namespace: str
    execute: bool
    reason: str
    confirm_token: str
    actor: str


@dataclass(frozen=True)
class RecoverNamespaceInput:
    namespace: str
    reason: str
    actor: str
