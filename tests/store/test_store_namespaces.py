"""DeleteNamespace and RecoverNamespace (issue 35): a preview that counts what a
namespace holds with a confirm token, an execute that soft-deletes every memory
in it (another namespace's untouched), recovery within the tombstone window, and
the purge through the retention sweep."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from admin_helpers import AdminStore, admin_store
from engram.store.internal.v1 import admin_pb2
from engram.store.v1 import store_pb2 as S
from grpc_helpers import error_of
from services.common.clock import days_ago_text

EXECUTE = S.FORGET_MODE_EXECUTE
DOOMED, NEIGHBOUR = "doomed", "neighbour"


@pytest.fixture
def start(
    start_store_server: Callable[..., Any], make_config: Callable[..., Any]
) -> Callable[..., AdminStore]:
    return lambda **overrides: admin_store(start_store_server, make_config, **overrides)


def _import(st: AdminStore, namespace: str, contents: list[str], **item: Any) -> list[str]:
    """One ImportMemories stream per 25000 items, 1000 items per message."""
    ids: list[str] = []
    for start in range(0, len(contents), 25_000):
        part = contents[start : start + 25_000]

        def messages(part: list[str] = part) -> Iterator[S.ImportMemoriesRequest]:
            for at in range(0, len(part), 1000):
                yield S.ImportMemoriesRequest(
                    namespace=namespace,
                    items=[S.ImportItem(content=c, **item) for c in part[at : at + 1000]],
                )

        reply = st.store.ImportMemories(messages(), timeout=600)
        assert reply.failed_count == 0
        ids += [r.memory_id for r in reply.results]
    return ids


def _namespace_rows(st: AdminStore, namespace: str) -> list[tuple[Any, ...]]:
    """Everything of a namespace's memories and history, to compare before and after."""
    memories = st.rows(
        "SELECT id, content, version, is_deleted, deleted_at, updated_at FROM memories "
        "WHERE namespace = ? ORDER BY id",
        namespace,
    )
    history = st.rows(
        "SELECT id, memory_id, event FROM memory_history WHERE namespace = ? ORDER BY id",
        namespace,
    )
    return [*memories, *history]


def _live(st: AdminStore, namespace: str) -> int:
    return int(
        st.scalar("SELECT count(*) FROM memories WHERE namespace = ? AND is_deleted = 0", namespace)
    )


def _preview(st: AdminStore, namespace: str) -> S.DeleteNamespaceResponse:
    return st.store.DeleteNamespace(S.DeleteNamespaceRequest(namespace=namespace))


def _execute(st: AdminStore, namespace: str, token: str) -> S.DeleteNamespaceResponse:
    return st.store.DeleteNamespace(
        S.DeleteNamespaceRequest(
            namespace=namespace, mode=EXECUTE, reason="tenant left", confirm_token=token
        ),
        timeout=600,
    )


def _recover(st: AdminStore, namespace: str) -> S.RecoverNamespaceResponse:
    return st.store.RecoverNamespace(
        S.RecoverNamespaceRequest(namespace=namespace, reason="came back"), timeout=600
    )


def test_a_namespace_of_50000_memories_goes_and_comes_back_and_another_is_untouched(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    _import(st, DOOMED, [f"doomed memory number {n}" for n in range(50_000)])
    pinned = st.remember("a pinned rule of the doomed", namespace=DOOMED, pinned=True)
    earlier = st.remember("deleted on its own before", namespace=DOOMED)
    st.delete(earlier, namespace=DOOMED)
    # the neighbour holds some of the same contents: dedup and vectors are per namespace
    _import(st, NEIGHBOUR, [f"doomed memory number {n}" for n in range(300)])
    neighbour = _namespace_rows(st, NEIGHBOUR)
    audit_before = len(st.audit_actions())

    preview = _preview(st, DOOMED)
    contents = preview.contents
    assert (contents.memories, contents.pinned_memories, contents.deleted_memories) == (
        50_001,
        1,
        1,
    )
    assert preview.confirm_token and preview.deleted_count == 0
    assert len(st.audit_actions()) == audit_before  # a preview writes nothing

    done = _execute(st, DOOMED, preview.confirm_token)
    assert done.deleted_count == 50_001 and done.contents.memories == 50_001
    assert done.recover_until.ToDatetime() > done.delete_time.ToDatetime()
    assert _live(st, DOOMED) == 0
    assert not st.store.ListMemories(S.ListMemoriesRequest(namespace=DOOMED)).memories
    gone = st.store.GetMemory(S.GetMemoryRequest(namespace=DOOMED, id=pinned)).memory
    assert gone.deleted
    events = st.store.ListMemoryHistory(
        S.ListMemoryHistoryRequest(namespace=DOOMED, memory_id=pinned)
    ).events
    assert [e.event_type for e in events] == [
        S.HISTORY_EVENT_TYPE_CREATED,
        S.HISTORY_EVENT_TYPE_DELETED,
    ]
    assert events[-1].reason == "tenant left" and events[-1].metadata["namespace_deleted"]
    assert _namespace_rows(st, NEIGHBOUR) == neighbour

    back = _recover(st, DOOMED)
    assert (back.recovered_count, back.skipped_duplicates) == (50_001, 0)
    assert [t.ToJsonString() for t in back.delete_times] == [done.delete_time.ToJsonString()]
    assert _live(st, DOOMED) == 50_001
    still = st.store.GetMemory(S.GetMemoryRequest(namespace=DOOMED, id=earlier)).memory
    assert still.deleted  # deleted one by one: RecoverMemory's, not RecoverNamespace's
    assert st.store.GetMemory(S.GetMemoryRequest(namespace=DOOMED, id=pinned)).memory.pinned
    assert _namespace_rows(st, NEIGHBOUR) == neighbour
    again = _recover(st, DOOMED)
    assert (again.recovered_count, again.skipped_duplicates) == (0, 0)


def test_after_the_tombstone_window_retention_purges_it_and_recovery_is_expired(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    ids = _import(st, DOOMED, [f"short lived tenant fact {n}" for n in range(5)])
    _import(st, NEIGHBOUR, ["short lived tenant fact 0"])
    done = _execute(st, DOOMED, _preview(st, DOOMED).confirm_token)
    assert done.deleted_count == 5
    # 31 days later (the window is 30): the memories' deleted time and the deletion's record
    at, old = done.delete_time.ToJsonString(), days_ago_text(31)
    stored = st.scalar("SELECT deleted_at FROM memories WHERE id = ?", ids[0])
    st.execute("UPDATE memories SET deleted_at = ? WHERE deleted_at = ?", old, stored)
    st.execute("UPDATE maintenance_audit SET result = replace(result, ?, ?)", stored, old)
    assert error_of(lambda: _recover(st, DOOMED))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "RETENTION_EXPIRED",
    )
    steps = {
        s.step: s.removed for s in st.admin.SweepRetention(admin_pb2.SweepRetentionRequest()).steps
    }
    assert steps["tombstones"] == 5, at
    assert st.scalar("SELECT count(*) FROM memories WHERE namespace = ?", DOOMED) == 0
    assert _live(st, NEIGHBOUR) == 1


def test_a_memory_remembered_again_after_the_deletion_is_not_recovered_twice(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    _import(st, DOOMED, ["the office is on floor 3", "the office has a cat"])
    _execute(st, DOOMED, _preview(st, DOOMED).confirm_token)
    again = st.remember("the office is on floor 3", namespace=DOOMED)
    back = _recover(st, DOOMED)
    assert (back.recovered_count, back.skipped_duplicates) == (1, 1)
    live = st.store.ListMemories(S.ListMemoriesRequest(namespace=DOOMED)).memories
    assert sorted((m.content, m.id == again) for m in live) == [
        ("the office has a cat", False),
        ("the office is on floor 3", True),
    ]


def test_the_execute_needs_the_token_of_a_preview_of_the_namespace_as_it_is(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    _import(st, DOOMED, ["one fact", "another fact"])
    _import(st, NEIGHBOUR, ["one fact"])
    before = _namespace_rows(st, DOOMED)
    assert error_of(lambda: _execute(st, DOOMED, ""))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "CONFIRM_TOKEN_REQUIRED",
    )
    other = _preview(st, NEIGHBOUR).confirm_token
    assert error_of(lambda: _execute(st, DOOMED, other))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "CONFIRM_TOKEN_MISMATCH",
    )
    token = _preview(st, DOOMED).confirm_token
    st.remember("a fact written after the preview", namespace=DOOMED)
    assert error_of(lambda: _execute(st, DOOMED, token))[:2] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "CONFIRM_TOKEN_MISMATCH",
    )
    assert set(before) <= set(_namespace_rows(st, DOOMED))  # nothing of it changed
    assert _live(st, DOOMED) == 3
    assert _execute(st, DOOMED, _preview(st, DOOMED).confirm_token).deleted_count == 3


def test_bad_requests_name_every_bad_field_and_write_nothing(
    start: Callable[..., AdminStore],
) -> None:
    st = start()
    _import(st, DOOMED, ["a fact to keep"])
    rows = _namespace_rows(st, DOOMED)
    code, reason, fields = error_of(
        lambda: st.store.DeleteNamespace(S.DeleteNamespaceRequest(mode=EXECUTE, confirm_token="x"))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert set(fields) == {"namespace", "reason"}
    code, _, fields = error_of(
        lambda: st.store.DeleteNamespace(S.DeleteNamespaceRequest(namespace="bad name!"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and set(fields) == {"namespace"}
    code, _, fields = error_of(lambda: st.store.RecoverNamespace(S.RecoverNamespaceRequest()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and set(fields) == {"namespace", "reason"}
    assert error_of(lambda: _recover(st, DOOMED))[:2] == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    assert _namespace_rows(st, DOOMED) == rows
