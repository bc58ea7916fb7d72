"""The first minute of a search process with the local model, run for real
(`python -m services.cli.main serve search --config FILE`):

- health says NOT_SERVING while the model loads and SERVING once it is warm,
  so the first Recall a health-aware client sends is not degraded;
- the process writes JSON log lines only (no tqdm progress bars on stderr).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from e2e_helpers import Launcher, ProcessHandle, engram_command, free_port
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2
from recall_helpers import wait_for

SEARCH = "engram.search.v1.SearchService"
NAMESPACE = "warm-start"
LOAD_TIMEOUT_S = 180.0  # loading torch and the model on a small, busy machine
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class WarmStart:
    search: ProcessHandle
    statuses: list[int]  # what a health Watch saw from the first moment until SERVING
    first_recall: search_pb2.RecallResponse


def _watch_until_serving(channel: grpc.Channel) -> list[int]:
    watch = health_pb2_grpc.HealthStub(channel).Watch(
        health_pb2.HealthCheckRequest(service=SEARCH), timeout=LOAD_TIMEOUT_S, wait_for_ready=True
    )
    statuses: list[int] = []
    try:
        for reply in watch:
            statuses.append(reply.status)
            if reply.status == SERVING:
                break
    finally:
        watch.cancel()
    return statuses


@pytest.fixture(scope="module")
def warm_start(
    module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WarmStart]:
    root: Path = tmp_path_factory.mktemp("warm-start")
    ports = {name: free_port() for name in ("store", "store_internal", "search")}
    config = root / "engram.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"path": str(root / "data" / "engram.db")},
                "server": {"ports": ports},
                "clients": {
                    "store_address": f"127.0.0.1:{ports['store']}",
                    "store_internal_address": f"127.0.0.1:{ports['store_internal']}",
                },
                "providers": {"embedding": {"kind": "local", "model": "all-MiniLM-L6-v2"}},
            }
        ),
        encoding="utf-8",
    )
    store = module_launcher.spawn(
        engram_command("serve", "store", "--config", str(config)), port=ports["store"]
    )
    store.wait_ready()
    store.stub().Remember(
        store_pb2.RememberRequest(namespace=NAMESPACE, content="Alice adopted a golden retriever"),
        timeout=10,
    )
    search = module_launcher.spawn(
        engram_command("serve", "search", "--config", str(config)),
        port=ports["search"],
        split_stderr=True,
    )
    channel = search.channel()
    statuses = _watch_until_serving(channel)
    assert search.process.poll() is None, search.log()
    first = search_pb2_grpc.SearchServiceStub(channel).Recall(
        search_pb2.RecallRequest(namespace=NAMESPACE, query="golden retriever"), timeout=30
    )
    yield WarmStart(search, statuses, first)
    search.kill()
    store.kill()


def test_health_is_not_serving_until_the_model_is_warm(warm_start: WarmStart) -> None:
    # The int8 model can be warm before the Watch connects, so the first status may
    # already be SERVING; what must never happen is SERVING and then anything else,
    # or a degraded first Recall (the model not yet loaded).
    assert warm_start.statuses in ([NOT_SERVING, SERVING], [SERVING]), warm_start.search.log()[
        -3000:
    ]
    first = warm_start.first_recall
    assert not first.degraded, list(first.warnings)
    assert list(first.warnings) == []
    assert [r.memory.content for r in first.results] == ["Alice adopted a golden retriever"]


def test_every_line_the_process_writes_is_json(warm_start: WarmStart) -> None:
    stub = search_pb2_grpc.SearchServiceStub(warm_start.search.channel())
    wait_for(
        lambda: (
            not stub.Recall(
                search_pb2.RecallRequest(namespace=NAMESPACE, query="golden retriever"), timeout=30
            ).degraded
        ),
        timeout=60,
        interval=0.5,
        what="a recall with a query vector",
    )
    for query in ("which pet does she have", "a dog", "a puppy"):  # each one embedded
        response = stub.Recall(search_pb2.RecallRequest(namespace=NAMESPACE, query=query))
        assert not response.degraded, list(response.warnings)
    lines = warm_start.search.stderr().splitlines()
    not_json = []
    for line in lines:
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            not_json.append(line)
    assert not_json == [], "\n".join(not_json)
    assert any(json.loads(line)["msg"] == "embedding model warm" for line in lines)
    assert warm_start.search.stdout() == ""
