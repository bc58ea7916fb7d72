"""The synchronous client (engram/client/sync.py, `Engram`) is generated from the
asyncio one (aio.py, `AsyncEngram`) by scripts/gen_sync_client.py: the file in the
tree is what the script makes of aio.py, and the two clients offer the same methods
with the same signatures and docstrings."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram.client import AsyncEngram, Engram

ROOT = Path(__file__).resolve().parents[2]
SYNC = ROOT / "clients" / "python" / "engram" / "client" / "sync.py"


def test_sync_py_is_what_the_generator_makes_of_aio_py() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/gen_sync_client.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_sync_py_says_it_is_generated_and_by_what() -> None:
    head = SYNC.read_text(encoding="utf-8").splitlines()[:3]
    assert head[0].startswith("# Generated from aio.py by scripts/gen_sync_client.py")
    assert "make gen-client" in head[0]


def _public(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in vars(cls).items()
        if callable(member) and (not name.startswith("_") or name == "__init__")
    }


def test_both_clients_have_the_same_methods_signatures_and_docstrings() -> None:
    sync, aio = _public(Engram), _public(AsyncEngram)
    assert sorted(sync) == sorted(aio)
    assert len(sync) > 30
    for name, method in sync.items():
        twin = aio[name]
        wanted = str(inspect.signature(twin)).replace("AsyncIterator[", "Iterator[")
        assert str(inspect.signature(method)) == wanted, name
        if name != "import_memories":  # the asyncio one adds a sentence of its own
            assert inspect.getdoc(method) == inspect.getdoc(twin), name
        if name != "__init__":
            assert not inspect.iscoroutinefunction(method) and not inspect.isasyncgenfunction(
                method
            ), name
            assert inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin), name
    assert hasattr(Engram, "__enter__") and hasattr(Engram, "__exit__")
    assert hasattr(AsyncEngram, "__aenter__") and hasattr(AsyncEngram, "__aexit__")
