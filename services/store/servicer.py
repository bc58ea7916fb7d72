"""MemoryStoreService: translate proto <-> domain, nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import struct_pb2, timestamp_pb2

from engram.common.v1 import pii_policy_pb2, privacy_pb2
from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common import clock, tracing, turn_roles
from services.common.auth import acting
from services.common.convert import (
    filter_from_proto,
    memory_to_proto,
    nanos_from_duration,
    temporal_from_proto,
    text_from_timestamp,
    timestamp_from_text,
    with_as_of,
)
from services.common.errors import InvalidArgument, NotFound, Violations
from services.common.pii import PiiAction, PiiPolicy
from services.common.validation import DEFAULT_NAMESPACE, validate_namespace
from services.store import dedup, rules
from services.store.consolidation import Consolidation
from services.store.entities import EntityRecord, get_entity, list_entities
from services.store.explain import explain, list_links
from services.store.memories import (
    ForgetSelection,
    HistoryEntry,
    MemoryStore,
    PatchSpec,
)
from services.store.namespaces import Namespaces
from services.store.sessions import Sessions, Turn
from services.store.weak import WeakMemories

MAX_IMPORT_BATCH = 1000

_IMPORT_STATUS = {
    "created": store_pb2.IMPORT_STATUS_CREATED,
    "deduplicated": store_pb2.IMPORT_STATUS_DEDUPLICATED,
    "failed": store_pb2.IMPORT_STATUS_FAILED,
}
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
_CONSOLIDATION_STATES = {
    "open": store_pb2.SESSION_CONSOLIDATION_STATE_OPEN,
    "queued": store_pb2.SESSION_CONSOLIDATION_STATE_QUEUED,
    "consolidated": store_pb2.SESSION_CONSOLIDATION_STATE_CONSOLIDATED,
    "failed": store_pb2.SESSION_CONSOLIDATION_STATE_FAILED,
}
_DIRECTIONS = {
    store_pb2.LINK_DIRECTION_OUTGOING: "outgoing",
    store_pb2.LINK_DIRECTION_INCOMING: "incoming",
}
_PATCH_STATUS = {
    "updated": store_pb2.PATCH_STATUS_UPDATED,
    "unchanged": store_pb2.PATCH_STATUS_UNCHANGED,
    "version_conflict": store_pb2.PATCH_STATUS_VERSION_CONFLICT,
    "not_found": store_pb2.PATCH_STATUS_NOT_FOUND,
    "duplicate_content": store_pb2.PATCH_STATUS_DUPLICATE_CONTENT,
    "already_superseded": store_pb2.PATCH_STATUS_ALREADY_SUPERSEDED,
    "starts_before_target": store_pb2.PATCH_STATUS_STARTS_BEFORE_TARGET,
}


def history_event_type(event: str) -> store_pb2.HistoryEventType.ValueType:
    """The proto value of a `memory_history.event` string: its name upper-cased
    after the enum's prefix. An event the proto does not declare is an error
    (INTERNAL), never UNSPECIFIED, which the proto says is never sent."""
    return store_pb2.HistoryEventType.Value(f"HISTORY_EVENT_TYPE_{event.upper()}")


def _history_to_proto(entry: HistoryEntry) -> store_pb2.HistoryEvent:
    metadata = struct_pb2.Struct()
    metadata.update(entry.metadata)
    return store_pb2.HistoryEvent(
        id=entry.id,
        memory_id=entry.memory_id,
        event_type=history_event_type(entry.event),
        old_content=entry.old_content or "",
        new_content=entry.new_content or "",
        actor=entry.actor,
        reason=entry.reason,
        metadata=metadata,
        create_time=timestamp_from_text(entry.created_at),
    )


_PII_ACTIONS: dict[int, PiiAction] = {
    pii_policy_pb2.PII_POLICY_ALLOW: "allow",
    pii_policy_pb2.PII_POLICY_REDACT: "redact",
    pii_policy_pb2.PII_POLICY_REJECT: "reject",
}


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


def _draft(
    namespace: str,
    item: Any,
    pii: PiiPolicy,
    field_prefix: str = "",
    bad: Violations | None = None,
) -> rules.MemoryDraft:
    """RememberRequest and ImportItem carry the same fields."""
    bad = bad if bad is not None else Violations()
    return rules.draft_memory(
        namespace=namespace,
        content=item.content,
        memory_type=item.type,
        importance=item.importance if item.HasField("importance") else None,
        tags=item.tags,
        pinned=item.pinned,
        who=item.who,
        why=item.why,
        source_type=item.source_type,
        source_id=item.source_id,
        event_time=bad.check(
            None,
            text_from_timestamp,
            item.event_time,
            item.HasField("event_time"),
            f"{field_prefix}event_time",
        ),
        field_prefix=field_prefix,
        bad=bad,
        actor=acting(""),
        session_id=item.session_id,
        ttl_nanos=bad.check(
            None, nanos_from_duration, item.ttl, item.HasField("ttl"), f"{field_prefix}ttl"
        ),
        pii=pii,
        categories=item.categories,
        valid_from=_valid_time(item, "valid_from", field_prefix, bad),
        valid_until=_valid_time(item, "valid_until", field_prefix, bad),
        **_import_only(item, field_prefix, bad),
    )


def _import_only(item: Any, field_prefix: str, bad: Violations) -> dict[str, Any]:
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
        "expire_at": _valid_time(item, "expire_time", field_prefix, bad),
        "temporal_class": temporal,
        "confidence": _optional(item, "confidence"),
        "decay_rate": _optional(item, "decay_rate"),
        "prefixes": not item.literal_content,
    }


def _valid_time(item: Any, name: str, field_prefix: str, bad: Violations) -> str | None:
    """An ImportItem's valid_from, valid_until or expire_time (RememberRequest has none)."""
    if name not in item.DESCRIPTOR.fields_by_name:
        return None
    value: str | None = bad.check(
        None,
        text_from_timestamp,
        getattr(item, name),
        item.HasField(name),
        f"{field_prefix}{name}",
    )
    return value


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _privacy(bad: Violations, level: privacy_pb2.PrivacyLevel.ValueType) -> str:
    if level not in PRIVACY_LEVELS:
        bad.add("privacy", "unknown privacy level")
    return PRIVACY_LEVELS.get(level, "")


class MemoryStoreServicer(store_pb2_grpc.MemoryStoreServiceServicer):
    def __init__(
        self,
        store: MemoryStore,
        sessions: Sessions,
        consolidation: Consolidation,
        weak: WeakMemories,
        namespaces: Namespaces,
        *,
        graph_off_reason: str = "",
    ) -> None:
        # why no entity is being added (services.common.config.graph_off_reason)
        self._graph_off_reason = graph_off_reason
        self._store = store
        self._sessions = sessions
        self._consolidation = consolidation
        self._weak = weak
        self._namespaces = namespaces

    async def Remember(
        self, request: store_pb2.RememberRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.RememberResponse:
        bad = Violations()
        privacy = _privacy(bad, request.privacy)
        namespace = namespace_of(bad, request.namespace)
        requested = bad.check(None, pii_action, request.pii_policy, "pii_policy")
        pii = self._store.pii_policy(namespace, requested)
        draft = _draft(namespace, request, pii, bad=bad)
        record, deduplicated = await self._store.remember(draft, privacy)
        tracing.note_job_trace(record.id)  # its embed job's span links here
        return store_pb2.RememberResponse(memory=memory_to_proto(record), deduplicated=deduplicated)

    async def ImportMemories(
        self,
        request_iterator: AsyncIterator[store_pb2.ImportMemoriesRequest],
        context: grpc.aio.ServicerContext,
    ) -> store_pb2.ImportMemoriesResponse:
        session = self._store.start_import()
        try:
            async for batch in request_iterator:
                bad = Violations()
                namespace = namespace_of(bad, batch.namespace)
                batch_pii = bad.check(None, pii_action, batch.pii_policy, "pii_policy")
                if len(batch.items) > MAX_IMPORT_BATCH:
                    bad.add("items", f"at most {MAX_IMPORT_BATCH} items per message")
                bad.raise_if_any()
                batch_policy = self._store.pii_policy(namespace, batch_pii)
                for item in batch.items:
                    prefix = f"items[{session.count}]."
                    try:
                        pii = (
                            batch_policy
                            if not item.pii_policy
                            else self._store.pii_policy(
                                namespace, pii_action(item.pii_policy, f"{prefix}pii_policy")
                            )
                        )
                        draft: rules.MemoryDraft | InvalidArgument = _draft(
                            namespace, item, pii, prefix
                        )
                    except InvalidArgument as invalid:
                        draft = invalid
                    await session.add(draft)
            outcomes = await session.finish()
        finally:
            await session.close()
        response = store_pb2.ImportMemoriesResponse(
            results=[
                store_pb2.ImportResult(
                    index=o.index,
                    status=_IMPORT_STATUS[o.status],
                    memory_id=o.memory_id,
                    error=o.error,
                )
                for o in outcomes
            ]
        )
        for outcome in outcomes:
            if outcome.status == "created":
                response.created_count += 1
            elif outcome.status == "deduplicated":
                response.deduplicated_count += 1
            else:
                response.failed_count += 1
        return response

    async def GetMemory(
        self, request: store_pb2.GetMemoryRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetMemoryResponse:
        bad = Violations()
        namespace = namespace_of(bad, request.namespace)
        record = await self._store.get(namespace, request.id, bad)
        return store_pb2.GetMemoryResponse(
            memory=memory_to_proto(record),
            merged_into_id=await dedup.merged_into(self._store.reads, namespace, record),
            superseded_by_id=await dedup.superseded_by(self._store.reads, namespace, record),
        )

    async def ListMemories(
        self, request: store_pb2.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListMemoriesResponse:
        bad = Violations()
        records, next_token = await self._store.list_memories(
            namespace_of(bad, request.namespace),
            with_as_of(
                filter_from_proto(request.filter, bad=bad),
                request.as_of,
                request.HasField("as_of"),
                bad,
            ),
            request.page_size,
            request.page_token,
            deleted=request.deleted,
            bad=bad,
        )
        return store_pb2.ListMemoriesResponse(
            memories=[memory_to_proto(r) for r in records], next_page_token=next_token
        )

    async def ModifyMemories(
        self, request: store_pb2.ModifyMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ModifyMemoriesResponse:
        bad = Violations()
        patches = [
            PatchSpec(
                id=p.id,
                content=_optional(p, "content"),
                type=_optional(p, "type"),
                importance=_optional(p, "importance"),
                tags=tuple(p.tags.values) if p.HasField("tags") else None,
                categories=tuple(p.categories.values) if p.HasField("categories") else None,
                decay_rate=_optional(p, "decay_rate"),
                pinned=_optional(p, "pinned"),
                who=_optional(p, "who"),
                reason=p.reason,
                if_version=_optional(p, "if_version"),
                supersede=p.supersede,
                valid_from=bad.check(
                    None,
                    text_from_timestamp,
                    p.valid_from,
                    p.HasField("valid_from"),
                    f"patches[{i}].valid_from",
                ),
            )
            for i, p in enumerate(request.patches)
        ]
        namespace = namespace_of(bad, request.namespace)
        requested = bad.check(None, pii_action, request.pii_policy, "pii_policy")
        outcomes = await self._store.modify(
            namespace,
            patches,
            request.reason,
            acting(request.actor),
            bad,
            pii=self._store.pii_policy(namespace, requested),
        )
        return store_pb2.ModifyMemoriesResponse(
            results=[
                store_pb2.PatchResult(
                    id=o.id,
                    status=_PATCH_STATUS[o.status],
                    current_version=o.current_version,
                    new_version=o.new_version,
                    content_changed=o.content_changed,
                    duplicate_memory_id=o.duplicate_memory_id,
                    new_memory_id=o.new_memory_id,
                )
                for o in outcomes
            ]
        )

    async def DeleteMemory(
        self, request: store_pb2.DeleteMemoryRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.DeleteMemoryResponse:
        bad = Violations()
        record = await self._store.delete(
            namespace_of(bad, request.namespace),
            request.id,
            request.reason,
            _optional(request, "if_version"),
            request.force,
            acting(request.actor),
            bad,
        )
        return store_pb2.DeleteMemoryResponse(memory=memory_to_proto(record))

    async def ForgetMemories(
        self, request: store_pb2.ForgetMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ForgetMemoriesResponse:
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
        outcome = await self._store.forget(
            namespace,
            selection,
            execute=request.mode == store_pb2.FORGET_MODE_EXECUTE,
            reason=request.reason,
            confirm_token=request.confirm_token,
            actor=acting(request.actor),
            bad=bad,
        )
        return store_pb2.ForgetMemoriesResponse(
            candidates=[
                store_pb2.ForgetCandidate(
                    id=c.id, content=c.content, version=c.version, pinned=c.pinned
                )
                for c in outcome.candidates
            ],
            candidate_count=len(outcome.candidates),
            more_matching=outcome.more_matching,
            matching_count=outcome.matching_count,
            confirm_token=outcome.confirm_token,
            deleted_count=outcome.deleted_count,
            hard_deleted=outcome.hard_deleted,
        )

    async def RecoverMemory(
        self, request: store_pb2.RecoverMemoryRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.RecoverMemoryResponse:
        bad = Violations()
        record = await self._store.recover(
            namespace_of(bad, request.namespace),
            request.id,
            request.reason,
            _optional(request, "if_version"),
            acting(request.actor),
            bad,
        )
        return store_pb2.RecoverMemoryResponse(memory=memory_to_proto(record))

    async def ListMemoryHistory(
        self, request: store_pb2.ListMemoryHistoryRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListMemoryHistoryResponse:
        bad = Violations()
        entries, next_token = await self._store.history(
            namespace_of(bad, request.namespace),
            request.memory_id,
            request.page_size,
            request.page_token,
            bad,
        )
        return store_pb2.ListMemoryHistoryResponse(
            events=[_history_to_proto(e) for e in entries], next_page_token=next_token
        )

    async def AppendTurn(
        self, request: store_pb2.AppendTurnRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendTurnResponse:
        bad = Violations()
        turn = Turn(
            namespace=namespace_of(bad, request.namespace),
            session_id=request.session_id,
            role=_TURN_ROLES.get(request.role, ""),
            content=request.content,
            who=request.who,
            event_time=bad.check(
                None,
                text_from_timestamp,
                request.event_time,
                request.HasField("event_time"),
                "event_time",
            ),
            source_id=request.source_id,
            ttl_nanos=bad.check(
                None, nanos_from_duration, request.ttl, request.HasField("ttl"), "ttl"
            ),
            privacy=_privacy(bad, request.privacy),
            actor=acting(""),
        )
        outcome = await self._sessions.append_turn(turn, bad)
        response = store_pb2.AppendTurnResponse(
            captured=outcome.captured,
            long_term_intent=outcome.long_term_intent,
            promoted=outcome.promoted,
            deduplicated=outcome.deduplicated,
            notice=outcome.notice,
        )
        if outcome.record is not None:
            response.memory.CopyFrom(memory_to_proto(outcome.record))
        return response

    async def SummarizeSession(
        self, request: store_pb2.SummarizeSessionRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.SummarizeSessionResponse:
        bad = Violations()
        outcome = await self._sessions.summarize(
            namespace_of(bad, request.namespace), request.session_id, bad
        )
        return store_pb2.SummarizeSessionResponse(
            job_id=outcome.job_id,
            already_queued=outcome.already_queued,
            turn_count=outcome.turn_count,
        )

    async def GetSession(
        self, request: store_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetSessionResponse:
        bad = Violations()
        found = await self._consolidation.session(
            namespace_of(bad, request.namespace), request.session_id, bad
        )
        return store_pb2.GetSessionResponse(
            session_id=found.session_id,
            state=_CONSOLIDATION_STATES[found.state],
            first_seen_time=timestamp_from_text(found.first_seen_at),
            last_seen_time=timestamp_from_text(found.last_seen_at),
            end_time=timestamp_from_text(found.ended_at),
            end_reason=found.end_reason,
            job_id=found.job_id,
            consolidate_time=timestamp_from_text(found.consolidated_at),
            error=found.error,
        )

    async def ExplainMemory(
        self, request: store_pb2.ExplainMemoryRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ExplainMemoryResponse:
        bad = Violations()
        found = await explain(
            self._store.reads, namespace_of(bad, request.namespace), request.id, bad
        )
        memories = memory_to_proto
        return store_pb2.ExplainMemoryResponse(
            memory=memories(found.memory),
            supersedes=[memories(r) for r in found.supersedes],
            superseded_by=[memories(r) for r in found.superseded_by],
            derived_from=[memories(r) for r in found.derived_from],
            derivations=[memories(r) for r in found.derivations],
            events=[_history_to_proto(e) for e in found.events],
            events_truncated=found.events_truncated,
        )

    async def ListMemoryLinks(
        self, request: store_pb2.ListMemoryLinksRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListMemoryLinksResponse:
        bad = Violations()
        links, next_token = await list_links(
            self._store.reads,
            namespace_of(bad, request.namespace),
            request.memory_id,
            tuple(request.link_types),
            _DIRECTIONS.get(request.direction, "both"),
            request.page_size,
            request.page_token,
            bad,
        )
        return store_pb2.ListMemoryLinksResponse(
            links=[
                store_pb2.MemoryLink(
                    id=link.id,
                    link_type=link.link_type,
                    from_memory_id=link.from_memory_id,
                    to_memory_id=link.to_memory_id,
                    create_time=timestamp_from_text(link.created_at),
                    job_id=link.job_id,
                    weight=link.weight,
                    confidence=link.confidence,
                    valid_from=timestamp_from_text(link.valid_from),
                    valid_until=timestamp_from_text(link.valid_until),
                    evidence_memory_ids=link.evidence,
                )
                for link in links
            ],
            next_page_token=next_token,
        )

    async def GetEntity(
        self, request: store_pb2.GetEntityRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetEntityResponse:
        bad = Violations()
        try:
            found = await get_entity(
                self._store.reads,
                namespace_of(bad, request.namespace),
                request.id,
                request.name,
                request.max_facts,
                request.max_neighbors,
                bad,
            )
        except NotFound as exc:
            if not self._graph_off_reason:
                raise
            raise NotFound(f"{exc.message}; {self._graph_off_reason}") from None
        return store_pb2.GetEntityResponse(
            entity=_entity_to_proto(found.entity),
            facts=[memory_to_proto(r) for r in found.facts],
            facts_truncated=found.facts_truncated,
            neighbors=[
                store_pb2.EntityNeighbor(
                    entity=_entity_to_proto(n.entity),
                    relation_type=n.relation_type,
                    outgoing=n.outgoing,
                    strength=n.strength,
                    confidence=n.confidence,
                    mentions=n.mentions,
                )
                for n in found.neighbors
            ],
            neighbors_truncated=found.neighbors_truncated,
        )

    async def ListEntities(
        self, request: store_pb2.ListEntitiesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListEntitiesResponse:
        bad = Violations()
        entities, next_token = await list_entities(
            self._store.reads,
            namespace_of(bad, request.namespace),
            request.name_prefix,
            request.entity_type,
            request.min_mentions,
            request.page_size,
            request.page_token,
            bad,
        )
        return store_pb2.ListEntitiesResponse(
            entities=[_entity_to_proto(e) for e in entities],
            next_page_token=next_token,
            graph_off_reason=self._graph_off_reason,
        )

    async def ListWeakMemories(
        self, request: store_pb2.ListWeakMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListWeakMemoriesResponse:
        bad = Violations()
        found, next_token = await self._weak.page(
            namespace_of(bad, request.namespace), request.page_size, request.page_token, bad
        )
        return store_pb2.ListWeakMemoriesResponse(
            memories=[
                store_pb2.WeakMemory(
                    memory=memory_to_proto(w.memory), current_confidence=w.current_confidence
                )
                for w in found
            ],
            next_page_token=next_token,
            decay_threshold=self._weak.policy.threshold,
        )

    async def DeleteNamespace(
        self, request: store_pb2.DeleteNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.DeleteNamespaceResponse:
        bad = Violations()
        namespace = _named_namespace(bad, request.namespace)
        if request.mode not in _FORGET_MODES:
            bad.add("mode", f"unknown ForgetMode value {request.mode}")
        done = await self._namespaces.delete(
            namespace,
            execute=request.mode == store_pb2.FORGET_MODE_EXECUTE,
            reason=request.reason,
            confirm_token=request.confirm_token,
            actor=acting(request.actor),
            bad=bad,
        )
        c = done.contents
        response = store_pb2.DeleteNamespaceResponse(
            contents=store_pb2.NamespaceContents(
                memories=c.memories,
                pinned_memories=c.pinned_memories,
                deleted_memories=c.deleted_memories,
                entities=c.entities,
                documents=c.documents,
            ),
            confirm_token=done.confirm_token,
            deleted_count=done.deleted_count,
            delete_time=timestamp_from_text(done.deleted_at),
            recover_until=timestamp_from_text(done.recover_until),
        )
        return response

    async def RecoverNamespace(
        self, request: store_pb2.RecoverNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.RecoverNamespaceResponse:
        bad = Violations()
        done = await self._namespaces.recover(
            _named_namespace(bad, request.namespace),
            reason=request.reason,
            actor=acting(request.actor),
            bad=bad,
        )
        return store_pb2.RecoverNamespaceResponse(
            recovered_count=done.recovered,
            skipped_duplicates=done.skipped_duplicates,
            delete_times=[
                timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
                for seconds, nanos in map(clock.epoch_from_text, done.deletions)
            ],
        )


_FORGET_MODES = frozenset(store_pb2.ForgetMode.values())


def _named_namespace(bad: Violations, namespace: str) -> str:
    """A namespace the request must name (empty is not read as the default one)."""
    if not namespace:
        bad.add("namespace", 'name the namespace (to act on the default one, name "default")')
        return DEFAULT_NAMESPACE
    return namespace_of(bad, namespace)


def _entity_to_proto(entity: EntityRecord) -> store_pb2.Entity:
    return store_pb2.Entity(
        id=entity.id,
        name=entity.name,
        entity_type=entity.entity_type,
        aliases=entity.aliases,
        mention_count=entity.mentions,
        create_time=timestamp_from_text(entity.created_at),
        update_time=timestamp_from_text(entity.updated_at),
    )
