"""Recall and the store's live rule (issue 16): an expired short-term memory is
gone from every channel at once, and MemoryFilter.session_id narrows Recall
inside each channel. Expiry is reached by moving `expire_at` into the past in
the database (tests cannot wait for hours)."""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf import duration_pb2

import backend_db
from recall_helpers import Stack, ids
from services.common.clock import days_ago_text

HOUR = duration_pb2.Duration(seconds=3600)


def expire_now(stack: Stack, memory_id: str) -> None:
    backend_db.execute(
        stack.config.storage.path,
        "UPDATE memories SET expire_at = ? WHERE id = ?",
        days_ago_text(1 / 86400),
        memory_id,
    )


def test_an_expired_memory_leaves_recall_at_once_and_a_live_twin_session_stays(
    recall_stack: Callable[..., Stack],
) -> None:
    stack = recall_stack({"providers.embedding.kind": "none"})
    gone = stack.remember("the staging database password rotates", ttl=HOUR, session_id="s1")
    kept = stack.remember("the staging database moved to eu-west", ttl=HOUR, session_id="s1")
    other = stack.remember("the staging database is slow", session_id="s2")
    assert set(ids(stack.recall("staging database"))) == {gone.id, kept.id, other.id}
    expire_now(stack, gone.id)
    assert set(ids(stack.recall("staging database"))) == {kept.id, other.id}
    assert ids(stack.recall("staging database", session_id="s1")) == [kept.id]
    assert ids(stack.recall("staging database", session_id="s2")) == [other.id]
