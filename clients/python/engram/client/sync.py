# Generated from aio.py by scripts/gen_sync_client.py (`make gen-client`): do not
# edit; change aio.py (or the script) and regenerate. tests/client/ fails when
# this file is not what the script makes of aio.py.
"""`Engram`: the synchronous client of every public RPC of the store, search,
pipeline and maintenance services."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2_grpc

from engram.client import _common as c
from engram.client import _suite
from engram.client.channel import (
    DEFAULT_RETRY,
    RetryPolicy,
    TlsArg,
    channel_options,
    credentials_of,
    metadata_for,
    store_target,
)
from engram.client.errors import from_rpc_error
from engram.common.v1 import document_pb2, memory_pb2
from engram.maintenance.v1 import maintenance_pb2, maintenance_pb2_grpc
from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Engram:
    """A connection to one Engram suite.

    `address` is the store's (`host:port`, or a bare host for the default port
    50051); search, pipeline and maintenance are on the same host at the ports
    the store reports for its suite (SuiteService.GetSuite) unless given. Before
    the first call to one of them the client checks that it answers for the
    store's suite (gRPC health `engram.suite/<id>`, sent without the API key),
    and sends it nothing if not: `WrongSuite`. Every call has a deadline (`timeout` seconds unless
    the call passes its own); UNAVAILABLE is retried by gRPC within it. Failures
    raise `engram.client.EngramError` subclasses. Results are the generated
    protobuf messages. Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        *,
        api_key: str | None = None,
        tls: TlsArg = None,
        timeout: float = c.DEFAULT_TIMEOUT_S,
        stream_timeout: float = c.DEFAULT_STREAM_TIMEOUT_S,
        retry: RetryPolicy | None = DEFAULT_RETRY,
        search_address: str | None = None,
        pipeline_address: str | None = None,
        maintenance_address: str | None = None,
    ) -> None:
        self._store_host, store = store_target(address)
        # each service's address once known (the store's at once, the others' when
        # given or once the store has said)
        self.addresses: dict[str, str] = {"store": store}
        self._explicit = {
            "search": search_address,
            "pipeline": pipeline_address,
            "maintenance": maintenance_address,
        }
        self.addresses.update({k: v for k, v in self._explicit.items() if v})
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self._metadata = metadata_for(api_key)
        self._credentials = credentials_of(tls)
        self._options = channel_options(retry)
        self._channels: dict[str, grpc.Channel] = {}
        store_channel = self._channel(store)
        self._store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
        self._suite_stub = store_pb2_grpc.SuiteServiceStub(store_channel)
        self._suite: _suite.Suite | None = None
        self._confirmed: set[str] = set()  # targets that answered for the suite
        self._ready: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def _channel(self, target: str) -> grpc.Channel:
        if target not in self._channels:
            self._channels[target] = (
                grpc.insecure_channel(target, options=self._options)
                if self._credentials is None
                else grpc.secure_channel(target, self._credentials, options=self._options)
            )
        return self._channels[target]

    def _service_channel(self, service: str) -> grpc.Channel:
        """The channel to `service`, once it has confirmed the store's suite."""
        ready = self._ready.get(service)
        if ready is not None:
            return ready
        with self._lock:
            if self._suite is None:
                reply = self._call(self._suite_stub.GetSuite, store_pb2.GetSuiteRequest(), None)
                self._suite = _suite.suite_of(reply, self._store_host, self._explicit)
            address = self._suite.addresses[service]
            self.addresses[service] = address
            channel = self._channel(address)
            if address not in self._confirmed:
                self._confirm(service, address, channel, self._suite)
                self._confirmed.add(address)
            self._ready[service] = channel
            return channel

    def _confirm(
        self, service: str, address: str, channel: grpc.Channel, suite: _suite.Suite
    ) -> None:
        """The service's health check for the suite, with no metadata."""
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                _suite.health_request(suite), timeout=self.timeout
            )
        except grpc.RpcError as error:
            raise _suite.check_error(
                service, address, suite, self.addresses["store"], error
            ) from None
        _suite.check_answer(service, address, suite, self.addresses["store"], reply.status)

    def _search(self) -> search_pb2_grpc.SearchServiceStub:
        return search_pb2_grpc.SearchServiceStub(self._service_channel("search"))

    def _pipeline(self) -> pipeline_pb2_grpc.PipelineServiceStub:
        return pipeline_pb2_grpc.PipelineServiceStub(self._service_channel("pipeline"))

    def _maintenance(self) -> maintenance_pb2_grpc.MaintenanceServiceStub:
        channel = self._service_channel("maintenance")
        return maintenance_pb2_grpc.MaintenanceServiceStub(channel)

    def suite_id(self, *, timeout: float | None = None) -> str:
        """The id of the store's suite (SuiteService.GetSuite)."""
        reply = self._call(self._suite_stub.GetSuite, store_pb2.GetSuiteRequest(), timeout)
        return reply.suite_id

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()

    def __enter__(self) -> Engram:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(
        self,
        method: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout: float | None,
    ) -> Resp:
        try:
            return method(
                request,
                timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    # ---- store ------------------------------------------------------------------

    def remember(
        self,
        content: str,
        *,
        namespace: str = "",
        type: str = "",
        importance: float | None = None,
        tags: Iterable[str] = (),
        pinned: bool = False,
        who: str = "",
        why: str = "",
        source_type: str = "",
        source_id: str = "",
        event_time: c.TimeArg = None,
        session_id: str = "",
        ttl: c.DurationArg = None,
        privacy: c.PrivacyArg = "",
        categories: Iterable[str] = (),
        timeout: float | None = None,
    ) -> store_pb2.RememberResponse:
        """Stores a memory (or finds the same content already stored: `deduplicated`).
        With `ttl` (a timedelta or seconds) it is short-term and expires; `privacy`
        ("partial", "full") may refuse it (FailedPrecondition, reason PRIVACY_BLOCKED,
        whose message can be relayed to the person)."""
        request = store_pb2.RememberRequest(
            namespace=namespace,
            content=content,
            type=type,
            importance=importance,
            tags=list(tags),
            pinned=pinned,
            who=who,
            why=why,
            source_type=source_type,
            source_id=source_id,
            event_time=c.timestamp(event_time),
            session_id=session_id,
            ttl=c.duration(ttl),
            privacy=c.privacy_level(privacy),
            categories=list(categories),
        )
        return self._call(self._store.Remember, request, timeout)

    def get_memory(
        self, id: str, *, namespace: str = "", timeout: float | None = None
    ) -> memory_pb2.Memory:
        """One memory, a soft-deleted one included; `NotFound` if there is none."""
        request = store_pb2.GetMemoryRequest(namespace=namespace, id=id)
        return self._call(self._store.GetMemory, request, timeout).memory

    def list_memories_page(
        self,
        *,
        namespace: str = "",
        page_size: int = 0,
        page_token: str = "",
        filter: memory_pb2.MemoryFilter | None = None,
        deleted: bool = False,
        as_of: c.TimeArg = None,
        timeout: float | None = None,
    ) -> store_pb2.ListMemoriesResponse:
        """One page of ListMemories, as the RPC returns it; `as_of`: what was
        valid at that instant (as known then) instead of now."""
        request = store_pb2.ListMemoriesRequest(
            namespace=namespace,
            page_size=page_size,
            page_token=page_token,
            filter=filter,
            deleted=deleted,
            as_of=c.timestamp(as_of),
        )
        return self._call(self._store.ListMemories, request, timeout)

    def list_memories(
        self,
        *,
        namespace: str = "",
        page_size: int = 0,
        filter: memory_pb2.MemoryFilter | None = None,
        deleted: bool = False,
        as_of: c.TimeArg = None,
        timeout: float | None = None,
    ) -> Iterator[memory_pb2.Memory]:
        """Every matching memory, newest first, fetched a page at a time (each page
        its own call and deadline)."""
        token = ""
        while True:
            page = self.list_memories_page(
                namespace=namespace,
                page_size=page_size,
                page_token=token,
                filter=filter,
                deleted=deleted,
                as_of=as_of,
                timeout=timeout,
            )
            yield from page.memories
            token = page.next_page_token
            if not token:
                return

    def modify_memories(
        self,
        patches: Iterable[store_pb2.MemoryPatch],
        *,
        namespace: str = "",
        reason: str = "",
        actor: str = "",
        timeout: float | None = None,
    ) -> store_pb2.ModifyMemoriesResponse:
        """Up to 200 patches in one transaction; a result per patch."""
        request = store_pb2.ModifyMemoriesRequest(
            namespace=namespace, patches=list(patches), reason=reason, actor=actor
        )
        return self._call(self._store.ModifyMemories, request, timeout)

    def delete_memory(
        self,
        id: str,
        *,
        reason: str,
        namespace: str = "",
        if_version: int | None = None,
        force: bool = False,
        actor: str = "",
        timeout: float | None = None,
    ) -> memory_pb2.Memory:
        """Soft-deletes one memory and returns its tombstone."""
        request = store_pb2.DeleteMemoryRequest(
            namespace=namespace,
            id=id,
            reason=reason,
            if_version=if_version,
            force=force,
            actor=actor,
        )
        return self._call(self._store.DeleteMemory, request, timeout).memory

    def forget_memories(
        self,
        *,
        namespace: str = "",
        mode: store_pb2.ForgetMode.ValueType = store_pb2.FORGET_MODE_PREVIEW,
        ids: Iterable[str] = (),
        query: str = "",
        filter: memory_pb2.MemoryFilter | None = None,
        limit: int = 0,
        reason: str = "",
        confirm_token: str = "",
        actor: str = "",
        include_pinned: bool = False,
        purge: bool = False,
        timeout: float | None = None,
    ) -> store_pb2.ForgetMemoriesResponse:
        """PREVIEW (the default) shows the candidates and a confirm token; EXECUTE deletes."""
        request = store_pb2.ForgetMemoriesRequest(
            namespace=namespace,
            mode=mode,
            ids=list(ids),
            query=query,
            filter=filter,
            limit=limit,
            reason=reason,
            confirm_token=confirm_token,
            actor=actor,
            include_pinned=include_pinned,
            purge=purge,
        )
        return self._call(self._store.ForgetMemories, request, timeout)

    def recover_memory(
        self,
        id: str,
        *,
        reason: str,
        namespace: str = "",
        if_version: int | None = None,
        actor: str = "",
        timeout: float | None = None,
    ) -> memory_pb2.Memory:
        """Restores a soft-deleted memory within the retention window."""
        request = store_pb2.RecoverMemoryRequest(
            namespace=namespace, id=id, reason=reason, if_version=if_version, actor=actor
        )
        return self._call(self._store.RecoverMemory, request, timeout).memory

    def delete_namespace(
        self,
        namespace: str,
        *,
        mode: store_pb2.ForgetMode.ValueType = store_pb2.FORGET_MODE_PREVIEW,
        reason: str = "",
        confirm_token: str = "",
        actor: str = "",
        timeout: float | None = None,
    ) -> store_pb2.DeleteNamespaceResponse:
        """PREVIEW (the default) counts what the namespace holds and gives a confirm
        token; EXECUTE with that token soft-deletes every memory in it
        (`recover_namespace` brings them back within the tombstone window)."""
        request = store_pb2.DeleteNamespaceRequest(
            namespace=namespace, mode=mode, reason=reason, confirm_token=confirm_token, actor=actor
        )
        return self._call(self._store.DeleteNamespace, request, timeout)

    def recover_namespace(
        self, namespace: str, *, reason: str, actor: str = "", timeout: float | None = None
    ) -> store_pb2.RecoverNamespaceResponse:
        """Brings back what `delete_namespace` deleted, within the tombstone window."""
        request = store_pb2.RecoverNamespaceRequest(namespace=namespace, reason=reason, actor=actor)
        return self._call(self._store.RecoverNamespace, request, timeout)

    def supersede_memory(
        self,
        id: str,
        content: str,
        *,
        reason: str,
        namespace: str = "",
        valid_from: c.TimeArg = None,
        if_version: int | None = None,
        actor: str = "",
        timeout: float | None = None,
    ) -> store_pb2.PatchResult:
        """Records that a fact changed: a new memory with `content`, valid from
        `valid_from` (default now), replaces memory `id`, whose validity closes
        then (MemoryPatch.supersede). The result's `new_memory_id` is the new one."""
        patch = store_pb2.MemoryPatch(
            id=id,
            content=content,
            supersede=True,
            valid_from=c.timestamp(valid_from),
            if_version=if_version,
        )
        request = store_pb2.ModifyMemoriesRequest(
            namespace=namespace, patches=[patch], reason=reason, actor=actor
        )
        return self._call(self._store.ModifyMemories, request, timeout).results[0]

    def explain_memory(
        self, id: str, *, namespace: str = "", timeout: float | None = None
    ) -> store_pb2.ExplainMemoryResponse:
        """A memory's supersedes chain both ways, what it was derived from and
        what from it, and its audit trail; `NotFound` if there is none."""
        request = store_pb2.ExplainMemoryRequest(namespace=namespace, id=id)
        return self._call(self._store.ExplainMemory, request, timeout)

    def list_memory_links(
        self,
        memory_id: str,
        *,
        namespace: str = "",
        link_types: Iterable[str] = (),
        direction: store_pb2.LinkDirection.ValueType = store_pb2.LINK_DIRECTION_UNSPECIFIED,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[store_pb2.MemoryLink]:
        """Every link of a memory (`supersedes`, `derived_from`, `temporal`,
        `causal`, `entity`; both directions unless `direction` says), oldest
        first, a page at a time."""
        token = ""
        while True:
            request = store_pb2.ListMemoryLinksRequest(
                namespace=namespace,
                memory_id=memory_id,
                link_types=list(link_types),
                direction=direction,
                page_size=page_size,
                page_token=token,
            )
            page = self._call(self._store.ListMemoryLinks, request, timeout)
            yield from page.links
            token = page.next_page_token
            if not token:
                return

    def get_entity(
        self,
        id: str = "",
        *,
        name: str = "",
        namespace: str = "",
        max_facts: int = 0,
        max_neighbors: int = 0,
        timeout: float | None = None,
    ) -> store_pb2.GetEntityResponse:
        """An entity of the knowledge graph by `id` or by `name` (its canonical
        name or an alias): its type, aliases and mention count, its facts valid
        now and its neighbours with relation and strength; `NotFound` if the
        namespace has none."""
        request = store_pb2.GetEntityRequest(
            namespace=namespace,
            id=id,
            name=name,
            max_facts=max_facts,
            max_neighbors=max_neighbors,
        )
        return self._call(self._store.GetEntity, request, timeout)

    def list_entities(
        self,
        *,
        namespace: str = "",
        name_prefix: str = "",
        entity_type: str = "",
        min_mentions: int = 0,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[store_pb2.Entity]:
        """Every entity of the namespace matching the filters, most mentioned
        first, a page at a time."""
        token = ""
        while True:
            request = store_pb2.ListEntitiesRequest(
                namespace=namespace,
                name_prefix=name_prefix,
                entity_type=entity_type,
                min_mentions=min_mentions,
                page_size=page_size,
                page_token=token,
            )
            page = self._call(self._store.ListEntities, request, timeout)
            yield from page.entities
            token = page.next_page_token
            if not token:
                return

    def list_weak_memories(
        self, *, namespace: str = "", page_size: int = 0, timeout: float | None = None
    ) -> Iterator[store_pb2.WeakMemory]:
        """Every weak memory of the namespace (current decayed confidence under
        `memory.decay_threshold`) with that confidence, in written order, a page
        at a time."""
        token = ""
        while True:
            request = store_pb2.ListWeakMemoriesRequest(
                namespace=namespace, page_size=page_size, page_token=token
            )
            page = self._call(self._store.ListWeakMemories, request, timeout)
            yield from page.memories
            token = page.next_page_token
            if not token:
                return

    def list_memory_history(
        self,
        memory_id: str,
        *,
        namespace: str = "",
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[store_pb2.HistoryEvent]:
        """Every history event of a memory, oldest first, a page at a time."""
        token = ""
        while True:
            request = store_pb2.ListMemoryHistoryRequest(
                namespace=namespace, memory_id=memory_id, page_size=page_size, page_token=token
            )
            page = self._call(self._store.ListMemoryHistory, request, timeout)
            yield from page.events
            token = page.next_page_token
            if not token:
                return

    def append_turn(
        self,
        session_id: str,
        role: c.RoleArg,
        content: str,
        *,
        namespace: str = "",
        who: str = "",
        event_time: c.TimeArg = None,
        source_id: str = "",
        ttl: c.DurationArg = None,
        privacy: c.PrivacyArg = "",
        timeout: float | None = None,
    ) -> store_pb2.AppendTurnResponse:
        """Captures a conversation turn (`role`: "user", "assistant", "system" or
        "tool") as short-term memory of the session; a user turn that asks to be
        remembered is kept long-term (`promoted`). `notice` says when privacy
        stopped a capture or a promotion."""
        request = c.append_turn_request(
            session_id,
            role,
            content,
            namespace=namespace,
            who=who,
            event_time=event_time,
            source_id=source_id,
            ttl=ttl,
            privacy=privacy,
        )
        return self._call(self._store.AppendTurn, request, timeout)

    def summarize_session(
        self, session_id: str, *, namespace: str = "", timeout: float | None = None
    ) -> store_pb2.SummarizeSessionResponse:
        """Queues the pipeline's LLM to write the session's 24-hour summary."""
        request = store_pb2.SummarizeSessionRequest(namespace=namespace, session_id=session_id)
        return self._call(self._store.SummarizeSession, request, timeout)

    def get_session(
        self, session_id: str, *, namespace: str = "", timeout: float | None = None
    ) -> store_pb2.GetSessionResponse:
        """Where the session's consolidation is (open, queued, consolidated,
        failed); `NotFound` when the namespace tracks no such session."""
        request = store_pb2.GetSessionRequest(namespace=namespace, session_id=session_id)
        return self._call(self._store.GetSession, request, timeout)

    def import_memories(
        self,
        items: Iterable[c.ImportItemArg],
        *,
        namespace: str = "",
        batch_size: int = 500,
        on_progress: Callable[[c.ImportProgress], None] | None = None,
        on_results: Callable[[list[store_pb2.ImportResult]], None] | None = None,
        timeout: float | None = None,
        stream_items: int = c.MAX_STREAM_ITEMS,
    ) -> c.ImportSummary:
        """Streams `items` (ImportItem messages, or mappings of their fields) to
        ImportMemories, reading them lazily, in as many streams of up to 25000 items
        as needed. `on_progress` is called as batches are sent and as each stream is
        answered; `on_results` gets each stream's results (indexes over the whole
        import). Re-sending items already imported is safe: they come back
        DEDUPLICATED. An error reply raises; what was committed before it stays.
        `stream_items` (up to 25000, rounded down to whole batches): items per
        stream; a stream's reply acknowledges its items as committed, so smaller
        streams let a progress bar follow what is committed."""
        summary = c.ImportSummary()
        sent = 0
        pending = c.batches(items, batch_size)
        per_stream = c.batches_per_stream(batch_size, stream_items)
        while True:
            first = next(pending, None)
            if first is None:
                return summary
            offset = sent

            def requests(
                first: list[store_pb2.ImportItem] = first,
            ) -> Iterator[store_pb2.ImportMemoriesRequest]:
                nonlocal sent
                for batch in c.chain_first(first, pending, per_stream - 1):
                    yield store_pb2.ImportMemoriesRequest(namespace=namespace, items=batch)
                    sent += len(batch)
                    if on_progress is not None:
                        on_progress(summary.progress(sent))

            try:
                reply = self._store.ImportMemories(
                    requests(),
                    timeout=self.stream_timeout if timeout is None else timeout,
                    metadata=self._metadata,
                )
            except grpc.RpcError as error:
                raise from_rpc_error(error) from None
            results = summary.add(reply, offset)
            if on_results is not None:
                on_results(results)
            if on_progress is not None:
                on_progress(summary.progress(sent))

    # ---- search -----------------------------------------------------------------

    def recall(
        self,
        query: str,
        *,
        namespace: str = "",
        namespaces: Iterable[str] = (),
        limit: int = 0,
        filter: memory_pb2.MemoryFilter | None = None,
        skip_access_tracking: bool = False,
        as_of: c.TimeArg = None,
        timeout: float | None = None,
    ) -> search_pb2.RecallResponse:
        """The memories most relevant to `query`, best first; `namespaces`: several
        searched in one call instead of `namespace` (each result's memory says which;
        the key must cover all); `as_of`: among what was valid at that instant (as
        known then) instead of now."""
        request = c.recall_request(
            query,
            namespace=namespace,
            namespaces=namespaces,
            limit=limit,
            filter=filter,
            skip_access_tracking=skip_access_tracking,
            as_of=as_of,
        )
        return self._call(self._search().Recall, request, timeout)

    def assemble_context(
        self,
        query: str,
        *,
        namespaces: Iterable[str] | str = (),
        session_id: str = "",
        token_budget: int = 0,
        as_of: c.TimeArg = None,
        timeout: float | None = None,
    ) -> search_pb2.AssembleContextResponse:
        """The context block to put in front of a model for `query`, within
        `token_budget` tokens (0: 1000 for a simple query, 3000 for a complex one):
        pinned memories, relevant memories, the session's short-term
        memory (with `session_id`) and the entities involved; `response.context` is
        the text, `response.sections` the memories behind it."""
        request = c.assemble_context_request(
            query,
            namespaces=namespaces,
            session_id=session_id,
            token_budget=token_budget,
            as_of=as_of,
        )
        return self._call(self._search().AssembleContext, request, timeout)

    # ---- pipeline ---------------------------------------------------------------

    def get_status(self, *, timeout: float | None = None) -> pipeline_pb2.GetStatusResponse:
        """Queue depths, provider health and worker state of the pipeline."""
        return self._call(self._pipeline().GetStatus, pipeline_pb2.GetStatusRequest(), timeout)

    def extract(
        self, content: str, *, namespace: str = "", timeout: float | None = None
    ) -> pipeline_pb2.ExtractResponse:
        """A dry run of extraction on `content`: the facts it would derive; writes nothing."""
        request = pipeline_pb2.ExtractRequest(namespace=namespace, content=content)
        return self._call(self._pipeline().Extract, request, timeout)

    def create_document(
        self,
        *,
        namespace: str = "",
        content: str = "",
        url: str = "",
        title: str = "",
        tags: Iterable[str] = (),
        timeout: float | None = None,
    ) -> document_pb2.Document:
        """Registers a document (`content` or `url`) for ingest in the background."""
        request = pipeline_pb2.CreateDocumentRequest(
            namespace=namespace, content=content, url=url, title=title, tags=list(tags)
        )
        return self._call(self._pipeline().CreateDocument, request, timeout).document

    def get_document(
        self, id: str, *, namespace: str = "", timeout: float | None = None
    ) -> document_pb2.Document:
        request = pipeline_pb2.GetDocumentRequest(namespace=namespace, id=id)
        return self._call(self._pipeline().GetDocument, request, timeout).document

    def list_document_chunks(
        self,
        document_id: str,
        *,
        namespace: str = "",
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Iterator[document_pb2.DocumentChunk]:
        """Every chunk of a document in chunk order, a page at a time."""
        token = ""
        while True:
            request = pipeline_pb2.ListDocumentChunksRequest(
                namespace=namespace, document_id=document_id, page_size=page_size, page_token=token
            )
            page = self._call(self._pipeline().ListDocumentChunks, request, timeout)
            yield from page.chunks
            token = page.next_page_token
            if not token:
                return

    def watch_document(
        self, id: str, *, namespace: str = "", timeout: float | None = None
    ) -> Iterator[document_pb2.Document]:
        """The document's state now, then at every change until ingest ends. No
        deadline unless `timeout` is given (ingest of a large document takes time)."""
        request = pipeline_pb2.WatchDocumentRequest(namespace=namespace, id=id)
        try:
            for reply in self._pipeline().WatchDocument(
                request, timeout=timeout, metadata=self._metadata
            ):
                yield reply.document
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    # ---- maintenance ------------------------------------------------------------

    def get_diagnostics(
        self, *, timeout: float | None = None
    ) -> maintenance_pb2.GetDiagnosticsResponse:
        """The suite's health score, storage, queue and provider report."""
        request = maintenance_pb2.GetDiagnosticsRequest()
        return self._call(self._maintenance().GetDiagnostics, request, timeout)

    def run_maintenance(
        self,
        *,
        mode: maintenance_pb2.MaintenanceMode.ValueType = maintenance_pb2.MAINTENANCE_MODE_UNSPECIFIED,
        timeout: float | None = None,
    ) -> maintenance_pb2.RunMaintenanceResponse:
        request = maintenance_pb2.RunMaintenanceRequest(mode=mode)
        return self._call(self._maintenance().RunMaintenance, request, timeout)

    def run_retention(
        self, *, timeout: float | None = None
    ) -> maintenance_pb2.RunRetentionResponse:
        request = maintenance_pb2.RunRetentionRequest()
        return self._call(self._maintenance().RunRetention, request, timeout)
