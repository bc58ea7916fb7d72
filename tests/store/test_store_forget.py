from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.common.v1 import memory_pb2
from engram.store.v1 import store_pb2 as S
from grpc_helpers import error_of
from store_helpers import remember, table_counts

EXECUTE = S.FORGET_MODE_EXECUTE


def _import(store, contents, namespace="", **item):
    response = store.ImportMemories(
        iter(
            [
                S.ImportMemoriesRequest(
                    namespace=namespace, items=[S.ImportItem(content=c, **item) for c in contents]
                )
            ]
        )
    )
    return [r.memory_id for r in response.results]


def test_preview_returns_candidates_and_token_and_writes_nothing(store, db_path: Path) -> None:
    _import(store, ["old project notes one", "old project notes two", "fresh idea"])
    before = table_counts(db_path)
    preview = store.ForgetMemories(S.ForgetMemoriesRequest(query="old project"))
    assert sorted(c.content for c in preview.candidates) == [
        "old project notes one",
        "old project notes two",
    ]
    assert preview.confirm_token and preview.deleted_count == 0
    assert table_counts(db_path) == before


def test_a_multi_word_query_matches_any_term_most_terms_first(store) -> None:
    """As Recall's keyword channel reads a query: any term, stop words dropped."""
    _import(store, ["project alpha notes", "project beta", "alpha release", "gamma ray"])
    preview = store.ForgetMemories(S.ForgetMemoriesRequest(query="the project alpha"))
    contents = [c.content for c in preview.candidates]
    assert sorted(contents) == ["alpha release", "project alpha notes", "project beta"]
    assert contents[0] == "project alpha notes"  # both terms, though not the newest
    assert preview.candidate_count == 3


def test_a_query_preview_returns_the_candidates_and_their_count(store) -> None:
    _import(store, [f"stale draft {i}" for i in range(30)] + ["unrelated"])
    preview = store.ForgetMemories(S.ForgetMemoriesRequest(query="stale"))
    assert preview.candidate_count == 30 == len(preview.candidates)
    assert all(c.id and c.content.startswith("stale draft") for c in preview.candidates)
    assert preview.confirm_token and not preview.more_matching


def _error_metadata(call) -> dict[str, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    status = rpc_status.from_call(caught.value)
    assert status is not None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return dict(info.metadata)
    raise AssertionError("no ErrorInfo")


def test_the_confirm_token_comes_from_a_preview_only(store, db_path: Path) -> None:
    ids = _import(store, [f"bulk note {i}" for i in range(30)])
    metadata = _error_metadata(
        lambda: store.ForgetMemories(S.ForgetMemoriesRequest(ids=ids, mode=EXECUTE, reason="r"))
    )
    assert metadata == {"candidate_count": "30"}, "the error must not hand out the token"
    small = store.ForgetMemories(S.ForgetMemoriesRequest(ids=ids[:2], mode=EXECUTE, reason="r"))
    assert small.deleted_count == 2 and small.confirm_token == ""


def test_small_execute_needs_no_token(store) -> None:
    ids = _import(store, [f"temp {i}" for i in range(25)])
    result = store.ForgetMemories(S.ForgetMemoriesRequest(ids=ids, mode=EXECUTE, reason="cleanup"))
    assert result.deleted_count == 25 and not result.hard_deleted
    assert all(store.GetMemory(S.GetMemoryRequest(id=i)).memory.deleted for i in ids)
    events = store.ListMemoryHistory(S.ListMemoryHistoryRequest(memory_id=ids[0])).events
    assert events[-1].event_type == S.HISTORY_EVENT_TYPE_DELETED and events[-1].reason == "cleanup"


def test_large_execute_requires_the_preview_token(store, db_path: Path) -> None:
    _import(store, [f"bulk note {i}" for i in range(30)], tags=["bulk"])
    selector = {"filter": memory_pb2.MemoryFilter(tags=["bulk"])}
    before = table_counts(db_path)
    code, reason, _ = error_of(
        lambda: store.ForgetMemories(S.ForgetMemoriesRequest(mode=EXECUTE, reason="r", **selector))
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRM_TOKEN_REQUIRED")
    assert table_counts(db_path) == before
    token = store.ForgetMemories(S.ForgetMemoriesRequest(**selector)).confirm_token
    result = store.ForgetMemories(
        S.ForgetMemoriesRequest(mode=EXECUTE, reason="r", confirm_token=token, **selector)
    )
    assert result.deleted_count == 30
    assert store.ListMemories(S.ListMemoriesRequest()).memories == []


def test_token_is_bound_to_exactly_the_candidate_set(store, db_path: Path) -> None:
    _import(store, [f"bulk note {i}" for i in range(30)], tags=["bulk"])
    selector = {"filter": memory_pb2.MemoryFilter(tags=["bulk"])}
    token = store.ForgetMemories(S.ForgetMemoriesRequest(**selector)).confirm_token
    remember(store, "bulk note late arrival", tags=["bulk"])  # the set changes after the preview
    before = table_counts(db_path)
    code, reason, _ = error_of(
        lambda: store.ForgetMemories(
            S.ForgetMemoriesRequest(mode=EXECUTE, reason="r", confirm_token=token, **selector)
        )
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "CONFIRM_TOKEN_MISMATCH")
    assert table_counts(db_path) == before


def test_token_from_another_selection_is_refused(store) -> None:
    ids = _import(store, ["a one", "b two"])
    token = store.ForgetMemories(S.ForgetMemoriesRequest(ids=ids[:1])).confirm_token
    _, reason, _ = error_of(
        lambda: store.ForgetMemories(
            S.ForgetMemoriesRequest(ids=ids[1:], mode=EXECUTE, reason="r", confirm_token=token)
        )
    )
    assert reason == "CONFIRM_TOKEN_MISMATCH"


def test_candidates_are_capped_by_limit(store) -> None:
    _import(store, [f"many {i}" for i in range(250)])
    capped = store.ForgetMemories(S.ForgetMemoriesRequest(query="many"))
    assert len(capped.candidates) == 200 == capped.candidate_count and capped.more_matching
    ten = store.ForgetMemories(S.ForgetMemoriesRequest(query="many", limit=10))
    assert len(ten.candidates) == 10 and ten.more_matching


def test_a_token_from_a_preview_of_another_query_is_refused(store) -> None:
    """The token binds the request too: another query that selects the same
    memories today is another request."""
    _import(store, [f"bulk item alpha {i}" for i in range(30)])
    token = store.ForgetMemories(S.ForgetMemoriesRequest(query="bulk")).confirm_token
    _, reason, _ = error_of(
        lambda: store.ForgetMemories(
            S.ForgetMemoriesRequest(query="alpha", mode=EXECUTE, reason="r", confirm_token=token)
        )
    )
    assert reason == "CONFIRM_TOKEN_MISMATCH"


def test_pinned_memories_are_candidates_only_with_include_pinned(store) -> None:
    remember(store, "critical: secret rotation policy")
    remember(store, "rotation schedule draft")
    plain = store.ForgetMemories(S.ForgetMemoriesRequest(query="rotation"))
    assert [c.content for c in plain.candidates] == ["rotation schedule draft"]
    pinned = store.ForgetMemories(S.ForgetMemoriesRequest(query="rotation", include_pinned=True))
    assert len(pinned.candidates) == 2 and any(c.pinned for c in pinned.candidates)


def test_include_pinned_soft_deletes_pinned_memories_recoverably(store) -> None:
    """Including pinned memories no longer implies deleting for good."""
    pinned_id = remember(store, "critical: the vault code rotates monthly").memory.id
    result = store.ForgetMemories(
        S.ForgetMemoriesRequest(
            ids=[pinned_id], mode=EXECUTE, reason="cleanup", include_pinned=True
        )
    )
    assert result.deleted_count == 1 and not result.hard_deleted
    tombstone = store.GetMemory(S.GetMemoryRequest(id=pinned_id)).memory
    assert tombstone.deleted and tombstone.pinned
    recovered = store.RecoverMemory(S.RecoverMemoryRequest(id=pinned_id, reason="oops"))
    assert not recovered.memory.deleted


def test_purge_without_include_pinned_leaves_pinned_memories_alone(store, db_path: Path) -> None:
    pinned_id = remember(store, "critical: keep this purge target").memory.id
    plain_id = remember(store, "drop this purge target").memory.id
    result = store.ForgetMemories(
        S.ForgetMemoriesRequest(query="purge target", mode=EXECUTE, reason="gdpr", purge=True)
    )
    assert [c.id for c in result.candidates] == [plain_id] and result.hard_deleted
    assert not store.GetMemory(S.GetMemoryRequest(id=pinned_id)).memory.deleted
    code, _, _ = error_of(lambda: store.GetMemory(S.GetMemoryRequest(id=plain_id)))
    assert code == grpc.StatusCode.NOT_FOUND


def test_a_preview_token_does_not_confirm_an_execute_with_other_flags(store) -> None:
    ids = _import(store, [f"flagged bulk item {i}" for i in range(30)])
    preview = store.ForgetMemories(S.ForgetMemoriesRequest(ids=ids))
    code, reason, _ = error_of(
        lambda: store.ForgetMemories(
            S.ForgetMemoriesRequest(
                ids=ids,
                mode=EXECUTE,
                reason="r",
                purge=True,
                confirm_token=preview.confirm_token,
            )
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert reason == "CONFIRM_TOKEN_MISMATCH"


def test_deprecated_force_still_means_include_pinned_and_purge(store) -> None:
    pinned_id = remember(store, "critical: legacy force target").memory.id
    result = store.ForgetMemories(
        S.ForgetMemoriesRequest(ids=[pinned_id], mode=EXECUTE, reason="legacy", force=True)
    )
    assert result.deleted_count == 1 and result.hard_deleted


def test_purge_hard_deletes_but_history_remains(store, db_path: Path) -> None:
    [memory_id] = _import(store, ["erase me completely"])
    result = store.ForgetMemories(
        S.ForgetMemoriesRequest(ids=[memory_id], mode=EXECUTE, reason="gdpr", purge=True)
    )
    assert result.deleted_count == 1 and result.hard_deleted
    code, _, _ = error_of(lambda: store.GetMemory(S.GetMemoryRequest(id=memory_id)))
    assert code == grpc.StatusCode.NOT_FOUND
    counts = table_counts(db_path)
    assert (counts["memories"], counts["memories_fts"], counts["memory_jobs"]) == (0, 0, 0)
    events = store.ListMemoryHistory(S.ListMemoryHistoryRequest(memory_id=memory_id)).events
    assert (
        events[-1].event_type == S.HISTORY_EVENT_TYPE_DELETED
        and dict(events[-1].metadata)["hard"] is True
    )


def test_forget_never_reaches_other_namespaces(store) -> None:
    [other] = _import(store, ["shared words here"], namespace="other")
    _import(store, ["shared words here"])
    result = store.ForgetMemories(
        S.ForgetMemoriesRequest(query="shared words", mode=EXECUTE, reason="r")
    )
    assert result.deleted_count == 1
    assert not store.GetMemory(S.GetMemoryRequest(namespace="other", id=other)).memory.deleted
    by_id = store.ForgetMemories(S.ForgetMemoriesRequest(ids=[other]))
    assert list(by_id.candidates) == []


def test_past_the_limit_the_reply_counts_every_match(store) -> None:
    """matching_count: how many match in all, so a caller can say how many are left."""
    ids = _import(store, [f"expired coupon {i}" for i in range(230)] + ["a keeper"])
    preview = store.ForgetMemories(S.ForgetMemoriesRequest(query="coupon"))
    assert (preview.candidate_count, preview.matching_count) == (200, 230)
    assert preview.more_matching
    done = store.ForgetMemories(
        S.ForgetMemoriesRequest(
            query="coupon", mode=EXECUTE, reason="r", confirm_token=preview.confirm_token
        )
    )
    assert (done.deleted_count, done.matching_count) == (200, 230)
    rest = store.ForgetMemories(S.ForgetMemoriesRequest(query="coupon"))
    assert (rest.candidate_count, rest.matching_count, rest.more_matching) == (30, 30, False)
    keeper = store.ForgetMemories(S.ForgetMemoriesRequest(ids=ids[-1:]))
    assert (keeper.candidate_count, keeper.matching_count) == (1, 1)
