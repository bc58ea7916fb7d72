"""The whole suite with auth AND TLS on, as `engram up` starts it (real processes):
certificates from `engram certs dev`, API keys from `engram keys create`. A writer key
remembers over TLS; the pipeline (its own service credential, over TLS to the store's
internal listener) embeds the memory with a scripted Ollama embedder and extracts a fact
with a scripted LLM, asking search for decision candidates; a reader key then recalls
the memory by meaning alone and finds the extracted fact. Plaintext and keyless calls
are refused on the same suite."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from e2e.e2e_helpers import REPO_ROOT, Launcher, clean_env, engram_command, free_port
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc
from http_fakes import ScriptedHttpServer, VectorBook, ollama_server, unit_axis
from llm_fakes import LlmServer, fact, scripted
from tls_helpers import clients_tls, credentials, make_certs, server_tls, wait_serving

SERVICES = ("store", "search", "pipeline", "maintenance")
MEMORY = "Alice adopted a golden retriever puppy last spring"
QUERY = "Which animal does she own?"  # no word in common with MEMORY
FACT = "Alice owns a golden retriever"
VECTORS = VectorBook({MEMORY: unit_axis(8, 0), QUERY: unit_axis(8, 0)})
DEADLINE_S = 90.0


def bearer(key: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {key}"),)


def keys_create(where: tuple[str, ...], role: str, namespace: str, name: str) -> str:
    done = subprocess.run(
        engram_command(
            *("keys", "create", *where), "--role", role, "--namespace", namespace, "--name", name
        ),
        cwd=REPO_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def embedder() -> Iterator[ScriptedHttpServer]:
    server = ollama_server(VECTORS).start()
    yield server
    server.stop()


@pytest.fixture
def llm() -> Iterator[LlmServer]:
    server = LlmServer(scripted(lambda memory: [fact(FACT)]))
    server.start()
    yield server
    server.stop()


def test_auth_and_tls_suite_remember_embed_recall_extract(
    tmp_path: Path, launcher: Launcher, embedder: ScriptedHttpServer, llm: LlmServer
) -> None:
    certs = make_certs(tmp_path / "certs")
    ports = {name: free_port() for name in (*SERVICES, "store_internal")}
    config = tmp_path / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"ports": ports, "tls": server_tls(certs)},
                "clients": {"tls": clients_tls(certs)},
                "auth": {"enabled": True},
                "memory": {"pipelineV2": {"enabled": True, "workerPollMs": 100}},
                "workers": {"embed": {"poll_ms": 100}},
                "providers": {
                    "embedding": {"kind": "ollama", "base_url": embedder.url, "model": "e"},
                    "llm": {"kind": "ollama", "base_url": llm.url, "model": "fake-llm"},
                },
            }
        ),
        encoding="utf-8",
    )
    where = ("--config", str(config), "--data-dir", str(tmp_path / "data"))
    up = launcher.spawn(engram_command("up", *where), port=ports["store"])
    ca = credentials(certs / "ca.pem")
    address = {name: f"127.0.0.1:{ports[name]}" for name in SERVICES}
    for name in SERVICES:
        wait_serving(up, ca, address[name])
    writer = keys_create(where, "writer", "team-*", "agent-7")
    reader = keys_create(where, "reader", "team-a", "dashboard")

    with (
        grpc.secure_channel(address["store"], ca) as store_channel,
        grpc.secure_channel(address["search"], ca) as search_channel,
    ):
        store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
        search = search_pb2_grpc.SearchServiceStub(search_channel)
        request = store_pb2.RememberRequest(namespace="team-a", content=MEMORY)
        with pytest.raises(grpc.RpcError) as keyless:
            store.Remember(request, timeout=10)
        assert keyless.value.code() == grpc.StatusCode.UNAUTHENTICATED
        memory = store.Remember(request, metadata=bearer(writer), timeout=10).memory

        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert up.process.poll() is None, up.log()[-4000:]
            results = search.Recall(
                search_pb2.RecallRequest(namespace="team-a", query=QUERY),
                metadata=bearer(reader),
                timeout=10,
            ).results
            by_meaning = [r for r in results if r.memory.id == memory.id and r.vector.rank]
            facts = [
                r
                for r in search.Recall(
                    search_pb2.RecallRequest(namespace="team-a", query=FACT),
                    metadata=bearer(reader),
                    timeout=10,
                ).results
                if r.memory.content == FACT
            ]
            if by_meaning and facts:
                break
            assert time.monotonic() < deadline, (
                f"not embedded and extracted within {DEADLINE_S}s: {results}\n{up.log()[-4000:]}"
            )
            time.sleep(0.3)
        assert by_meaning[0].keyword.rank == 0  # no word in common: found by its vector
        history = store.ListMemoryHistory(
            store_pb2.ListMemoryHistoryRequest(namespace="team-a", memory_id=memory.id),
            metadata=bearer(reader),
            timeout=10,
        ).events
        assert history[0].actor == "agent-7"

    with grpc.insecure_channel(address["store"]) as plaintext:
        with pytest.raises(grpc.RpcError) as refused:
            store_pb2_grpc.MemoryStoreServiceStub(plaintext).Remember(
                request, metadata=bearer(writer), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert llm.requests, "the pipeline never asked the LLM"
