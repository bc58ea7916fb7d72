"""The parse step of each MemoryStoreService RPC: the proto request becomes one
typed input (services/store/inputs.py), or INVALID_ARGUMENT naming every bad
field, before the domain runs, so nothing is written on bad input. The rules
themselves live in services/store/rules.py and services/common/validation.py;
here they are applied to a request's fields, in the order the error names them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from engram.common.v1 import pii_policy_pb2, privacy_pb2
from engram.store.internal.v1 import access_pb2, dedup_pb2
from engram.store.v1 import store_pb2
from services.common import turn_roles
from services.common.auth import acting
from services.common.convert import (
    filter_from_proto,
    nanos_from_duration,
    temporal_from_proto,
    time_field,
    with_as_of,
)
from services.common.errors import InvalidArgument, Violations, echo
from services.common.facts import ENTITY_TYPES, MAX_ENTITY_CHARS
from services.common.fts import MAX_QUERY_CHARS, keyword_terms, quoted
from services.common.memory_filter import check_filter
from services.common.pii import PiiAction, PiiPolicy
from services.common.validation import (
    DEFAULT_NAMESPACE,
    check_session_id,
    validate_id,
    validate_ids,
    validate_namespace,
)
from services.storage.store.extraction_sql import LINK_TYPES
from services.store import dedup, entities, explain, rules, weak
from services.store.graph import canonical_name
from services.store.inputs import (
    AccessInput,
    DeleteNamespaceInput,
    ForgetInput,
    ForgetSelection,
    GetEntityInput,
    GetMemoryInput,
    HistoryInput,
    ImportBatch,
    ListEntitiesInput,
    ListLinksInput,
    ListMemoriesInput,
    ModifyInput,
    OneMemoryChange,
    Patch,
    RecoverNamespaceInput,
    RememberInput,
    SessionInput,
    TurnInput,
    WeakPageInput,
)
from services.store.memories import (
    DEFAULT_HISTORY_PAGE_SIZE,
    DEFAULT_LIST_PAGE_SIZE,
    MAX_ACCESS_IDS,
    MAX_FORGET,
    MAX_PATCHES,
    _page_size,
)
from services.store.page_tokens import (
    decode_int_position,
    decode_ranked_position,
    decode_time_position,
)
from services.store.sessions import Turn

# The namespace's PII policy for a write, given the request's own (None: unset):
# MemoryStore.pii_policy, the one piece of configuration parsing needs.
PiiPolicyOf = Callable[[str, PiiAction | None], PiiPolicy]

MAX_IMPORT_BATCH = 1000

PRIVACY_LEVELS = {
    privacy_pb2.PRIVACY_LEVEL_UNSPECIFIED: "",
    privacy_pb2.PRIVACY_LEVEL_NONE: "none",
    privacy_pb2.PRIVACY_LEVEL_PARTIAL: "partial",
    privacy_pb2.PRIVACY_LEVEL_FULL: "full",
}
_TURN_ROLES = {
    store_pb2.TURN_ROLE_USER: turn_roles.USER,
    store_pb2.TURN_ROLE_ASSISTANT: turn_roles.ASSISTANT,
    store_pb2.TURN_ROLE_SYSTEM: turn_roles.SYSTEM,
    store_pb2.TURN_ROLE_TOOL: turn_roles.TOOL,
}
_DIRECTIONS = {
    store_pb2.LINK_DIRECTION_OUTGOING: "outgoing",
    store_pb2.LINK_DIRECTION_INCOMING: "incoming",
}
_NEAR_DUPLICATE_ACTIONS = {
    dedup_pb2.NEAR_DUPLICATE_ACTION_MERGE: "merge",
    dedup_pb2.NEAR_DUPLICATE_ACTION_KEEP_BOTH: "keep_both",
    dedup_pb2.NEAR_DUPLICATE_ACTION_SUPERSEDE: "supersede",
}
_FORGET_MODES = frozenset(store_pb2.ForgetMode.values())
_PII_ACTIONS: dict[int, PiiAction] = {
    pii_policy_pb2.PII_POLICY_ALLOW: "allow",
    pii_policy_pb2.PII_POLICY_REDACT: "redact",
    pii_policy_pb2.PII_POLICY_REJECT: "reject",
}


# ---- the fields many requests share ------------------------------------------------


def pii_action(value: int, field: str) -> PiiAction | None:
    """A request's PiiPolicy; None when unset (the namespace's policy applies)."""
    if value == pii_policy_pb2.PII_POLICY_UNSPECIFIED:
        return None
    if value not in _PII_ACTIONS:
        raise InvalidArgument(field, f"unknown PiiPolicy value {value}")
    return _PII_ACTIONS[value]


def namespace_of(bad: Violations, namespace: str) -> str:
    """The request's namespace (empty: default), a violation when malformed."""
    return bad.check(DEFAULT_NAMESPACE, validate_namespace, namespace)


def _named_namespace(bad: Violations, namespace: str) -> str:
    """A namespace the request must name (empty is not read as the default one)."""
    if not namespace:
        bad.add("namespace", 'name the namespace (to act on the default one, name "default")')
        return DEFAULT_NAMESPACE
    return namespace_of(bad, namespace)


def _privacy(bad: Violations, level: privacy_pb2.PrivacyLevel.ValueType) -> str:
    if level not in PRIVACY_LEVELS:
        bad.add("privacy", "unknown privacy level")
    return PRIVACY_LEVELS.get(level, "")


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _session_id(value: str, field: str) -> str:
    if not value:
        raise InvalidArgument(field, "required")
    return check_session_id(value, field)


def _reason(bad: Violations, reason: str, pii: PiiPolicy | None = None) -> str:
    return bad.check("", rules.check_reason, reason, "reason", pii=pii)


def _actor(bad: Violations, actor: str) -> str:
    return bad.check(rules.DEFAULT_ACTOR, rules.check_actor, actor)


# ---- Remember and ImportMemories ----------------------------------------------------


def _draft(
    bad: Violations, namespace: str, item: Any, pii: PiiPolicy, field_prefix: str = ""
) -> rules.MemoryDraft | None:
    """RememberRequest and ImportItem carry the same fields; None when one is bad
    (then `bad` names it)."""
    fields = rules.MemoryFields(
        namespace=namespace,
        content=item.content,
        type=item.type,
        importance=_optional(item, "importance"),
        tags=tuple(item.tags),
        pinned=item.pinned,
        who=item.who,
        why=item.why,
        source_type=item.source_type,
        source_id=item.source_id,
        event_time=time_field(bad, item, "event_time", f"{field_prefix}event_time"),
        actor=acting(""),
        session_id=item.session_id,
        ttl_nanos=bad.check(
            None, nanos_from_duration, item.ttl, item.HasField("ttl"), f"{field_prefix}ttl"
        ),
        categories=tuple(item.categories),
        valid_from=_valid_time(bad, item, "valid_from", field_prefix),
        valid_until=_valid_time(bad, item, "valid_until", field_prefix),
        **_import_only(bad, item, field_prefix),
    )
    return bad.check_all(None, rules.draft_memory, fields, pii=pii, field_prefix=field_prefix)


def _import_only(bad: Violations, item: Any, field_prefix: str) -> dict[str, Any]:
    """What an ImportItem carries beyond RememberRequest (what `engram export`
    writes of a memory); nothing for a RememberRequest."""
    if not isinstance(item, store_pb2.ImportItem):
        return {}
    temporal = temporal_from_proto(item.temporal_class)
    if item.temporal_class and not temporal:
        bad.add(
            f"{field_prefix}temporal_class", f"unknown TemporalClass value {item.temporal_class}"
        )
    return {
        "expire_at": _valid_time(bad, item, "expire_time", field_prefix),
        "temporal_class": temporal,
        "confidence": _optional(item, "confidence"),
        "decay_rate": _optional(item, "decay_rate"),
        "prefixes": not item.literal_content,
    }


def _valid_time(bad: Violations, item: Any, name: str, field_prefix: str) -> str | None:
    """An ImportItem's valid_from, valid_until or expire_time (RememberRequest has none)."""
    if name not in item.DESCRIPTOR.fields_by_name:
        return None
    return time_field(bad, item, name, f"{field_prefix}{name}")


def remember(request: store_pb2.RememberRequest, pii_policy: PiiPolicyOf) -> RememberInput:
    bad = Violations()
    privacy = _privacy(bad, request.privacy)
    namespace = namespace_of(bad, request.namespace)
    requested = bad.check(None, pii_action, request.pii_policy, "pii_policy")
    draft = _draft(bad, namespace, request, pii_policy(namespace, requested))
    bad.raise_if_any()
    assert draft is not None  # else raised above
    return RememberInput(draft, privacy)


def import_batch(batch: store_pb2.ImportMemoriesRequest, pii_policy: PiiPolicyOf) -> ImportBatch:
    """A batch's own fields: a bad one fails the stream (its items are not read)."""
    bad = Violations()
    namespace = namespace_of(bad, batch.namespace)
    batch_pii = bad.check(None, pii_action, batch.pii_policy, "pii_policy")
    if len(batch.items) > MAX_IMPORT_BATCH:
        bad.add("items", f"at most {MAX_IMPORT_BATCH} items per message")
    bad.raise_if_any()
    return ImportBatch(namespace, pii_policy(namespace, batch_pii))


def import_item(
    batch: ImportBatch, item: store_pb2.ImportItem, prefix: str, pii_policy: PiiPolicyOf
) -> rules.MemoryDraft:
    """One item (`prefix`: `items[<its index in the stream>].`); a bad one fails
    alone, with an InvalidArgument naming every bad field."""
    pii = (
        batch.pii
        if not item.pii_policy
        else pii_policy(batch.namespace, pii_action(item.pii_policy, f"{prefix}pii_policy"))
    )
    bad = Violations()
    draft = _draft(bad, batch.namespace, item, pii, prefix)
    bad.raise_if_any()
    assert draft is not None
    return draft


# ---- reads ----------------------------------------------------------------------------


def get_memory(request: store_pb2.GetMemoryRequest) -> GetMemoryInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    memory_id = bad.check("", validate_id, request.id, "id")
    bad.raise_if_any()
    return GetMemoryInput(namespace, memory_id)


def list_memories(request: store_pb2.ListMemoriesRequest) -> ListMemoriesInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    spec = with_as_of(filter_from_proto(request.filter, bad=bad), request, bad)
    spec = check_filter(spec, rules.MEMORY_TYPES, bad=bad)
    size = bad.check(DEFAULT_LIST_PAGE_SIZE, _page_size, request.page_size, DEFAULT_LIST_PAGE_SIZE)
    if request.deleted and spec.as_of is not None:
        bad.add("as_of", "not with deleted: tombstones are listed as of now")
    kind = "tombstones" if request.deleted else "memories"
    scope = f"{namespace}\x00{spec.fingerprint()}"
    after = bad.check(None, decode_time_position, request.page_token, kind, scope)
    bad.raise_if_any()
    return ListMemoriesInput(namespace, spec, size, after, request.deleted, scope)


def history(request: store_pb2.ListMemoryHistoryRequest) -> HistoryInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    memory_id = request.memory_id
    bad.check("", validate_id, memory_id, "memory_id")
    size = bad.check(
        DEFAULT_HISTORY_PAGE_SIZE, _page_size, request.page_size, DEFAULT_HISTORY_PAGE_SIZE
    )
    scope = f"{namespace}\x00{memory_id}"
    after_seq = bad.check(None, decode_int_position, request.page_token, "history", scope)
    bad.raise_if_any()
    return HistoryInput(namespace, memory_id, size, after_seq, scope)


def record_access(request: access_pb2.RecordAccessRequest) -> AccessInput:
    """AccessService's (internal) one RPC: the ids of a recall's results ("" skipped)."""
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    memory_ids = tuple(request.memory_ids)
    if len(memory_ids) > MAX_ACCESS_IDS:
        bad.add("memory_ids", f"at most {MAX_ACCESS_IDS} ids")
    else:
        for index, memory_id in enumerate(memory_ids):
            if memory_id:
                bad.check("", validate_id, memory_id, f"memory_ids[{index}]")
    bad.raise_if_any()
    return AccessInput(namespace, memory_ids)


def near_duplicate(request: dedup_pb2.ResolveNearDuplicateRequest) -> dedup.NearDuplicateDecision:
    """DedupService.ResolveNearDuplicate (internal): the pipeline's decision."""
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    for field in ("survivor_id", "duplicate_id"):
        bad.check("", validate_id, getattr(request, field), field)
    if request.survivor_id and request.survivor_id == request.duplicate_id:
        bad.add("duplicate_id", "must differ from survivor_id")
    action = _NEAR_DUPLICATE_ACTIONS.get(request.action, "")
    if action not in dedup.ACTIONS:
        bad.add("action", "MERGE, SUPERSEDE or KEEP_BOTH is required")
    if not (0.0 <= request.similarity <= 1.0) or math.isnan(request.similarity):
        bad.add("similarity", "must be between 0 and 1")
    reason = bad.check("", rules.check_text, request.reason, "reason", rules.MAX_REASON_CHARS)
    decided_by = bad.check("", rules.check_text, request.decided_by, "decided_by", 64)
    bad.raise_if_any()
    return dedup.NearDuplicateDecision(
        namespace,
        request.survivor_id,
        request.duplicate_id,
        action,
        request.similarity,
        reason or dedup.DEFAULT_REASON,
        decided_by,
    )


# ---- ModifyMemories -------------------------------------------------------------------


def modify(request: store_pb2.ModifyMemoriesRequest, pii_policy: PiiPolicyOf) -> ModifyInput:
    bad = Violations()
    valid_from = [
        time_field(bad, p, "valid_from", f"patches[{i}].valid_from")
        for i, p in enumerate(request.patches)
    ]
    namespace = namespace_of(bad, request.namespace)
    requested = bad.check(None, pii_action, request.pii_policy, "pii_policy")
    pii = pii_policy(namespace, requested)
    patches = _patches(bad, request, valid_from, pii)
    actor = _actor(bad, acting(request.actor))
    bad.raise_if_any()
    return ModifyInput(namespace, patches, actor)


def _patches(
    bad: Violations,
    request: store_pb2.ModifyMemoriesRequest,
    valid_from: list[str | None],
    pii: PiiPolicy,
) -> tuple[Patch, ...]:
    """Every patch is validated before anything is written; one bad patch fails
    all, and every bad field of every patch is named."""
    if not request.patches:
        bad.add("patches", "at least one patch is required")
        return ()
    if len(request.patches) > MAX_PATCHES:
        bad.add("patches", f"at most {MAX_PATCHES} patches per request")
        return ()
    return tuple(
        _patch(bad, f"patches[{index}]", p, valid_from[index], request.reason, pii)
        for index, p in enumerate(request.patches)
    )


def _patch(
    bad: Violations,
    field: str,
    p: store_pb2.MemoryPatch,
    valid_from: str | None,
    default_reason: str,
    pii: PiiPolicy,
) -> Patch:
    content: str | None = _optional(p, "content")
    memory_type: str | None = _optional(p, "type")
    importance: float | None = _optional(p, "importance")
    tags = tuple(p.tags.values) if p.HasField("tags") else None
    categories = tuple(p.categories.values) if p.HasField("categories") else None
    decay_rate: float | None = _optional(p, "decay_rate")
    pinned: bool | None = _optional(p, "pinned")
    who: str | None = _optional(p, "who")
    bad.check("", validate_id, p.id, f"{field}.id")
    reason = bad.check(
        "", rules.check_reason, p.reason or default_reason, f"{field}.reason", pii=pii
    )
    changes = (content, memory_type, importance, tags, pinned, who, categories, decay_rate)
    if all(value is None for value in changes):
        bad.add(field, "sets no field to change")
    if p.supersede and content is None:
        bad.add(f"{field}.content", "required with supersede: the new version's content")
    if valid_from is not None and not p.supersede:
        bad.add(f"{field}.valid_from", "only with supersede")
    return Patch(
        id=p.id,
        content=None
        if content is None
        else bad.check(None, rules.check_content, content, f"{field}.content", pii=pii),
        type=None
        if memory_type is None
        else bad.check(None, rules.check_type, memory_type, f"{field}.type"),
        importance=None
        if importance is None
        else bad.check(None, rules.check_importance, importance, f"{field}.importance"),
        tags=None
        if tags is None
        else bad.check(None, rules.check_tags, tags, f"{field}.tags", pii=pii),
        pinned=pinned,
        who=None
        if who is None
        else bad.check(
            None,
            rules.check_text,
            who,
            f"{field}.who",
            rules.MAX_TEXT_FIELD_CHARS["who"],
            pii=pii,
        ),
        reason=reason,
        if_version=_optional(p, "if_version"),
        supersede=p.supersede,
        valid_from=valid_from,
        categories=None
        if categories is None
        else bad.check(None, rules.check_categories, categories, f"{field}.categories", pii=pii),
        decay_rate=None
        if decay_rate is None
        else bad.check(None, rules.check_decay_rate, decay_rate, f"{field}.decay_rate"),
    )


# ---- DeleteMemory, RecoverMemory, ForgetMemories ----------------------------------------


def _one_memory_change(
    request: store_pb2.DeleteMemoryRequest | store_pb2.RecoverMemoryRequest,
    pii_policy: PiiPolicyOf,
    force: bool,
) -> OneMemoryChange:
    """Delete's and Recover's request rules (the id, a reason, the actor), every
    bad field named at once."""
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    actor = acting(request.actor)
    bad.check("", validate_id, request.id, "id")
    reason = _reason(bad, request.reason, pii_policy(namespace, None))
    actor = _actor(bad, actor)
    bad.raise_if_any()
    return OneMemoryChange(
        namespace, request.id, reason, _optional(request, "if_version"), actor, force
    )


def delete(request: store_pb2.DeleteMemoryRequest, pii_policy: PiiPolicyOf) -> OneMemoryChange:
    return _one_memory_change(request, pii_policy, request.force)


def recover(request: store_pb2.RecoverMemoryRequest, pii_policy: PiiPolicyOf) -> OneMemoryChange:
    return _one_memory_change(request, pii_policy, False)


def forget(request: store_pb2.ForgetMemoriesRequest, pii_policy: PiiPolicyOf) -> ForgetInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    selection = ForgetSelection(
        ids=tuple(request.ids),
        query=request.query,
        spec=filter_from_proto(request.filter, bad=bad),
        limit=request.limit,
        # The deprecated `force` means both, as it did before the split.
        include_pinned=request.include_pinned or request.force,
        purge=request.purge or request.force,
    )
    execute = request.mode == store_pb2.FORGET_MODE_EXECUTE
    reason = request.reason
    if execute:
        reason = _reason(bad, reason, pii_policy(namespace, None))
    actor = _actor(bad, acting(request.actor))
    if len(selection.ids) > MAX_FORGET:
        bad.add("ids", f"at most {MAX_FORGET} ids")
    else:
        bad.check((), validate_ids, selection.ids, "ids")
    if not 0 <= selection.limit <= MAX_FORGET:
        bad.add("limit", f"must be between 0 and {MAX_FORGET}")
    spec = check_filter(selection.spec, rules.MEMORY_TYPES, bad=bad)
    terms: tuple[str, ...] = ()
    if selection.query.strip():
        if len(selection.query) > MAX_QUERY_CHARS:
            bad.add("query", f"must be at most {MAX_QUERY_CHARS} characters")
        else:
            # Recall's keyword channel's terms: a memory matching any of them is a candidate.
            terms = tuple(quoted(term) for term in keyword_terms(selection.query))
            if not terms:
                bad.add("query", "contains no searchable words")
    elif not selection.ids and spec.is_empty() and not bad.names("filter"):
        bad.add("ids", "give ids, a query or a filter to select memories")
    bad.raise_if_any()
    return ForgetInput(
        namespace, selection, spec, terms, execute, reason, request.confirm_token, actor
    )


# ---- sessions ---------------------------------------------------------------------------


def append_turn(
    request: store_pb2.AppendTurnRequest, plan: Callable[[Turn], TurnInput]
) -> TurnInput:
    """`plan`: Sessions.plan_turn, which decides (by the privacy level and the
    user's intent) what memory the turn becomes, and checks it."""
    bad = Violations()
    turn = Turn(
        namespace=namespace_of(bad, request.namespace),
        session_id=request.session_id,
        role=_TURN_ROLES.get(request.role, ""),
        content=request.content,
        who=request.who,
        event_time=time_field(bad, request, "event_time", "event_time"),
        source_id=request.source_id,
        ttl_nanos=bad.check(None, nanos_from_duration, request.ttl, request.HasField("ttl"), "ttl"),
        privacy=_privacy(bad, request.privacy),
        actor=acting(""),
    )
    planned = bad.check_all(None, plan, turn)
    bad.raise_if_any()
    assert planned is not None
    return planned


def session(
    request: store_pb2.SummarizeSessionRequest | store_pb2.GetSessionRequest,
) -> SessionInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    session_id = bad.check("", _session_id, request.session_id, "session_id")
    bad.raise_if_any()
    return SessionInput(namespace, session_id)


# ---- ExplainMemory, ListMemoryLinks ---------------------------------------------------


def explain_memory(request: store_pb2.ExplainMemoryRequest) -> GetMemoryInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    bad.check("", validate_id, request.id, "id")
    bad.raise_if_any()
    return GetMemoryInput(namespace, request.id)


def list_links(request: store_pb2.ListMemoryLinksRequest) -> ListLinksInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    memory_id = request.memory_id
    direction = _DIRECTIONS.get(request.direction, "both")
    bad.check("", validate_id, memory_id, "memory_id")
    for index, link_type in enumerate(request.link_types):
        if link_type not in LINK_TYPES:
            bad.add(f"link_types[{index}]", f"unknown link type {echo(link_type)}")
    if not 0 <= request.page_size <= explain.MAX_LINK_PAGE:
        bad.add("page_size", f"must be between 0 and {explain.MAX_LINK_PAGE}")
    types = tuple(sorted(set(request.link_types))) or LINK_TYPES
    scope = "\x00".join([namespace, memory_id, direction, *types])
    after = bad.check(None, decode_time_position, request.page_token, "links", scope)
    bad.raise_if_any()
    size = request.page_size or explain.DEFAULT_LINK_PAGE
    return ListLinksInput(namespace, memory_id, types, direction, size, after, scope)


# ---- GetEntity, ListEntities ------------------------------------------------------------


def _count(bad: Violations, value: int, field: str) -> int:
    if not 0 <= value <= entities.MAX_ITEMS:
        bad.add(field, f"must be between 0 and {entities.MAX_ITEMS}")
    return value or entities.DEFAULT_ITEMS


def _name(bad: Violations, value: str, field: str) -> str:
    if len(value) > MAX_ENTITY_CHARS:
        bad.add(field, f"at most {MAX_ENTITY_CHARS} characters")
    return canonical_name(value)


def get_entity(request: store_pb2.GetEntityRequest) -> GetEntityInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    entity_id, name = request.id, request.name
    if bool(entity_id) == bool(name.strip()):
        bad.add("id", "exactly one of id and name is required")
        bad.add("name", "exactly one of id and name is required")
    elif entity_id:
        bad.check("", validate_id, entity_id, "id")
    canonical = _name(bad, name, "name")
    facts = _count(bad, request.max_facts, "max_facts")
    neighbors = _count(bad, request.max_neighbors, "max_neighbors")
    bad.raise_if_any()
    return GetEntityInput(namespace, entity_id, name, canonical, facts, neighbors)


def list_entities(request: store_pb2.ListEntitiesRequest) -> ListEntitiesInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    name_prefix, entity_type = request.name_prefix, request.entity_type
    min_mentions, page_size = request.min_mentions, request.page_size
    prefix = _name(bad, name_prefix, "name_prefix") if name_prefix.strip() else ""
    if entity_type and entity_type not in ENTITY_TYPES:
        bad.add("entity_type", f"unknown entity type {echo(entity_type)}")
    if min_mentions < 0:
        bad.add("min_mentions", "must not be negative")
    if not 0 <= page_size <= entities.MAX_ENTITY_PAGE:
        bad.add("page_size", f"must be between 0 and {entities.MAX_ENTITY_PAGE}")
    scope = "\x00".join([namespace, prefix, entity_type, str(min_mentions)])
    after = bad.check(None, decode_ranked_position, request.page_token, "entities", scope)
    bad.raise_if_any()
    size = page_size or entities.DEFAULT_ENTITY_PAGE
    return ListEntitiesInput(namespace, prefix, entity_type, min_mentions, size, after, scope)


# ---- ListWeakMemories -------------------------------------------------------------------


def weak_page(request: store_pb2.ListWeakMemoriesRequest) -> WeakPageInput:
    bad = Violations()
    namespace = namespace_of(bad, request.namespace)
    size = bad.check(DEFAULT_LIST_PAGE_SIZE, _page_size, request.page_size, DEFAULT_LIST_PAGE_SIZE)
    after = bad.check(None, decode_int_position, request.page_token, weak.PAGE_KIND, namespace)
    bad.raise_if_any()
    return WeakPageInput(namespace, size, after)


# ---- DeleteNamespace, RecoverNamespace --------------------------------------------------


def delete_namespace(request: store_pb2.DeleteNamespaceRequest) -> DeleteNamespaceInput:
    bad = Violations()
    namespace = _named_namespace(bad, request.namespace)
    if request.mode not in _FORGET_MODES:
        bad.add("mode", f"unknown ForgetMode value {request.mode}")
    execute = request.mode == store_pb2.FORGET_MODE_EXECUTE
    actor = acting(request.actor)
    reason = _reason(bad, request.reason) if execute else request.reason
    actor = _actor(bad, actor)
    bad.raise_if_any()
    return DeleteNamespaceInput(namespace, execute, reason, request.confirm_token, actor)


def recover_namespace(request: store_pb2.RecoverNamespaceRequest) -> RecoverNamespaceInput:
    bad = Violations()
    namespace = _named_namespace(bad, request.namespace)
    actor = acting(request.actor)
    reason = _reason(bad, request.reason)
    actor = _actor(bad, actor)
    bad.raise_if_any()
    return RecoverNamespaceInput(namespace, reason, actor)
