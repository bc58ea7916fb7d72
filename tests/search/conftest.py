"""Fixtures for the search tests: a store + search pair whose query embedder is a
scripted Ollama server, so every vector in a test is chosen by the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from backend_db import storage_backend  # noqa: F401  (a fixture: both backends)
from http_fakes import VectorBook, ollama_server
from recall_helpers import QUERY_VECTOR, Stack, fake_embedding_overrides


@pytest.fixture
def vector_stack(
    recall_stack: Callable[..., Stack], http_servers: Callable[[Any], Any]
) -> Callable[..., tuple[Stack, VectorBook]]:
    """`vector_stack(overrides)` -> (stack, book): queries listed in `book.vectors`
    embed to what the test puts there; "zebra" embeds to QUERY_VECTOR."""

    def build(overrides: dict[str, Any] | None = None) -> tuple[Stack, VectorBook]:
        book = VectorBook({"zebra": QUERY_VECTOR})
        server = http_servers(ollama_server(book))
        stack = recall_stack(fake_embedding_overrides(server.url, **(overrides or {})))
        return stack, book

    return build
