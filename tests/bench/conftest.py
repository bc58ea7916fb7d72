"""The bench/ scripts under test, imported as modules: with bench/ on sys.path
while they are in use, as their own imports (`import provenance`) expect."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCH))
    previous = None
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        # registered while in use: a dataclass resolves its annotations there
        previous = sys.modules.get(name)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous


@pytest.fixture(scope="module")
def embed_cache() -> Iterator[ModuleType]:
    yield from bench_module("embed_cache")


@pytest.fixture(scope="module")
def runner() -> Iterator[ModuleType]:
    """bench/longmemeval.py."""
    yield from bench_module("longmemeval")


@pytest.fixture(scope="module")
def provenance() -> Iterator[ModuleType]:
    yield from bench_module("provenance")


@pytest.fixture(scope="module")
def baselines() -> Iterator[ModuleType]:
    yield from bench_module("baselines")


@pytest.fixture(scope="module")
def locomo() -> Iterator[ModuleType]:
    yield from bench_module("locomo")
