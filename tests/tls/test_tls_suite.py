"""The whole suite with TLS, started as processes by `engram up`: the docs' TLS
example (docs/security.md) as written (certificates from `engram certs dev`, its configuration file,
grpcurl -cacert, engram health --cacert), and the same suite under mTLS, where the
services present their certificate to each other. In both, Remember -> the pipeline
embeds it (pipeline -> store over TLS) -> Recall finds it by meaning (search -> store
over TLS), with a scripted Ollama embedding server on a loopback port.

The docs' block is read, not copied; the rewrites (and no others): `.venv/bin/engram`
-> this checkout's CLI, `grpcurl` -> this virtualenv's binary, `certs/` and
`engram-tls.yaml` -> this test's directory, `localhost:50051`/`127.0.0.1:50051` -> the
store's port here. The configuration is the docs' YAML block plus free ports and
the scripted embedder.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from e2e.e2e_helpers import (
    REPO_ROOT,
    Launcher,
    ProcessHandle,
    clean_env,
    engram_command,
    find_grpcurl,
    free_port,
)
from engram.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc
from http_fakes import ScriptedHttpServer, VectorBook, ollama_server, unit_axis
from tls_helpers import check_health, client_credentials, credentials, make_certs, wait_serving

SECURITY_DOCS = REPO_ROOT / "docs" / "security.md"  # the "TLS" section
GRPCURL = find_grpcurl()
SERVICES = ("store", "search", "pipeline", "maintenance")
MEMORY = "Alice adopted a golden retriever puppy last spring"
QUERY = "Which animal does she own?"  # no word in common with MEMORY
EMBED_TIMEOUT_S = 90.0
# MEMORY and QUERY embed to the same vector, everything else elsewhere: only a
# vector match (the pipeline embedded MEMORY) finds it.
VECTORS = VectorBook({MEMORY: unit_axis(8, 0), QUERY: unit_axis(8, 0)})


def tls_section() -> str:
    text = SECURITY_DOCS.read_text(encoding="utf-8")
    start = text.index("\n## TLS\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def readme_commands() -> list[str]:
    [block] = re.findall(r"^```sh\n(.*?)^```", tls_section(), flags=re.DOTALL | re.MULTILINE)
    return [line for line in block.splitlines() if line.strip()]


def readme_config() -> dict[str, Any]:
    [block] = re.findall(r"^```yaml\n(.*?)^```", tls_section(), flags=re.DOTALL | re.MULTILINE)
    tree: dict[str, Any] = yaml.safe_load(block)
    return tree


@dataclass
class Suite:
    root: Path
    ports: dict[str, int]
    up: ProcessHandle
    ca: grpc.ChannelCredentials

    def address(self, service: str) -> str:
        return f"127.0.0.1:{self.ports[service]}"


def rewrite(command: str, root: Path, store_port: int) -> str:
    assert GRPCURL is not None
    command = re.sub(r"\b(?:localhost|127\.0\.0\.1):50051\b", f"127.0.0.1:{store_port}", command)
    command = command.replace("certs/", f"{root}/certs/").replace(
        "--out certs", f"--out {root}/certs"
    )
    command = command.replace("engram-tls.yaml", str(root / "engram-tls.yaml"))
    command = re.sub(r"^\.venv/bin/grpcurl\b", GRPCURL, command)
    return command


def argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    if words[0] == ".venv/bin/engram":
        return engram_command(*words[1:])
    return words


def start_suite(
    launcher: Launcher, root: Path, tree: dict[str, Any], embedder: ScriptedHttpServer
) -> tuple[dict[str, int], ProcessHandle]:
    """`engram up` with `tree` plus free ports and the scripted embedder."""
    ports = {name: free_port() for name in (*SERVICES, "store_internal")}
    tree = {
        **tree,
        "server": {**tree["server"], "ports": ports},
        "memory": {"pipelineV2": {"enabled": False}},
        "providers": {
            "embedding": {"kind": "ollama", "base_url": embedder.url, "model": "fake-embed"}
        },
        "workers": {"embed": {"poll_ms": 100}},
    }
    config = root / "engram-tls.yaml"
    config.write_text(yaml.safe_dump(tree), encoding="utf-8")
    up = launcher.spawn(
        engram_command("up", "--config", str(config), "--data-dir", str(root / "data")),
        port=ports["store"],
    )
    return ports, up


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path_factory.mktemp("logs"))
    try:
        yield launcher
    finally:
        launcher.kill_all()


@pytest.fixture(scope="module")
def embedder() -> Iterator[ScriptedHttpServer]:
    server = ollama_server(VECTORS).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def readme_suite(
    module_launcher: Launcher,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: ScriptedHttpServer,
) -> Iterator[Suite]:
    """The docs' commands up to `engram up`, as written; the suite then SERVING over TLS."""
    if GRPCURL is None:
        pytest.skip("grpcurl binary not installed")
    root = tmp_path_factory.mktemp("readme-tls")
    commands = readme_commands()
    assert commands[0].startswith(".venv/bin/engram certs dev --out certs"), commands
    assert commands[1].startswith(".venv/bin/engram up --config engram-tls.yaml"), commands
    made = subprocess.run(
        argv(rewrite(commands[0], root, 0)),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    tree = yaml.safe_load(rewrite(yaml.safe_dump(readme_config()), root, 0))
    ports, up = start_suite(module_launcher, root, tree, embedder)
    ca = credentials(root / "certs" / "ca.pem")
    suite = Suite(root, ports, up, ca)
    try:
        for name in SERVICES:
            wait_serving(up, ca, suite.address(name))
        yield suite
    finally:
        up.kill()


@pytest.fixture(scope="module")
def mtls_suite(
    module_launcher: Launcher,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: ScriptedHttpServer,
) -> Iterator[Suite]:
    """The docs' configuration with its mTLS line turned on: every listener requires a
    certificate, and the services present theirs to each other."""
    root = tmp_path_factory.mktemp("mtls-suite")
    certs = make_certs(root / "certs")
    text = yaml.safe_dump(readme_config())
    tree = yaml.safe_load(rewrite(text, root, 0))
    tree["server"]["tls"]["client_ca_file"] = str(certs / "ca.pem")
    ports, up = start_suite(module_launcher, root, tree, embedder)
    suite = Suite(root, ports, up, client_credentials(certs))
    try:
        for name in SERVICES:
            wait_serving(up, suite.ca, suite.address(name))
        yield suite
    finally:
        up.kill()


def remember_embed_recall(suite: Suite, namespace: str) -> None:
    """Remember on the store; the pipeline embeds it; search recalls it by meaning only."""
    with grpc.secure_channel(suite.address("store"), suite.ca) as channel:
        memory = (
            store_pb2_grpc.MemoryStoreServiceStub(channel)
            .Remember(store_pb2.RememberRequest(namespace=namespace, content=MEMORY), timeout=10)
            .memory
        )
    with (
        grpc.secure_channel(suite.address("pipeline"), suite.ca) as pipeline_channel,
        grpc.secure_channel(suite.address("search"), suite.ca) as search_channel,
    ):
        pipeline = pipeline_pb2_grpc.PipelineServiceStub(pipeline_channel)
        search = search_pb2_grpc.SearchServiceStub(search_channel)
        deadline = time.monotonic() + EMBED_TIMEOUT_S
        while True:
            assert suite.up.process.poll() is None, suite.up.log()[-4000:]
            status = pipeline.GetStatus(pipeline_pb2.GetStatusRequest(), timeout=10)
            recalled = search.Recall(
                search_pb2.RecallRequest(namespace=namespace, query=QUERY), timeout=10
            )
            if status.indexed_memory_count >= 1 and recalled.results:
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"not embedded and recalled within {EMBED_TIMEOUT_S}s "
                    f"(indexed {status.indexed_memory_count}):\n{suite.up.log()[-4000:]}"
                )
            time.sleep(0.2)
    assert status.store_available
    best = recalled.results[0]
    assert best.memory.id == memory.id
    assert best.keyword.rank == 0, "no keyword in common: found by its vector"
    assert best.vector.rank == 1


def test_the_readme_tls_commands_run_against_the_suite(readme_suite: Suite) -> None:
    for original in readme_commands()[2:]:
        command = rewrite(original, readme_suite.root, readme_suite.ports["store"])
        result = subprocess.run(
            argv(command),
            cwd=REPO_ROOT,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{original}\nran as {command}\n{result.stderr}"
        if " list" in original:
            assert "engram.store.v1.MemoryStoreService" in result.stdout.split()
        if "/Remember" in original:
            assert '"content": "TLS is on"' in result.stdout
        if "engram health" in original:
            assert result.stdout.strip().endswith(": SERVING")


def test_remember_embed_recall_through_the_tls_suite(readme_suite: Suite) -> None:
    remember_embed_recall(readme_suite, "tls-suite")


def test_every_listener_of_the_tls_suite_refuses_plaintext(readme_suite: Suite) -> None:
    for name in SERVICES:
        with pytest.raises(grpc.RpcError) as refused:
            check_health(readme_suite.address(name), None, timeout=3)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, name


def test_remember_embed_recall_through_the_mtls_suite(mtls_suite: Suite) -> None:
    remember_embed_recall(mtls_suite, "mtls-suite")
    # a client with the CA but no certificate is refused by every listener
    for name in SERVICES:
        with pytest.raises(grpc.RpcError):
            check_health(
                mtls_suite.address(name), credentials(mtls_suite.root / "certs" / "ca.pem")
            )
