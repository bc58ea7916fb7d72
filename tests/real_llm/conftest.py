"""The real model's fixture (tests/llama_server.py) and the `real_llm` marker on every
test here. Without the `real-llm` extra the tests skip, unless ENGRAM_REQUIRE_REAL_LLM=1
(.ci/run sets it): then a missing extra is a failure, so CI never passes by skipping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.e2e_helpers import module_launcher
from llama_server import LlamaServer, missing, required

__all__ = ["module_launcher"]

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_llm)


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    reason = missing()
    if reason is not None:
        if required():
            pytest.fail(f"the real model is required here: {reason}", pytrace=False)
        pytest.skip(reason)
    with LlamaServer(tmp_path_factory.mktemp("llama") / "llama_server.log") as server:
        yield server
