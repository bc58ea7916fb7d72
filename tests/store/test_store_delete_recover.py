from pathlib import Path

import grpc

from engram.store.v1 import store_pb2 as S
from grpc_helpers import error_of
from store_helpers import fts_ids, remember, table_counts


def test_soft_delete_leaves_fts_and_listings_at_once_and_recovery_restores(
    store, db_path: Path
) -> None:
    memory = remember(store, "zebra crossing rules").memory
    deleted = store.DeleteMemory(
        S.DeleteMemoryRequest(id=memory.id, reason="obsolete", actor="me")
    ).memory
    assert deleted.deleted and deleted.version == 2 and deleted.delete_time.seconds > 0
    assert fts_ids(db_path, "zebra") == set()
    assert store.ListMemories(S.ListMemoriesRequest()).memories == []
    assert store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory.deleted

    recovered = store.RecoverMemory(
        S.RecoverMemoryRequest(id=memory.id, reason="needed", if_version=2)
    ).memory
    assert (
        not recovered.deleted and recovered.version == 3 and not recovered.HasField("delete_time")
    )
    assert fts_ids(db_path, "zebra") == {memory.id}
    assert [m.id for m in store.ListMemories(S.ListMemoriesRequest()).memories] == [memory.id]
    events = store.ListMemoryHistory(S.ListMemoryHistoryRequest(memory_id=memory.id)).events
    assert [e.event_type for e in events] == [
        S.HISTORY_EVENT_TYPE_CREATED,
        S.HISTORY_EVENT_TYPE_DELETED,
        S.HISTORY_EVENT_TYPE_RECOVERED,
    ]
    assert (events[1].reason, events[1].actor, events[1].old_content) == (
        "obsolete",
        "me",
        "zebra crossing rules",
    )


def test_pinned_memory_needs_force(store) -> None:
    memory = remember(store, "critical: keep this").memory
    code, reason, _ = error_of(
        lambda: store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r"))
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PINNED_REQUIRES_FORCE")
    assert not store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory.deleted
    assert store.DeleteMemory(
        S.DeleteMemoryRequest(id=memory.id, reason="r", force=True)
    ).memory.deleted


def test_delete_version_conflict_is_aborted_and_writes_nothing(store, db_path: Path) -> None:
    memory = remember(store, "versioned").memory
    before = table_counts(db_path)
    code, reason, _ = error_of(
        lambda: store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r", if_version=5))
    )
    assert (code, reason) == (grpc.StatusCode.ABORTED, "VERSION_CONFLICT")
    assert table_counts(db_path) == before


def test_deleting_twice_fails_precondition(store) -> None:
    memory = remember(store, "once").memory
    store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r"))
    code, reason, _ = error_of(
        lambda: store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r"))
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "ALREADY_DELETED")


def test_recover_of_live_memory_is_not_deleted(store) -> None:
    memory = remember(store, "alive").memory
    code, reason, _ = error_of(
        lambda: store.RecoverMemory(S.RecoverMemoryRequest(id=memory.id, reason="r"))
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "NOT_DELETED")


def test_recover_version_conflict(store) -> None:
    memory = remember(store, "v").memory
    store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r"))
    code, reason, _ = error_of(
        lambda: store.RecoverMemory(S.RecoverMemoryRequest(id=memory.id, reason="r", if_version=1))
    )
    assert (code, reason) == (grpc.StatusCode.ABORTED, "VERSION_CONFLICT")


def test_recover_after_the_tombstone_window_is_retention_expired(
    make_config, start_store_server, db_path: Path
) -> None:
    _, store = start_store_server(make_config(**{"retention.tombstone_days": 0}))
    memory = remember(store, "expired").memory
    store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r"))
    before = table_counts(db_path)
    code, reason, _ = error_of(
        lambda: store.RecoverMemory(S.RecoverMemoryRequest(id=memory.id, reason="r"))
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "RETENTION_EXPIRED")
    assert table_counts(db_path) == before


def test_recover_refuses_to_duplicate_live_content(store) -> None:
    old = remember(store, "same words").memory
    store.DeleteMemory(S.DeleteMemoryRequest(id=old.id, reason="r"))
    new = remember(store, "Same words.")
    assert not new.deduplicated  # a tombstone does not absorb new content
    code, reason, _ = error_of(
        lambda: store.RecoverMemory(S.RecoverMemoryRequest(id=old.id, reason="r"))
    )
    assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "DUPLICATE_CONTENT")


def test_version_conflict_reports_the_current_version(store) -> None:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    memory = remember(store, "metadata").memory
    try:
        store.DeleteMemory(S.DeleteMemoryRequest(id=memory.id, reason="r", if_version=9))
    except grpc.RpcError as error:
        status = rpc_status.from_call(error)
        info = error_details_pb2.ErrorInfo()
        status.details[0].Unpack(info)
        assert info.metadata["current_version"] == "1"
    else:
        raise AssertionError("expected ABORTED")
