"""`engram mcp` as an MCP host uses it: started by the official SDK's stdio client
(and reached over streamable HTTP with --http), against a real `engram up` suite."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from test_client_auth import _auth_store, _create_key

from e2e_helpers import (
    REPO_ROOT,
    Launcher,
    RunningSuite,
    clean_env,
    engram_command,
    free_port,
    start_suite,
)
from services.common.clock import days_ago_text
from services.storage.db import open_read_write

TOOLS = {
    "remember",
    "recall",
    "forget",
    "update_memory",
    "memory_history",
    "assemble_context",
    "explain_memory",
    "get_entity",
    "weak_memories",
    "append_turn",
    "summarize_session",
}
# The tools' definitions in the repo (scripts/gen_tools.py writes them from the server)
TOOL_FILES = {p.stem: json.loads(p.read_text()) for p in (REPO_ROOT / "tools").glob("*.json")}


@pytest.fixture(scope="module")
def suite(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> RunningSuite:
    return start_suite(module_launcher, tmp_path_factory.mktemp("mcp-suite"))


def _env() -> dict[str, str]:
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    return clean_env({"PYTHONPATH": path})


def _address_args(suite: RunningSuite) -> list[str]:
    return [
        "--address",
        suite.address("store"),
        "--search-address",
        suite.address("search"),
        "--maintenance-address",
        suite.address("maintenance"),
    ]


@asynccontextmanager
async def stdio_session(
    suite: RunningSuite | None, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """`engram mcp ARGS` started by the SDK's stdio client, initialized."""
    command = engram_command("mcp", *(_address_args(suite) if suite else []), *args)
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={**_env(), **(env or {})}, cwd=str(REPO_ROOT)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; fails the test on a tool error. The text content
    holds the same JSON, for hosts that show only text to the model."""
    definition = TOOL_FILES[tool]
    jsonschema.validate(arguments, definition["inputSchema"])  # the file describes the call
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    assert json.loads(_text(result)) == result.structured_content
    if "outputSchema" in definition:
        jsonschema.validate(result.structured_content, definition["outputSchema"])
    return result.structured_content


def _text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def run(test: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(120):
            await test()

    anyio.run(bounded)


def test_tools_are_listed_with_schemas_and_descriptions(suite: RunningSuite) -> None:
    async def test() -> None:
        async with stdio_session(suite) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == TOOLS
            for tool in tools.values():
                schema = tool.input_schema
                assert schema["type"] == "object" and schema["properties"], tool.name
                assert tool.description and len(tool.description) > 40, tool.name
                for name, prop in schema["properties"].items():
                    assert prop.get("description"), f"{tool.name}.{name} has no description"
            assert tools["remember"].input_schema["required"] == ["content"]
            assert tools["recall"].input_schema["required"] == ["query"]
            assert tools["forget"].annotations is not None
            assert tools["forget"].annotations.destructive_hint is True
            assert tools["recall"].annotations is not None
            assert tools["recall"].annotations.read_only_hint is True

    run(test)


def test_the_tool_files_are_what_the_server_serves_and_valid_json_schema() -> None:
    """tools/*.json come from one source (the MCP server's tools): regenerating them
    changes nothing, and each schema is valid JSON Schema (2020-12)."""
    done = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "python"), "scripts/gen_tools.py", "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert set(TOOL_FILES) == TOOLS
    for name, definition in TOOL_FILES.items():
        assert definition["name"] == name
        for key in ("inputSchema", "outputSchema"):
            if key in definition:
                jsonschema.Draft202012Validator.check_schema(definition[key])
        assert definition["inputSchema"]["type"] == "object", name


def test_assemble_context_explain_and_recall_across_namespaces(suite: RunningSuite) -> None:
    async def test() -> None:
        async with stdio_session(suite) as session:
            rule = await call(
                session,
                "remember",
                content="Always answer Bob in Spanish",
                namespace="mcp-ctx-bob",
                type="rule",
                pinned=True,
            )
            team = await call(
                session,
                "remember",
                content="The team ships the mobile release on Thursdays",
                namespace="mcp-ctx-team",
            )
            both = await call(
                session,
                "recall",
                query="mobile release Spanish",
                namespaces=["mcp-ctx-bob", "mcp-ctx-team"],
            )
            assert {h["namespace"] for h in both["results"]} == {"mcp-ctx-bob", "mcp-ctx-team"}
            context = await call(
                session,
                "assemble_context",
                query="When does the mobile release ship?",
                namespaces=["mcp-ctx-bob", "mcp-ctx-team"],
                token_budget=300,
            )
            assert 0 < context["token_count"] <= context["token_budget"] == 300
            assert [s["kind"] for s in context["sections"]] == ["PINNED", "FACTS"]
            assert context["sections"][0]["memories"][0]["id"] == rule["memory"]["id"]
            assert "Always answer Bob in Spanish" in context["context"]
            assert "ships the mobile release on Thursdays" in context["context"]
            explained = await call(
                session, "explain_memory", id=team["memory"]["id"], namespace="mcp-ctx-team"
            )
            assert explained["memory"]["id"] == team["memory"]["id"]
            turn = await call(
                session,
                "append_turn",
                session_id="mcp-chat-1",
                role="user",
                content="I am on call for the mobile release this week",
                namespace="mcp-ctx-team",
                who="bob",
            )
            assert turn["captured"] and not turn["promoted"]
            kept = await call(
                session,
                "append_turn",
                session_id="mcp-chat-1",
                role="user",
                content="Remember that Bob's pager number is 555-0100",
                namespace="mcp-ctx-team",
            )
            assert kept["promoted"] is True
            # no LLM in this suite: the agent is told why no summary would be written
            no_llm = await session.call_tool(
                "summarize_session", {"session_id": "mcp-chat-1", "namespace": "mcp-ctx-team"}
            )
            assert no_llm.is_error and "reason=LLM_NOT_CONFIGURED" in _text(no_llm)
            assert "point providers.llm at a model" in _text(no_llm)
            with_session = await call(
                session,
                "assemble_context",
                query="mobile release",
                namespaces=["mcp-ctx-team"],
                session_id="mcp-chat-1",
            )
            session_section = [s for s in with_session["sections"] if s["kind"] == "SESSION"]
            assert session_section[0]["memories"][0]["id"] == turn["memory"]["id"]
            refused = await session.call_tool(
                "assemble_context", {"query": "x", "namespaces": ["a", "a"]}
            )
            assert refused.is_error and "INVALID_ARGUMENT" in _text(refused), _text(refused)

    run(test)


def test_weak_memories_lists_what_faded(suite: RunningSuite) -> None:
    """Seed 003's weak_facts: a memory written 200 days ago and never used is listed
    with its decayed confidence (the age is written to the file: a test cannot wait)."""

    async def test() -> None:
        async with stdio_session(suite) as session:
            old = await call(session, "remember", content="Old desk: 4B", namespace="mcp-weak")
            await call(session, "remember", content="New desk: 7C", namespace="mcp-weak")
            conn = open_read_write(suite.root / "data" / "engram.db")
            try:
                conn.execute(
                    "UPDATE memories SET created_at = ? WHERE id = ?",
                    (days_ago_text(200), old["memory"]["id"]),
                )
            finally:
                conn.close()
            found = await call(session, "weak_memories", namespace="mcp-weak")
            [weak] = found["weak_memories"]
            assert weak["memory"]["id"] == old["memory"]["id"]
            assert weak["current_confidence"] < 0.05

    anyio.run(test)


def test_remember_recall_update_history_forget(suite: RunningSuite) -> None:
    ns = "mcp-flow"

    async def test() -> None:
        async with stdio_session(suite) as session:
            made = await call(
                session,
                "remember",
                content="Alice prefers green tea in the morning",
                namespace=ns,
                type="preference",
                tags=["alice"],
            )
            memory = made["memory"]
            assert made["deduplicated"] is False and memory["tags"] == ["alice"]
            again = await call(
                session, "remember", content="Alice prefers green tea in the morning", namespace=ns
            )
            assert again["deduplicated"] is True and again["memory"]["id"] == memory["id"]

            hits = (await call(session, "recall", query="green tea", namespace=ns))["results"]
            assert [h["memory"]["id"] for h in hits] == [memory["id"]]
            assert hits[0]["memory"]["content"] == "Alice prefers green tea in the morning"
            other = await call(session, "recall", query="green tea", namespace="mcp-elsewhere")
            assert other["results"] == []

            updated = await call(
                session,
                "update_memory",
                id=memory["id"],
                namespace=ns,
                content="Alice prefers black tea in the morning",
                reason="she changed her mind",
                if_version=memory["version"],
            )
            assert updated["result"]["status"] == "UPDATED"
            assert updated["memory"]["content"] == "Alice prefers black tea in the morning"
            assert updated["memory"]["version"] == memory["version"] + 1
            stale = await session.call_tool(
                "update_memory",
                {"id": memory["id"], "namespace": ns, "pinned": True, "if_version": 1},
            )
            assert stale.is_error and "VERSION_CONFLICT" in _text(stale), _text(stale)

            events = (await call(session, "memory_history", id=memory["id"], namespace=ns))[
                "events"
            ]
            assert [e["event_type"] for e in events] == ["CREATED", "MODIFIED"]
            assert events[1]["old_content"] == "Alice prefers green tea in the morning"
            assert events[1]["reason"] == "she changed her mind"

            preview = await call(session, "forget", namespace=ns, query="black tea")
            assert preview["preview"] is True and preview["candidate_count"] == 1
            assert preview["candidates"][0]["id"] == memory["id"] and preview["confirm_token"]
            still = (await call(session, "recall", query="black tea", namespace=ns))["results"]
            assert len(still) == 1, "a preview deletes nothing"

            done = await call(
                session,
                "forget",
                confirm_token=preview["confirm_token"],
                reason="the user asked",
            )
            assert done == {
                "preview": False,
                "deleted_count": 1,
                "deleted_ids": [memory["id"]],
                "more_matching": False,
                "still_matching": 0,
            }
            gone = (await call(session, "recall", query="black tea", namespace=ns))["results"]
            assert gone == []
            events = (await call(session, "memory_history", id=memory["id"], namespace=ns))[
                "events"
            ]
            assert events[-1]["event_type"] == "DELETED"
            assert events[-1]["reason"] == "the user asked" and events[-1]["actor"] == "mcp"

    run(test)


def test_remember_takes_categories_and_recall_filters_on_them(suite: RunningSuite) -> None:
    ns = "mcp-categories"

    async def test() -> None:
        async with stdio_session(suite) as session:
            made = await call(
                session,
                "remember",
                content="Bob is allergic to peanuts",
                namespace=ns,
                categories=[" Health ", "diet", "health"],
            )
            memory = made["memory"]
            assert memory["categories"] == ["health", "diet"]
            await call(
                session, "remember", content="Bob drives a peanut-coloured van", namespace=ns
            )

            def ids(reply: dict[str, Any]) -> list[str]:
                return [hit["memory"]["id"] for hit in reply["results"]]

            both = await call(session, "recall", query="Bob peanut", namespace=ns)
            assert memory["id"] in ids(both) and len(ids(both)) == 2
            health = await call(
                session, "recall", query="Bob peanut", namespace=ns, categories=["HEALTH"]
            )
            assert ids(health) == [memory["id"]]
            assert health["results"][0]["memory"]["categories"] == ["health", "diet"]
            none = await call(
                session, "recall", query="Bob peanut", namespace=ns, categories=["health", "work"]
            )
            assert ids(none) == []
            bad = await session.call_tool(
                "remember",
                {"content": "x", "namespace": ns, "categories": [f"c{n}" for n in range(9)]},
            )
            assert bad.is_error and "categories" in _text(bad), _text(bad)

    run(test)


def test_errors_reach_the_model_as_tool_errors(suite: RunningSuite) -> None:
    async def test() -> None:
        async with stdio_session(suite) as session:
            missing = await session.call_tool("memory_history", {"id": "no-such-id"})
            assert missing.is_error and "NOT_FOUND" in _text(missing)
            bad = await session.call_tool("remember", {"content": "x", "importance": 3})
            assert bad.is_error and "importance" in _text(bad)
            empty = await session.call_tool("forget", {"namespace": "mcp-errors"})
            assert empty.is_error and "select" in _text(empty)
            wrong = await session.call_tool(
                "forget", {"query": "anything", "confirm_token": "forged", "namespace": "mcp-e"}
            )
            assert wrong.is_error, _text(wrong)
            update = await session.call_tool("update_memory", {"id": "no-such-id", "pinned": True})
            assert update.is_error and "NOT_FOUND" in _text(update)

    run(test)


def test_streamable_http(suite: RunningSuite, launcher: Launcher) -> None:
    port = free_port()
    launcher.spawn(
        [*engram_command("mcp", "--http", str(port), *_address_args(suite))],
        env={"PYTHONPATH": _env()["PYTHONPATH"]},
    )

    async def test() -> None:
        url = f"http://127.0.0.1:{port}/mcp"
        while True:  # until uvicorn listens (the launcher's log says why if it never does)
            try:
                await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                break
            except OSError:
                await anyio.sleep(0.1)
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert tools == TOOLS
            made = await call(session, "remember", content="Deploys are on Tuesdays", namespace="h")
            hits = (await call(session, "recall", query="deploys", namespace="h"))["results"]
            assert hits[0]["memory"]["id"] == made["memory"]["id"]

    run(test)


def test_api_key_from_the_environment_or_the_flag(launcher: Launcher, tmp_path: Path) -> None:
    """Against an auth-on store: without a key a tool call is UNAUTHENTICATED; with
    ENGRAM_API_KEY or --api-key it works (the client CLI's rules)."""
    handle, data_dir = _auth_store(launcher, tmp_path)
    writer = _create_key(data_dir, "writer", "team-a")
    address = ["--address", handle.address]
    remember = {"content": "Team A ships on Fridays", "namespace": "team-a"}

    async def test() -> None:
        async with stdio_session(None, *address) as session:
            refused = await session.call_tool("remember", remember)
            assert refused.is_error and "UNAUTHENTICATED" in _text(refused)
        async with stdio_session(None, *address, env={"ENGRAM_API_KEY": writer}) as session:
            made = await call(session, "remember", **remember)
            assert made["deduplicated"] is False
        async with stdio_session(None, *address, "--api-key", writer) as session:
            again = await call(session, "remember", **remember)
            assert again["deduplicated"] is True
            other = await session.call_tool("remember", {"content": "x", "namespace": "team-b"})
            assert other.is_error and "PERMISSION_DENIED" in _text(other)

    run(test)


def test_help_names_the_tools() -> None:
    out = subprocess.run(
        engram_command("mcp", "--help"),
        cwd=REPO_ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--http" in out and "memory_history" in out


def test_http_beyond_loopback_needs_allow_remote() -> None:
    """The endpoint has no auth of its own: binding it beyond loopback is refused
    (before anything listens) unless --allow-remote accepts the risk."""
    refused = subprocess.run(
        engram_command("mcp", "--http", str(free_port()), "--host", "0.0.0.0"),
        cwd=REPO_ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert "refusing to serve MCP on 0.0.0.0" in refused.stderr
    assert "--allow-remote" in refused.stderr
