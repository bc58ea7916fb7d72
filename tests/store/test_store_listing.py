import time
from datetime import UTC, datetime

import grpc
from google.protobuf import timestamp_pb2

from engram.common.v1 import memory_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from store_helpers import remember

F = memory_pb2.MemoryFilter


def _list(store, **kwargs) -> list[str]:
    return [m.content for m in store.ListMemories(store_pb2.ListMemoriesRequest(**kwargs)).memories]


def _seed(store) -> None:
    remember(store, "Alice prefers tea", who="alice", tags=["drinks", "alice"], source_type="chat")
    remember(store, "We decided on Go", who="bob", tags=["tech"], source_type="meeting")
    remember(store, "critical: Never push to main", who="bob", tags=["tech", "rules"])
    remember(store, "The office is in Lisbon", who="alice", source_type="chat")


def test_lists_newest_first(store) -> None:
    _seed(store)
    assert _list(store) == [
        "The office is in Lisbon",
        "Never push to main",
        "We decided on Go",
        "Alice prefers tea",
    ]


def test_filters_combine(store) -> None:
    _seed(store)
    assert _list(store, filter=F(types=["preference", "decision"])) == [
        "We decided on Go",
        "Alice prefers tea",
    ]
    assert _list(store, filter=F(tags=["tech"])) == ["Never push to main", "We decided on Go"]
    assert _list(store, filter=F(tags=["tech", "rules"])) == ["Never push to main"]
    assert _list(store, filter=F(tags=["TECH"])) == ["Never push to main", "We decided on Go"]
    assert _list(store, filter=F(who="alice")) == ["The office is in Lisbon", "Alice prefers tea"]
    assert _list(store, filter=F(pinned=True)) == ["Never push to main"]
    assert len(_list(store, filter=F(pinned=False))) == 3
    assert _list(store, filter=F(source_type="chat", who="alice", tags=["drinks"])) == [
        "Alice prefers tea"
    ]


def test_since_and_until_bound_creation_time(store) -> None:
    remember(store, "old one")
    time.sleep(0.01)
    middle = timestamp_pb2.Timestamp()
    middle.FromDatetime(datetime.now(UTC))
    time.sleep(0.01)
    remember(store, "new one")
    assert _list(store, filter=F(since=middle)) == ["new one"]
    assert _list(store, filter=F(until=middle)) == ["old one"]


def test_pages_cover_everything_exactly_once(store) -> None:
    store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    items=[store_pb2.ImportItem(content=f"item {i}") for i in range(23)]
                )
            ]
        )
    )
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = store.ListMemories(store_pb2.ListMemoriesRequest(page_size=5, page_token=token))
        seen.extend(m.id for m in page.memories)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert pages == 5 and len(seen) == 23 == len(set(seen))


def test_page_token_is_bound_to_namespace_and_filter(store) -> None:
    for i in range(3):
        remember(store, f"note {i}", tags=["t"])
        remember(store, f"note {i}", namespace="other")
    token = store.ListMemories(
        store_pb2.ListMemoriesRequest(page_size=1, filter=F(tags=["t"]))
    ).next_page_token
    assert token
    for request in (
        store_pb2.ListMemoriesRequest(page_size=1, page_token=token),
        store_pb2.ListMemoriesRequest(
            page_size=1, page_token=token, namespace="other", filter=F(tags=["t"])
        ),
    ):
        code, _, fields = error_of(lambda r=request: store.ListMemories(r))
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["page_token"])


def test_deleted_memories_leave_listings(store) -> None:
    keep = remember(store, "keep me").memory
    gone = remember(store, "delete me").memory
    store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=gone.id, reason="test"))
    assert [m.id for m in store.ListMemories(store_pb2.ListMemoriesRequest()).memories] == [keep.id]


def test_default_page_size_is_fifty(store) -> None:
    store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    items=[store_pb2.ImportItem(content=f"n {i}") for i in range(60)]
                )
            ]
        )
    )
    page = store.ListMemories(store_pb2.ListMemoriesRequest())
    assert len(page.memories) == 50 and page.next_page_token


def _delete(store, memory_id: str, namespace: str = "") -> None:
    store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace=namespace, id=memory_id, reason="test")
    )


def test_deleted_lists_the_recoverable_tombstones_most_recently_deleted_first(store) -> None:
    live = remember(store, "still here").memory
    first = remember(store, "deleted first").memory
    second = remember(store, "deleted second").memory
    _delete(store, first.id)
    _delete(store, second.id)
    tombstones = store.ListMemories(store_pb2.ListMemoriesRequest(deleted=True)).memories
    assert [m.id for m in tombstones] == [second.id, first.id]
    assert all(m.deleted and m.HasField("delete_time") for m in tombstones)
    assert [m.id for m in store.ListMemories(store_pb2.ListMemoriesRequest()).memories] == [live.id]
    assert [
        m.id for m in store.ListMemories(store_pb2.ListMemoriesRequest(deleted=False)).memories
    ] == [live.id]


def test_deleted_lists_only_the_callers_namespace_and_never_purged_memories(store) -> None:
    mine = remember(store, "my tombstone").memory
    theirs = remember(store, "their tombstone", namespace="other").memory
    purged = remember(store, "purged for good").memory
    _delete(store, mine.id)
    _delete(store, theirs.id, namespace="other")
    store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            ids=[purged.id], mode=store_pb2.FORGET_MODE_EXECUTE, reason="gdpr", purge=True
        )
    )
    assert [
        m.id for m in store.ListMemories(store_pb2.ListMemoriesRequest(deleted=True)).memories
    ] == [mine.id]
    other = store.ListMemories(store_pb2.ListMemoriesRequest(namespace="other", deleted=True))
    assert [m.id for m in other.memories] == [theirs.id]


def test_deleted_listing_pages_with_a_token_of_its_own(store) -> None:
    ids = [remember(store, f"tombstone {i}").memory.id for i in range(7)]
    remember(store, "a live one")
    for memory_id in ids:
        _delete(store, memory_id)
    seen: list[str] = []
    token = ""
    while True:
        page = store.ListMemories(
            store_pb2.ListMemoriesRequest(deleted=True, page_size=3, page_token=token)
        )
        seen.extend(m.id for m in page.memories)
        token = page.next_page_token
        if not token:
            break
        # A tombstone listing's token does not page the live listing.
        code, _, fields = error_of(
            lambda t=token: store.ListMemories(store_pb2.ListMemoriesRequest(page_token=t))
        )
        assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["page_token"])
    assert seen == list(reversed(ids))


def test_deleted_leaves_out_tombstones_past_the_retention_window(
    make_config, start_store_server
) -> None:
    _, store = start_store_server(make_config(**{"retention.tombstone_days": 0}))
    gone = remember(store, "deleted long enough ago").memory
    _delete(store, gone.id)
    assert list(store.ListMemories(store_pb2.ListMemoriesRequest(deleted=True)).memories) == []
