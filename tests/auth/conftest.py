"""Fixtures for the auth tests (the suite itself: tests/auth/auth_suite.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from auth_suite import AuthSuite, start_auth_suite

from llm_fakes import LlmServer, extraction_answer


@pytest.fixture(scope="module")
def llm() -> Iterator[LlmServer]:
    server = LlmServer(lambda _prompt: extraction_answer([]))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def auth_store(tmp_path: Path, llm: LlmServer) -> Iterator[Callable[..., AuthSuite]]:
    """`auth_store(**overrides)`: an auth-on store alone (stopped at teardown)."""
    started: list[AuthSuite] = []

    def start(**overrides: Any) -> AuthSuite:
        suite = start_auth_suite(tmp_path, llm.url, overrides, services="store")
        started.append(suite)
        return suite

    yield start
    for suite in started:
        suite.close()
