"""Every provider example of the docs runs: each YAML block of the README's "Which
features need an LLM" and of the embedding settings (docs/pipeline.md) is loaded with load_config as a
config file, then its provider is pointed at a scripted server of the same
protocol on loopback (only the address and the key's place change) and asked
for an answer."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from e2e.e2e_helpers import GRPCURL, needs_grpcurl
from engram.store.v1 import store_pb2
from http_fakes import gemini_embedding_server, openai_server
from llm_fakes import LlmServer
from services.common.config import Config, load_config
from services.common.providers.embedding import embedding_provider
from services.common.providers.llm import llm_provider

README = Path(__file__).resolve().parents[2] / "README.md"
PIPELINE = Path(__file__).resolve().parents[2] / "docs" / "pipeline.md"
KEY = "readme-key-0123456789"


def yaml_blocks(page: Path, start: str, end: str) -> list[str]:
    text = page.read_text(encoding="utf-8")
    section = text[text.index(start) : text.index(end, text.index(start))]
    return re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)


LLM_BLOCKS = yaml_blocks(README, "\n## Which features need an LLM\n", "\n## Two commands\n")
EMBEDDING_BLOCKS = yaml_blocks(
    PIPELINE, "\n## Embeddings and the pipeline\n", "The local model runs on"
)


def load(block: str, tmp_path: Path) -> Config:
    path = tmp_path / "engram.yaml"
    path.write_text(block, encoding="utf-8")
    return load_config(path, environ={})


def test_the_readme_has_an_example_for_every_provider() -> None:
    kinds = {re.search(r"llm: \{kind: (\w+)", b).group(1) for b in LLM_BLOCKS}  # type: ignore[union-attr]
    assert kinds == {"ollama", "openai", "anthropic", "gemini"}
    assert len(EMBEDDING_BLOCKS) == 2


@pytest.mark.parametrize("block", LLM_BLOCKS, ids=lambda b: b.splitlines()[0][2:40])
def test_each_llm_example_loads_and_answers(
    block: str, tmp_path: Path, http_servers: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load(block, tmp_path)
    assert config.memory.pipelineV2.enabled and config.memory.pipelineV2.graphEnabled
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)  # the variable the example names

    def local(entry: Any) -> dict[str, Any]:
        """The entry pointed at a scripted server of its protocol."""
        server = http_servers(
            LlmServer(lambda p, k=entry.kind: f"{k}: {p}", entry.kind, entry.model)
        )
        moved = {**entry.model_dump(exclude_unset=True), "base_url": server.url}
        if entry.api_key_file:
            moved["api_key_file"] = str(key_file)
        return moved

    llm = config.providers.llm
    fallbacks = config.providers.llm_fallbacks
    moved = local(llm)
    overrides: dict[str, Any] = {f"providers.llm.{k}": v for k, v in moved.items()}
    if fallbacks:
        overrides["providers.llm_fallbacks"] = [local(f) for f in fallbacks]
    provider = llm_provider(config.with_overrides(overrides))

    async def answer() -> str:
        try:
            return str(await provider.generate("hello"))
        finally:
            await provider.close()

    assert asyncio.run(answer()) == f"{llm.kind}: hello"


def test_the_embedding_examples_load_and_embed(
    tmp_path: Path, http_servers: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    openai, gemini = (load(b, tmp_path) for b in EMBEDDING_BLOCKS)
    assert (openai.providers.embedding.kind, openai.providers.embedding.dimensions) == (
        "openai",
        256,
    )
    assert (gemini.providers.embedding.kind, gemini.providers.embedding.dimensions) == (
        "gemini",
        768,
    )
    full = [0.1] * 3072
    servers = {
        "openai": http_servers(openai_server(lambda _t: full)),
        "gemini": http_servers(
            gemini_embedding_server(lambda _t: full, "gemini-embedding-001", KEY)
        ),
    }
    for config in (openai, gemini):
        settings = config.providers.embedding
        moved = config.with_overrides({"providers.embedding.base_url": servers[settings.kind].url})
        provider = embedding_provider(moved)
        assert provider.model == f"{settings.model}@{settings.dimensions}"

        async def vectors(p: Any = provider) -> list[list[float]]:
            try:
                return list(await p.embed(["hello"]))
            finally:
                await p.close()

        assert [len(v) for v in asyncio.run(vectors())] == [settings.dimensions]


@needs_grpcurl()
def test_the_readme_backfill_example_queues_what_was_remembered_while_off(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> None:
    """docs/pipeline.md's (Pipeline V2) BackfillExtraction line, as written (its port
    rewritten), against a store that has just had the pipeline turned on."""
    [block] = [
        b
        for b in re.findall(r"^```sh\n(.*?)^```", PIPELINE.read_text(), re.DOTALL | re.M)
        if "StoreAdminService/BackfillExtraction" in b
    ]
    [command] = [line for line in block.splitlines() if line.strip()]
    off, store = start_store_server(make_config())
    for n in range(3):
        store.Remember(store_pb2.RememberRequest(namespace="team-a", content=f"while off {n}"))
    off.stop()
    on, _ = start_store_server(make_config(**{"memory.pipelineV2.enabled": True}))
    assert GRPCURL is not None
    argv = shlex.split(command.replace("localhost:50061", f"127.0.0.1:{on.app.internal_port}"))
    result = subprocess.run(
        [GRPCURL, *argv[1:]], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"queued": "3"}, "int64 as JSON text; remaining 0 omitted"
