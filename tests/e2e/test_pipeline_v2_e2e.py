"""Pipeline V2 across three real processes (store, search, pipeline, each
`python -m services.cli.main serve SERVICE --config FILE`) and a scripted Ollama
LLM on a loopback port: remember -> the extract worker derives a fact -> the
store writes it -> search recalls it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from e2e_helpers import Launcher, ProcessHandle, engram_command, free_port
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2
from llm_fakes import LlmServer, decision_answer, fact, scripted

NAMESPACE = "e2e-pipeline"
SOURCE = "Hi there! Alice moved to Lisbon in 2021 and she surfs every weekend."
FACTS = ["Alice moved to Lisbon in 2021", "Alice surfs every weekend"]
WAIT_S = 60.0


def _derived(store: ProcessHandle) -> list[store_pb2.Memory]:
    listed = store.stub().ListMemories(
        store_pb2.ListMemoriesRequest(namespace=NAMESPACE, page_size=50), timeout=10
    )
    return [m for m in listed.memories if m.who == "pipeline-v2"]


def test_a_remembered_memory_yields_facts_that_search_recalls(
    launcher: Launcher, tmp_path: Path
) -> None:
    llm = LlmServer(
        scripted(
            lambda memory: [fact(f) for f in FACTS] if memory == SOURCE else [],
            decide=lambda fact_text, candidates: decision_answer("ADD", reason="new"),
        )
    ).start()
    try:
        ports = {name: free_port() for name in ("store", "store_internal", "search", "pipeline")}
        config = tmp_path / "engram.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "storage": {"path": str(tmp_path / "data" / "engram.db")},
                    "server": {"ports": ports},
                    "clients": {
                        "store_address": f"127.0.0.1:{ports['store']}",
                        "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
                        "search_address": f"127.0.0.1:{ports['search']}",
                    },
                    "memory": {"pipelineV2": {"enabled": True, "workerPollMs": 100}},
                    "providers": {
                        "embedding": {"kind": "none"},
                        "llm": {"kind": "ollama", "base_url": llm.url, "model": "fake-llm"},
                    },
                }
            ),
            encoding="utf-8",
        )
        handles = {}
        for name in ("store", "search", "pipeline"):
            handles[name] = launcher.spawn(
                engram_command("serve", name, "--config", str(config)), port=ports[name]
            )
            handles[name].wait_ready(timeout=60)
        store = handles["store"]
        source = (
            store.stub()
            .Remember(store_pb2.RememberRequest(namespace=NAMESPACE, content=SOURCE), timeout=10)
            .memory
        )

        deadline = time.monotonic() + WAIT_S
        while len(derived := _derived(store)) < len(FACTS):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"facts not derived within {WAIT_S}s:\n" + handles["pipeline"].log()[-3000:]
                )
            time.sleep(0.2)
        assert sorted(m.content for m in derived) == sorted(FACTS)
        assert all(m.namespace == NAMESPACE and m.id != source.id for m in derived)

        search = search_pb2_grpc.SearchServiceStub(handles["search"].channel())
        response = search.Recall(
            search_pb2.RecallRequest(namespace=NAMESPACE, query="Who surfs on weekends?"),
            timeout=30,
        )
        surfer = next(m for m in derived if m.content == "Alice surfs every weekend")
        assert surfer.id in [r.memory.id for r in response.results]
        other = search.Recall(
            search_pb2.RecallRequest(namespace="elsewhere", query="Alice surfs"), timeout=30
        )
        assert list(other.results) == [], "nothing crosses namespaces"
    finally:
        llm.stop()
