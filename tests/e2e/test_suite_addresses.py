"""Clients talk to their store's suite (issue 34 item 5): two `engram up` suites on
one host, each on its own ports. A client (Python, CLI, MCP) given only a store's
address reaches that suite's search, at the port the store reports; a service of
another suite gets nothing from it, the API key included (a real gRPC server on
loopback records what reaches it)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from e2e_helpers import (
    REPO_ROOT,
    Launcher,
    RunningSuite,
    clean_env,
    engram_command,
    free_port,
    start_suite,
)
from engram.client import AsyncEngram, Engram, WrongSuite

NS = "suites"
KEY = "engram_not-for-another-suite"


@pytest.fixture(scope="module")
def suites(
    module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RunningSuite, RunningSuite]:
    one = start_suite(module_launcher, tmp_path_factory.mktemp("suite-one"))
    two = start_suite(module_launcher, tmp_path_factory.mktemp("suite-two"))
    for suite, fact in (
        (one, "the lighthouse keeper of suite one"),
        (two, "the lighthouse keeper of suite two"),
    ):
        with Engram(suite.address("store")) as engram:
            engram.remember(fact, namespace=NS)
    return one, two


class Recorder(grpc.ServerInterceptor):
    """Every call that reaches the server: (method, metadata)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        with self.lock:
            self.calls.append((details.method, dict(details.invocation_metadata)))
        return continuation(details)


@pytest.fixture
def stranger() -> Iterator[tuple[str, Recorder]]:
    """A gRPC server with a plain health service (it knows no suite) that records
    every call: a service of nobody's suite on the host."""
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[recorder])
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield f"127.0.0.1:{port}", recorder
    finally:
        server.stop(0)


def _contents(reply: Any) -> list[str]:
    return [hit.memory.content for hit in reply.results]


def test_a_client_given_a_store_address_reaches_that_suites_services(
    suites: tuple[RunningSuite, RunningSuite],
) -> None:
    one, two = suites
    for suite, own in ((one, "suite one"), (two, "suite two")):
        with Engram(suite.address("store"), api_key=KEY) as engram:
            found = _contents(engram.recall("lighthouse keeper", namespace=NS))
            assert found == [f"the lighthouse keeper of {own}"]
            assert engram.addresses["search"] == suite.address("search")
            assert engram.get_diagnostics().score >= 0
            assert engram.addresses["maintenance"] == suite.address("maintenance")
            engram.get_status()
            assert engram.addresses["pipeline"] == suite.address("pipeline")

    async def async_recall() -> list[str]:
        async with AsyncEngram(two.address("store")) as engram:
            return _contents(await engram.recall("lighthouse keeper", namespace=NS))

    assert asyncio.run(async_recall()) == ["the lighthouse keeper of suite two"]


def test_a_service_of_another_suite_gets_nothing(
    suites: tuple[RunningSuite, RunningSuite], stranger: tuple[str, Recorder]
) -> None:
    one, two = suites
    with Engram(two.address("store"), api_key=KEY, search_address=one.address("search")) as engram:
        with pytest.raises(WrongSuite) as raised:
            engram.recall("lighthouse keeper", namespace=NS)
        suite_id = engram.suite_id()
    error = raised.value
    assert (error.service, error.address, error.suite_id) == (
        "search",
        one.address("search"),
        suite_id,
    )
    assert error.reason == "WRONG_SUITE" and error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert one.address("search") in str(error) and two.address("store") in str(error)
    assert suite_id in str(error)

    address, recorder = stranger
    with Engram(two.address("store"), api_key=KEY, search_address=address) as engram:
        for _ in range(2):  # refused every time; still nothing but health checks
            with pytest.raises(WrongSuite):
                engram.recall("lighthouse keeper", namespace=NS)

    async def async_recall() -> None:
        async with AsyncEngram(two.address("store"), api_key=KEY, search_address=address) as aio:
            await aio.recall("lighthouse keeper", namespace=NS)

    with pytest.raises(WrongSuite):
        asyncio.run(async_recall())
    assert recorder.calls
    for method, metadata in recorder.calls:
        assert method == "/grpc.health.v1.Health/Check"
        assert "authorization" not in metadata and KEY not in json.dumps(metadata)


def _env() -> dict[str, str]:
    path = os.pathsep.join(
        [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    )
    return clean_env({"PYTHONPATH": path})


def test_the_cli_follows_its_address(suites: tuple[RunningSuite, RunningSuite]) -> None:
    one, two = suites

    def recall(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            engram_command("recall", "lighthouse keeper", "-n", NS, "--json", *args),
            cwd=REPO_ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    found = recall("--address", two.address("store"))
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["results"]
    assert [hit["memory"]["content"] for hit in hits] == ["the lighthouse keeper of suite two"]
    wrong = recall("--address", two.address("store"), "--search-address", one.address("search"))
    assert wrong.returncode == 1 and not wrong.stdout
    assert "WRONG_SUITE" in wrong.stderr and one.address("search") in wrong.stderr


def test_the_mcp_server_follows_its_address(suites: tuple[RunningSuite, RunningSuite]) -> None:
    one, two = suites

    async def recall(*args: str) -> Any:
        command = engram_command("mcp", *args)
        params = StdioServerParameters(
            command=command[0], args=command[1:], env=_env(), cwd=str(REPO_ROOT)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool(
                "recall", {"query": "lighthouse keeper", "namespace": NS}
            )

    async def both() -> tuple[Any, Any]:
        found = await recall("--address", two.address("store"))
        wrong = await recall(
            "--address", two.address("store"), "--search-address", one.address("search")
        )
        return found, wrong

    found, wrong = asyncio.run(asyncio.wait_for(both(), 120))
    assert not found.is_error
    contents = [r["memory"]["content"] for r in found.structured_content["results"]]
    assert contents == ["the lighthouse keeper of suite two"]
    assert wrong.is_error
    text = " ".join(c.text for c in wrong.content)
    assert "WRONG_SUITE" in text and one.address("search") in text
