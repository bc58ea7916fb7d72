"""The "Knowledge graph" example (docs/graph.md) runs, as written, against real store,
search and pipeline processes with `graphEnabled` and a scripted Ollama model
that names entities with types and aliases: the two Remembers are extracted,
`engram entity list/get` and grpcurl's GetEntity show the typed, aliased
entities, and `engram links` the session's `temporal` link.

Rewrites, and no others: `.venv/bin/engram` -> this checkout's CLI (the store
given by ENGRAM_ADDRESS), `.venv/bin/grpcurl` -> the grpcurl beside this interpreter,
`localhost:50051` -> the store this test started, `<second memory id>` -> the id
the second `remember` printed."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e_helpers import (
    GRPCURL,
    REPO_ROOT,
    Launcher,
    clean_env,
    engram_command,
    free_port,
    needs_grpcurl,
)
from engram.store.v1 import store_pb2
from llm_fakes import LlmServer, decision_answer, is_extraction, memory_of

pytestmark = needs_grpcurl()

ANSWERS: dict[str, dict[str, Any]] = {
    "Ana Silva moved to Lisbon. Ana works at Acme Corp.": {
        "facts": [
            {"content": "Ana Silva lives in Lisbon", "confidence": 0.9},
            {"content": "Ana works at Acme Corp", "confidence": 0.9},
        ],
        "entities": [
            {"source": "Ana Silva", "relationship": "lives_in", "target": "Lisbon"},
            {"source": "Ana", "relationship": "works_at", "target": "Acme Corp"},
        ],
        "named_entities": [
            {"name": "Ana Silva", "type": "person", "aliases": ["Ana"]},
            {"name": "Lisbon", "type": "city"},
            {"name": "Acme Corp", "type": "company", "aliases": ["Acme"]},
        ],
    },
    "Annie from Acme says the Lisbon office is great": {
        "facts": [{"content": "The Acme office in Lisbon is great", "confidence": 0.9}],
        "entities": [],
        "named_entities": [
            {"name": "Ana", "type": "person", "aliases": ["Annie"]},
            {"name": "Acme", "type": "organization"},
            {"name": "Lisbon", "type": "place"},
        ],
    },
}
WAIT_S = 60


def model(prompt: str) -> str:
    if is_extraction(prompt):
        return json.dumps(ANSWERS.get(memory_of(prompt), {"facts": [], "entities": []}))
    return decision_answer("ADD", reason="new information")


def _graph_block() -> str:
    blocks = re.findall(
        r"^```sh\n(.*?)^```",
        (REPO_ROOT / "docs" / "graph.md").read_text(),
        flags=re.DOTALL | re.MULTILINE,
    )
    (block,) = [b for b in blocks if "engram entity get" in b]
    return block


def _commands(block: str) -> list[str]:
    """The block's commands (continuation lines joined), comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def _run(command: str, store_address: str) -> subprocess.CompletedProcess[str]:
    command = command.replace(".venv/bin/engram", shlex.join(engram_command()))
    command = command.replace("localhost:50051", store_address)
    command = re.sub(r"(^|\s)\.venv/bin/grpcurl ", rf"\g<1>{GRPCURL} ", command)
    path = ":".join([str(REPO_ROOT / "clients" / "python"), str(REPO_ROOT), str(REPO_ROOT / "gen")])
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + command],
        cwd=REPO_ROOT,
        env=clean_env({"PYTHONPATH": path, "ENGRAM_ADDRESS": store_address, "COLUMNS": "200"}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_readme_knowledge_graph_example_runs(launcher: Launcher, tmp_path: Path) -> None:
    llm = LlmServer(model).start()
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
                    "memory": {
                        "pipelineV2": {"enabled": True, "graphEnabled": True, "workerPollMs": 100}
                    },
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
        address = f"127.0.0.1:{ports['store']}"
        stub = handles["store"].stub()
        commands = _commands(_graph_block())
        ids = []
        for command in commands[:2]:
            done = _run(command, address)
            assert done.returncode == 0, done.stderr + done.stdout
            ids.append(done.stdout.strip().removeprefix("remembered: "))

        def annie_known() -> bool:
            try:
                found = stub.GetEntity(
                    store_pb2.GetEntityRequest(namespace="team-g", name="annie"), timeout=10
                )
            except Exception:
                return False
            return found.entity.mention_count == 4  # both memories and both facts naming her

        deadline = time.monotonic() + WAIT_S
        while not annie_known():
            if time.monotonic() > deadline:
                pytest.fail("entities not written:\n" + handles["pipeline"].log()[-3000:])
            time.sleep(0.2)

        outputs = []
        for command in commands[2:]:
            done = _run(command.replace("<second memory id>", ids[1]), address)
            assert done.returncode == 0, f"{command}\n{done.stderr}{done.stdout}"
            outputs.append(done.stdout)
        listed, got, grpc_reply, links = outputs
        for name, kind in (("Ana Silva", "person"), ("Acme Corp", "organization")):
            assert re.search(rf"{name}\s*│\s*{kind}", listed), listed
        assert re.search(r"Lisbon\s*│\s*place", listed), listed
        assert "Ana Silva (also: Ana, Annie): person, 4 mentions" in got
        assert "Annie from Acme says the Lisbon office is great" in got and "works_at" in got
        reply = json.loads(grpc_reply)
        assert reply["entity"]["name"] == "Acme Corp" and reply["entity"]["aliases"] == ["Acme"]
        assert reply["entity"]["entity_type"] == "organization"  # grpcurl: proto names
        assert len(reply["facts"]) == 4
        assert "temporal" in links and ids[0] in links and ids[1] in links
    finally:
        llm.stop()
