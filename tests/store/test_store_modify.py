from pathlib import Path

import backend_db
from engram.store.v1 import store_pb2
from store_helpers import fts_ids, remember, rows, table_counts

P = store_pb2.MemoryPatch
S = store_pb2


def _modify(store, *patches, reason="fix", **kwargs):
    return store.ModifyMemories(
        S.ModifyMemoriesRequest(patches=list(patches), reason=reason, **kwargs)
    ).results


def _complete_jobs(db_path: Path) -> None:
    """Act as the pipeline would: finish every open job."""
    backend_db.execute(
        db_path, "UPDATE memory_jobs SET status = 'completed' WHERE status = 'pending'"
    )


def test_content_change_renormalises_bumps_version_and_requeues_embedding(
    store, db_path: Path
) -> None:
    memory = remember(store, "User prefers tabs").memory
    _complete_jobs(db_path)
    [result] = _modify(
        store, P(id=memory.id, content="  User prefers   spaces. ", if_version=1), actor="agent-7"
    )
    assert (result.status, result.current_version, result.new_version, result.content_changed) == (
        S.PATCH_STATUS_UPDATED,
        1,
        2,
        True,
    )
    updated = store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory
    assert updated.content == "User prefers spaces." and updated.version == 2
    assert updated.content_hash != memory.content_hash
    assert fts_ids(db_path, "spaces") == {memory.id} and fts_ids(db_path, "tabs") == set()
    jobs = rows(
        db_path,
        "SELECT job_type, status FROM memory_jobs WHERE memory_id = ? AND status = 'pending'",
        memory.id,
    )
    assert [tuple(j) for j in jobs] == [("embed", "pending")]
    history = store.ListMemoryHistory(S.ListMemoryHistoryRequest(memory_id=memory.id)).events
    assert history[-1].event_type == S.HISTORY_EVENT_TYPE_MODIFIED
    assert (history[-1].old_content, history[-1].new_content) == (
        "User prefers tabs",
        "User prefers spaces.",
    )
    assert (history[-1].actor, history[-1].reason) == ("agent-7", "fix")


def test_field_changes_without_content_change(store, db_path: Path) -> None:
    memory = remember(store, "Deploys happen on Tuesday", tags=["ops"]).memory
    [result] = _modify(
        store,
        P(
            id=memory.id,
            type="procedural",
            importance=0.4,
            tags=S.TagList(values=["A", "b"]),
            who="carol",
        ),
    )
    assert result.status == S.PATCH_STATUS_UPDATED and not result.content_changed
    updated = store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory
    assert (updated.type, updated.importance, list(updated.tags), updated.who) == (
        "procedural",
        0.4,
        ["a", "b"],
        "carol",
    )
    event = store.ListMemoryHistory(S.ListMemoryHistoryRequest(memory_id=memory.id)).events[-1]
    assert dict(event.metadata)["changes"]["type"] == "procedural"


def test_empty_tag_list_clears_tags_and_absent_list_keeps_them(store) -> None:
    memory = remember(store, "tagged", tags=["x"]).memory
    _modify(store, P(id=memory.id, who="someone"))
    assert list(store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory.tags) == ["x"]
    _modify(store, P(id=memory.id, tags=S.TagList()))
    assert list(store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory.tags) == []


def test_pinning_sets_full_importance(store) -> None:
    memory = remember(store, "pin later", importance=0.5).memory
    _modify(store, P(id=memory.id, pinned=True))
    updated = store.GetMemory(S.GetMemoryRequest(id=memory.id)).memory
    assert updated.pinned and updated.importance == 1.0


def test_version_conflict_writes_nothing_while_other_patches_apply(store, db_path: Path) -> None:
    a = remember(store, "alpha").memory
    b = remember(store, "beta").memory
    before = rows(db_path, "SELECT count(*) FROM memory_history")[0][0]
    results = _modify(
        store, P(id=a.id, content="alpha two", if_version=7), P(id=b.id, who="z", if_version=1)
    )
    assert (results[0].status, results[0].current_version, results[0].new_version) == (
        S.PATCH_STATUS_VERSION_CONFLICT,
        1,
        1,
    )
    assert results[1].status == S.PATCH_STATUS_UPDATED
    assert store.GetMemory(S.GetMemoryRequest(id=a.id)).memory.content == "alpha"
    assert rows(db_path, "SELECT count(*) FROM memory_history")[0][0] == before + 1


def test_content_colliding_with_another_memory_reports_its_id(store, db_path: Path) -> None:
    a = remember(store, "alpha").memory
    b = remember(store, "beta").memory
    before = table_counts(db_path)
    [result] = _modify(store, P(id=b.id, content="ALPHA."))
    assert (result.status, result.duplicate_memory_id) == (S.PATCH_STATUS_DUPLICATE_CONTENT, a.id)
    assert table_counts(db_path) == before


def test_case_only_change_keeps_hash_and_is_allowed(store) -> None:
    memory = remember(store, "alpha beta").memory
    [result] = _modify(store, P(id=memory.id, content="Alpha Beta"))
    assert result.status == S.PATCH_STATUS_UPDATED and result.content_changed


def test_unchanged_patch_does_not_bump_version(store, db_path: Path) -> None:
    memory = remember(store, "same", who="w").memory
    before = table_counts(db_path)
    [result] = _modify(store, P(id=memory.id, who="w", content="same"))
    assert (result.status, result.new_version) == (S.PATCH_STATUS_UNCHANGED, 1)
    assert table_counts(db_path) == before


def test_missing_and_deleted_targets_are_not_found(store) -> None:
    gone = remember(store, "gone").memory
    store.DeleteMemory(S.DeleteMemoryRequest(id=gone.id, reason="r"))
    results = _modify(store, P(id="nope", who="x"), P(id=gone.id, who="x"))
    assert [r.status for r in results] == [S.PATCH_STATUS_NOT_FOUND] * 2


def test_patch_reason_overrides_request_reason(store) -> None:
    memory = remember(store, "reasons").memory
    _modify(store, P(id=memory.id, who="a", reason="patch reason"), reason="")
    _modify(store, P(id=memory.id, who="b"), reason="request reason")
    events = store.ListMemoryHistory(S.ListMemoryHistoryRequest(memory_id=memory.id)).events
    assert [e.reason for e in events[1:]] == ["patch reason", "request reason"]


def test_one_invalid_patch_fails_the_whole_batch(store, db_path: Path) -> None:
    import grpc

    from grpc_helpers import error_of

    memory = remember(store, "valid target").memory
    before = table_counts(db_path)
    code, _, fields = error_of(
        lambda: _modify(store, P(id=memory.id, who="ok"), P(id=memory.id, type="bogus"))
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["patches[1].type"])
    assert table_counts(db_path) == before


def test_two_hundred_patches_are_accepted(store) -> None:
    memory = remember(store, "busy").memory
    results = _modify(store, *[P(id=memory.id, who=f"w{i}") for i in range(200)])
    assert len(results) == 200 and results[-1].new_version == 201
