"""`engram mcp`: Engram's memory as Model Context Protocol tools, for agents.

Each tool is one call (two for `forget`) of the public API through engram.client's
AsyncEngram, with the client commands' address and API key options. Served over
stdio (the default: an MCP host starts it as a subprocess) or streamable HTTP.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from engram.client import (
    FORGET_MODE_EXECUTE,
    AsyncEngram,
    EngramError,
    Memory,
    MemoryPatch,
    memory_filter,
)
from engram.search.v1.search_pb2 import ContextSectionKind
from engram.store.v1.store_pb2 import TagList

INSTRUCTIONS = """\
Engram is a long-term memory. Call `assemble_context` at the start of a turn for the \
memory to keep in mind (within a token budget); use `recall` to look something up, before \
answering anything that may depend on what the user said or decided earlier; use `remember` for durable facts, preferences, \
decisions and rules worth keeping (one self-contained statement per memory, not a chat \
transcript). Correct a memory with `update_memory` instead of remembering a contradiction. \
`explain_memory` tells where a memory came from; `get_entity` what is known now about a \
person, place or project by name. In a conversation, `append_turn` keeps each \
turn as the session's short-term memory and `summarize_session` condenses it. `forget` deletes in two steps: a preview, then a call with the preview's confirm_token. \
Memories live in namespaces (one per user or project); omit `namespace` for the default."""

# How many forget previews the server keeps, so a confirm needs only the token.
MAX_PENDING_FORGETS = 256

Namespace = Annotated[
    str,
    Field(
        description="The namespace (tenant) to use, e.g. one per user or project; "
        "empty for the default namespace."
    ),
]


# Every tool: its method's name on EngramTools and its annotations, in listing order.
TOOLS: list[tuple[str, ToolAnnotations]] = []
ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Awaitable[dict[str, Any]]])


def _dict(message: Message) -> dict[str, Any]:
    return MessageToDict(message, preserving_proto_field_name=True)


def _memory(memory: Memory) -> dict[str, Any]:
    """A memory as a tool returns it: the fields a model needs, not the bookkeeping;
    `version` a number, as update_memory's `if_version` takes it."""
    data = _dict(memory)
    keep = ("id", "content", "type", "importance", "tags", "categories", "pinned", "who", "why")
    shown = {key: data[key] for key in keep if key in data}
    shown["version"] = memory.version
    for key in ("create_time", "update_time", "event_time"):
        if key in data:
            shown[key] = data[key]
    return shown


def _error(error: EngramError) -> ToolError:
    """The client's error as the message a model reads (status, detail, field errors)."""
    return ToolError(str(error))


def tool(annotations: ToolAnnotations) -> Callable[[ToolFunction], ToolFunction]:
    """Marks a method of `EngramTools` as a tool, in the order the server lists them;
    its docstring, indentation removed, is the description (what a model reads, and
    tools/*.json holds)."""

    def mark(function: ToolFunction) -> ToolFunction:
        TOOLS.append((function.__name__, annotations))
        return function

    return mark


class EngramTools:
    """Engram's tools, each a method calling through `engram`; `pending` keeps each
    forget preview's selection by its confirm_token (insertion order: oldest first)."""

    def __init__(self, engram: AsyncEngram) -> None:
        self.engram = engram
        self.pending: dict[str, dict[str, Any]] = {}

    @tool(annotations=ToolAnnotations(title="Remember", idempotent_hint=True))
    async def remember(
        self,
        content: Annotated[
            str,
            Field(
                description="The memory: one self-contained statement, e.g. "
                '"Alice prefers tea over coffee". A leading "[tag1, tag2]: " adds tags.'
            ),
        ],
        namespace: Namespace = "",
        type: Annotated[
            str,
            Field(
                description="fact, preference, decision, rule, event, ... ; empty lets "
                "the server choose."
            ),
        ] = "",
        importance: Annotated[
            float | None,
            Field(ge=0, le=1, description="0..1; omit for the server's default."),
        ] = None,
        tags: Annotated[
            list[str] | None, Field(description='Short labels, e.g. ["ops", "alice"].')
        ] = None,
        pinned: Annotated[
            bool, Field(description="Pinned memories are never decayed or forgotten by bulk.")
        ] = False,
        who: Annotated[str, Field(description="Whom the memory is about.")] = "",
        why: Annotated[str, Field(description="Why it is worth remembering.")] = "",
        categories: Annotated[
            list[str] | None,
            Field(
                description='What the memory is about, e.g. ["health", "travel"]: at most 8, '
                "stored lower-case; recall can filter on them."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Store a memory for later recall. Remembering the same content again returns
        the existing memory (deduplicated: true) instead of a copy."""
        try:
            reply = await self.engram.remember(
                content,
                namespace=namespace,
                type=type,
                importance=importance,
                tags=tags or (),
                pinned=pinned,
                who=who,
                why=why,
                source_type="mcp",
                categories=categories or (),
            )
        except EngramError as error:
            raise _error(error) from None
        return {"memory": _memory(reply.memory), "deduplicated": reply.deduplicated}

    @tool(annotations=ToolAnnotations(title="Recall", read_only_hint=True))
    async def recall(
        self,
        query: Annotated[
            str, Field(description="What to look for, in natural language or keywords.")
        ],
        namespace: Namespace = "",
        namespaces: Annotated[
            list[str] | None,
            Field(
                description="Several namespaces searched at once instead of `namespace` "
                '(e.g. ["user-42", "team"]); each result says which it came from.'
            ),
        ] = None,
        limit: Annotated[
            int, Field(ge=0, le=100, description="At most this many; 0 for the default.")
        ] = 0,
        types: Annotated[list[str] | None, Field(description="Only these memory types.")] = None,
        tags: Annotated[
            list[str] | None, Field(description="Only memories with all of these tags.")
        ] = None,
        categories: Annotated[
            list[str] | None, Field(description="Only memories with all of these categories.")
        ] = None,
    ) -> dict[str, Any]:
        """The stored memories most relevant to a query, best first, with a score each."""
        try:
            reply = await self.engram.recall(
                query,
                namespace=namespace,
                namespaces=namespaces or (),
                limit=limit,
                filter=memory_filter(
                    types=types or (), tags=tags or (), categories=categories or ()
                ),
            )
        except EngramError as error:
            raise _error(error) from None
        return {
            "results": [
                {
                    "score": round(r.score, 4),
                    "namespace": r.memory.namespace,
                    "memory": _memory(r.memory),
                }
                for r in reply.results
            ],
            "warnings": list(reply.warnings),
        }

    @tool(annotations=ToolAnnotations(title="Forget", destructive_hint=True))
    async def forget(
        self,
        namespace: Namespace = "",
        ids: Annotated[
            list[str] | None, Field(description="Forget exactly these memory ids.")
        ] = None,
        query: Annotated[
            str, Field(description="Forget the memories holding these keywords.")
        ] = "",
        types: Annotated[list[str] | None, Field(description="Only these types.")] = None,
        tags: Annotated[
            list[str] | None, Field(description="Only memories with all of these tags.")
        ] = None,
        include_pinned: Annotated[
            bool, Field(description="Also forget pinned memories (otherwise kept).")
        ] = False,
        reason: Annotated[
            str, Field(description="Why they are forgotten (recorded in history).")
        ] = "forgotten through MCP",
        confirm_token: Annotated[
            str,
            Field(
                description="Empty: preview what would be forgotten, nothing is deleted. "
                "The preview's confirm_token: delete exactly the previewed memories "
                "(the selection arguments may then be omitted)."
            ),
        ] = "",
    ) -> dict[str, Any]:
        """Delete memories in two steps. First call with a selection (ids, query,
        types, tags) to preview the candidates; show them to the user; then call again
        with the returned confirm_token to delete them (recoverable soft delete). One
        call forgets at most 200: `more_matching` true says more memories match than
        were previewed or deleted (`matching_count` in all, `still_matching` after a
        delete); preview the same selection again for the next ones."""
        selection: dict[str, Any] = {
            "namespace": namespace,
            "ids": ids or (),
            "query": query,
            "include_pinned": include_pinned,
        }
        if types or tags:
            selection["filter"] = memory_filter(types=types or (), tags=tags or ())
        try:
            if not confirm_token:
                if not (ids or query or types or tags):
                    raise ToolError("give ids, a query, types or tags to select what to forget")
                preview = await self.engram.forget_memories(**selection)
                if preview.confirm_token:
                    self.pending[preview.confirm_token] = selection
                    while len(self.pending) > MAX_PENDING_FORGETS:
                        self.pending.pop(next(iter(self.pending)))
                return {
                    "preview": True,
                    "candidate_count": preview.candidate_count,
                    "candidates": [_dict(c) for c in preview.candidates],
                    "more_matching": preview.more_matching,
                    "matching_count": preview.matching_count,
                    "confirm_token": preview.confirm_token,
                }
            done = await self.engram.forget_memories(
                **self.pending.pop(confirm_token, selection),
                mode=FORGET_MODE_EXECUTE,
                reason=reason,
                confirm_token=confirm_token,
                actor="mcp",
            )
        except EngramError as error:
            raise _error(error) from None
        return {
            "preview": False,
            "deleted_count": done.deleted_count,
            "deleted_ids": [c.id for c in done.candidates],
            # one call forgets at most 200: the rest still match; preview again for them
            "more_matching": done.more_matching,
            "still_matching": done.matching_count - done.deleted_count,
        }

    @tool(annotations=ToolAnnotations(title="Update a memory"))
    async def update_memory(
        self,
        id: Annotated[str, Field(description="The memory's id (from recall or remember).")],
        namespace: Namespace = "",
        content: Annotated[str | None, Field(description="The corrected content.")] = None,
        type: Annotated[str | None, Field(description="A new type.")] = None,
        importance: Annotated[
            float | None, Field(ge=0, le=1, description="A new importance, 0..1.")
        ] = None,
        tags: Annotated[
            list[str] | None,
            Field(description="A new tag list, replacing the old one ([] clears it)."),
        ] = None,
        pinned: Annotated[bool | None, Field(description="Pin or unpin.")] = None,
        reason: Annotated[
            str, Field(description="Why it changes (recorded in history).")
        ] = "updated through MCP",
        if_version: Annotated[
            int | None,
            Field(description="Apply only if the memory is still at this version."),
        ] = None,
    ) -> dict[str, Any]:
        """Correct or re-tag one memory; only the fields given change. Its history
        keeps the old content."""
        patch = MemoryPatch(
            id=id,
            content=content,
            type=type,
            importance=importance,
            pinned=pinned,
            reason=reason,
            if_version=if_version,
        )
        if tags is not None:
            patch.tags.CopyFrom(TagList(values=tags))
        try:
            reply = await self.engram.modify_memories(
                [patch], namespace=namespace, reason=reason, actor="mcp"
            )
            result = _dict(reply.results[0])
            status = result.get("status", "").removeprefix("PATCH_STATUS_")
            result["status"] = status
            if status not in ("UPDATED", "UNCHANGED"):
                raise ToolError(f"not updated: {result}")
            memory = await self.engram.get_memory(id, namespace=namespace)
        except EngramError as error:
            raise _error(error) from None
        return {"result": result, "memory": _memory(memory)}

    @tool(annotations=ToolAnnotations(title="Memory history", read_only_hint=True))
    async def memory_history(
        self,
        id: Annotated[str, Field(description="The memory's id.")],
        namespace: Namespace = "",
    ) -> dict[str, Any]:
        """What happened to a memory, oldest first: each event (CREATED, MODIFIED with
        the old and new content, DELETED, RECOVERED, PURGED) with who did it and why."""
        try:
            events = [
                _dict(event)
                async for event in self.engram.list_memory_history(id, namespace=namespace)
            ]
        except EngramError as error:
            raise _error(error) from None
        for event in events:
            event["event_type"] = event.get("event_type", "").removeprefix("HISTORY_EVENT_TYPE_")
        return {"events": events}

    @tool(annotations=ToolAnnotations(title="Assemble context", read_only_hint=True))
    async def assemble_context(
        self,
        query: Annotated[
            str, Field(description="The current question or turn, in natural language.")
        ],
        namespaces: Annotated[
            list[str] | None,
            Field(
                description='Namespaces to draw from, e.g. ["user-42", "team"]; omit for '
                "the default namespace."
            ),
        ] = None,
        session_id: Annotated[
            str, Field(description="The conversation session, for its short-term memory.")
        ] = "",
        token_budget: Annotated[
            int,
            Field(
                ge=0,
                description="Most tokens the context may take; 0: 1000 for a simple "
                "question, 3000 for a complex one.",
            ),
        ] = 0,
    ) -> dict[str, Any]:
        """The memory context to put in front of the model for this turn, within a token
        budget: pinned memories, the most relevant memories, this session's
        short-term memory and the entities involved, as one block (`context`) with the
        memories behind each section."""
        try:
            reply = await self.engram.assemble_context(
                query,
                namespaces=namespaces or (),
                session_id=session_id,
                token_budget=token_budget,
            )
        except EngramError as error:
            raise _error(error) from None
        return {
            "context": reply.context,
            "token_count": reply.token_count,
            "token_budget": reply.token_budget,
            "sections": [
                {
                    "kind": ContextSectionKind.Name(section.kind).removeprefix(
                        "CONTEXT_SECTION_KIND_"
                    ),
                    "memories": [_memory(m) for m in section.memories],
                    "entities": [_dict(e) for e in section.entities],
                }
                for section in reply.sections
            ],
            "warnings": list(reply.warnings),
        }

    @tool(annotations=ToolAnnotations(title="Explain a memory", read_only_hint=True))
    async def explain_memory(
        self,
        id: Annotated[str, Field(description="The memory's id.")],
        namespace: Namespace = "",
    ) -> dict[str, Any]:
        """Where a memory comes from and what became of it: the versions it superseded
        and that superseded it, the memories it was derived from and those derived from
        it, and its audit trail."""
        try:
            reply = await self.engram.explain_memory(id, namespace=namespace)
        except EngramError as error:
            raise _error(error) from None
        return _dict(reply)

    @tool(annotations=ToolAnnotations(title="Look up an entity", read_only_hint=True))
    async def get_entity(
        self,
        name: Annotated[
            str,
            Field(description="The entity's name or one of its aliases, e.g. a person's name."),
        ],
        namespace: Namespace = "",
        max_facts: Annotated[
            int, Field(description="At most this many facts (1 to 100; 0 means 20).", ge=0, le=100)
        ] = 0,
    ) -> dict[str, Any]:
        """What memory knows about a person, place, organization, project or thing:
        its type and other names, the facts about it that are true now (newest first)
        and the entities it is related to, with the relation and its strength."""
        try:
            reply = await self.engram.get_entity(
                name=name, namespace=namespace, max_facts=max_facts
            )
        except EngramError as error:
            raise _error(error) from None
        return {
            "entity": _dict(reply.entity),
            "facts": [_memory(m) for m in reply.facts],
            "facts_truncated": reply.facts_truncated,
            "neighbors": [_dict(n) for n in reply.neighbors],
        }

    @tool(annotations=ToolAnnotations(title="Weak memories", read_only_hint=True))
    async def weak_memories(self, namespace: Namespace = "") -> dict[str, Any]:
        """Memories that are fading because nobody used them (seed 003): their
        confidence, decayed since their last access, is below the threshold, so they
        may need confirming (pin them) or may be wrong. Each with its current
        confidence, oldest written first."""
        try:
            found = [
                {
                    "memory": _memory(weak.memory),
                    "current_confidence": weak.current_confidence,
                }
                async for weak in self.engram.list_weak_memories(namespace=namespace)
            ]
        except EngramError as error:
            raise _error(error) from None
        return {"weak_memories": found}

    @tool(annotations=ToolAnnotations(title="Capture a turn"))
    async def append_turn(
        self,
        session_id: Annotated[
            str, Field(description="The conversation session (e.g. a thread id).")
        ],
        role: Annotated[
            Literal["user", "assistant", "system", "tool"], Field(description="Who spoke.")
        ],
        content: Annotated[str, Field(description="What was said, as said.")],
        namespace: Namespace = "",
        who: Annotated[str, Field(description="The speaker's name, if known.")] = "",
    ) -> dict[str, Any]:
        """Capture one conversation turn as the session's short-term memory (kept 12
        hours). A user turn that asks to be remembered ("remember that ...") is kept
        long-term instead (`promoted`); `notice` says when privacy stopped it."""
        try:
            reply = await self.engram.append_turn(
                session_id, role, content, namespace=namespace, who=who
            )
        except EngramError as error:
            raise _error(error) from None
        return {
            "captured": reply.captured,
            "promoted": reply.promoted,
            "notice": reply.notice,
            "memory": _memory(reply.memory) if reply.HasField("memory") else None,
        }

    @tool(annotations=ToolAnnotations(title="Summarize the session"))
    async def summarize_session(
        self,
        session_id: Annotated[str, Field(description="The conversation session.")],
        namespace: Namespace = "",
    ) -> dict[str, Any]:
        """Ask for the session's summary: the pipeline's LLM condenses its short-term
        memory into one summary (kept 24 hours), which assemble_context then shows
        before the turns it does not cover. Returns at once with the queued job."""
        try:
            reply = await self.engram.summarize_session(session_id, namespace=namespace)
        except EngramError as error:
            raise _error(error) from None
        return {  # numbers as numbers (proto JSON writes int64 as a string)
            "job_id": reply.job_id,
            "already_queued": reply.already_queued,
            "turn_count": reply.turn_count,
        }


def build_server(engram: AsyncEngram) -> MCPServer:
    """The MCP server with Engram's tools, each calling through `engram`."""
    server: MCPServer = MCPServer(
        name="engram", title="Engram memory", instructions=INSTRUCTIONS, version="0.1.0"
    )
    tools = EngramTools(engram)
    for name, hints in TOOLS:
        method = getattr(tools, name)
        description = inspect.cleandoc(method.__doc__ or "")
        server.tool(description=description, annotations=hints)(method)
    return server


def tool_summaries() -> list[tuple[str, str]]:
    """Every tool's name and the first sentence of its description, as the server lists
    them (for `engram mcp --help`; no call is made)."""
    import anyio

    async def listed() -> list[tuple[str, str]]:
        async with AsyncEngram("127.0.0.1:9") as engram:
            tools = await build_server(engram).list_tools()
        return [(t.name, " ".join((t.description or "").split())) for t in tools]

    return anyio.run(listed)


async def serve(engram: AsyncEngram, *, http_port: int | None, host: str) -> None:
    """Serves the tools over stdio, or over streamable HTTP at http://HOST:PORT/mcp."""
    async with engram:
        server = build_server(engram)
        if http_port is None:
            await server.run_stdio_async()
        else:
            await server.run_streamable_http_async(host=host, port=http_port)
