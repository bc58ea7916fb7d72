"""MemoryStoreService: parse the request (services/store/requests.py), call the
domain with the typed input, translate the result to proto; nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from google.protobuf import struct_pb2, timestamp_pb2

from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common import clock, tracing
from services.common.convert import memory_to_proto, timestamp_from_text
from services.common.errors import InvalidArgument, NotFound
from services.store import dedup, requests
from services.store.consolidation import Consolidation
from services.store.entities import EntityRecord, get_entity, list_entities
from services.store.explain import explain, list_links
from services.store.memories import HistoryEntry, MemoryStore
from services.store.namespaces import Namespaces
from services.store.rules import MemoryDraft
from services.store.sessions import Sessions
from services.store.weak import WeakMemories

_IMPORT_STATUS = {
    "created": store_pb2.IMPORT_STATUS_CREATED,
    "deduplicated": store_pb2.IMPORT_STATUS_DEDUPLICATED,
    "failed": store_pb2.IMPORT_STATUS_FAILED,
}
_CONSOLIDATION_STATES = {
    "open": store_pb2.SESSION_CONSOLIDATION_STATE_OPEN,
    "queued": store_pb2.SESSION_CONSOLIDATION_STATE_QUEUED,
    "consolidated": store_pb2.SESSION_CONSOLIDATION_STATE_CONSOLIDATED,
    "failed": store_pb2.SESSION_CONSOLIDATION_STATE_FAILED,
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
        asked = requests.remember(request, self._store.pii_policy)
        record, deduplicated = await self._store.remember(asked.draft, asked.privacy)
        tracing.note_job_trace(record.id)  # its embed job's span links here
        return store_pb2.RememberResponse(memory=memory_to_proto(record), deduplicated=deduplicated)

    async def ImportMemories(
        self,
        request_iterator: AsyncIterator[store_pb2.ImportMemoriesRequest],
        context: grpc.aio.ServicerContext,
    ) -> store_pb2.ImportMemoriesResponse:
        session = self._store.start_import()
        try:
            async for request in request_iterator:
                batch = requests.import_batch(request, self._store.pii_policy)
                for item in request.items:
                    prefix = f"items[{session.count}]."
                    try:
                        draft: MemoryDraft | InvalidArgument = requests.import_item(
                            batch, item, prefix, self._store.pii_policy
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
        asked = requests.get_memory(request)
        namespace = asked.namespace
        record = await self._store.get(asked)
        return store_pb2.GetMemoryResponse(
            memory=memory_to_proto(record),
            merged_into_id=await dedup.merged_into(self._store.reads, namespace, record),
            superseded_by_id=await dedup.superseded_by(self._store.reads, namespace, record),
        )

    async def ListMemories(
        self, request: store_pb2.ListMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListMemoriesResponse:
        records, next_token = await self._store.list_memories(requests.list_memories(request))
        return store_pb2.ListMemoriesResponse(
            memories=[memory_to_proto(r) for r in records], next_page_token=next_token
        )

    async def ModifyMemories(
        self, request: store_pb2.ModifyMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ModifyMemoriesResponse:
        outcomes = await self._store.modify(requests.modify(request, self._store.pii_policy))
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
        record = await self._store.delete(requests.delete(request, self._store.pii_policy))
        return store_pb2.DeleteMemoryResponse(memory=memory_to_proto(record))

    async def ForgetMemories(
        self, request: store_pb2.ForgetMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ForgetMemoriesResponse:
        outcome = await self._store.forget(requests.forget(request, self._store.pii_policy))
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
        record = await self._store.recover(requests.recover(request, self._store.pii_policy))
        return store_pb2.RecoverMemoryResponse(memory=memory_to_proto(record))

    async def ListMemoryHistory(
        self, request: store_pb2.ListMemoryHistoryRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListMemoryHistoryResponse:
        entries, next_token = await self._store.history(requests.history(request))
        return store_pb2.ListMemoryHistoryResponse(
            events=[_history_to_proto(e) for e in entries], next_page_token=next_token
        )

    async def AppendTurn(
        self, request: store_pb2.AppendTurnRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendTurnResponse:
        outcome = await self._sessions.append_turn(
            requests.append_turn(request, self._sessions.plan_turn)
        )
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
        outcome = await self._sessions.summarize(requests.session(request))
        return store_pb2.SummarizeSessionResponse(
            job_id=outcome.job_id,
            already_queued=outcome.already_queued,
            turn_count=outcome.turn_count,
        )

    async def GetSession(
        self, request: store_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetSessionResponse:
        found = await self._consolidation.session(requests.session(request))
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
        found = await explain(self._store.reads, requests.explain_memory(request))
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
        links, next_token = await list_links(self._store.reads, requests.list_links(request))
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
        asked = requests.get_entity(request)
        try:
            found = await get_entity(self._store.reads, asked)
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
        entities, next_token = await list_entities(
            self._store.reads, requests.list_entities(request)
        )
        return store_pb2.ListEntitiesResponse(
            entities=[_entity_to_proto(e) for e in entities],
            next_page_token=next_token,
            graph_off_reason=self._graph_off_reason,
        )

    async def ListWeakMemories(
        self, request: store_pb2.ListWeakMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListWeakMemoriesResponse:
        found, next_token = await self._weak.page(requests.weak_page(request))
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
        done = await self._namespaces.delete(requests.delete_namespace(request))
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
        done = await self._namespaces.recover(requests.recover_namespace(request))
        return store_pb2.RecoverNamespaceResponse(
            recovered_count=done.recovered,
            skipped_duplicates=done.skipped_duplicates,
            delete_times=[
                timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
                for seconds, nanos in map(clock.epoch_from_text, done.deletions)
            ],
        )


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
