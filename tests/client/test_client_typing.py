"""engram-grpc-client gives a user's mypy --strict the message types: a misspelt field of
a result (`.memory.contnet`) is an error, not an Any that passes. This needs
types-protobuf (a dependency of engram-grpc-client): without it every message's base
class is Any."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """\
import asyncio

from engram.client import AsyncEngram, Engram


def sync_use(engram: Engram) -> str:
    stored = engram.remember("Alice prefers tea", namespace="n")
    for hit in engram.recall("tea", namespace="n").results:
        print(hit.memory.content, hit.score)
    return stored.memory.contnet  # line 10: the misspelling


async def async_use() -> str:
    async with AsyncEngram("127.0.0.1:50051") as engram:
        memory = await engram.get_memory("m1")
        async for listed in engram.list_memories(namespace="n"):
            print(listed.id)
        return memory.content


asyncio.run(async_use())
"""


def test_mypy_strict_reports_a_misspelt_message_field(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    paths = os.pathsep.join(str(ROOT / p) for p in ("gen", "clients/python"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MYPY", "PYTHON"))}
    env["MYPYPATH"] = paths
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            os.devnull,
            "--config-file",
            os.devnull,
            str(program),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    # the misspelling, and nothing else: the rest of the program (and the client itself,
    # checked here from its source) type-checks strict; the Any it leaves is returned
    assert errors, result.stdout + result.stderr
    assert all(e.startswith("program.py:10: error:") for e in errors), result.stdout
    assert any('"Memory" has no attribute "contnet"' in e for e in errors), result.stdout
