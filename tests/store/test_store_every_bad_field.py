"""INVALID_ARGUMENT names every bad field of a request in one BadRequest, not
only the first one checked, and writes nothing."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from engram.common.v1 import memory_pb2
from engram.store.internal.v1 import access_pb2, access_pb2_grpc
from engram.store.v1 import store_pb2 as S
from grpc_helpers import error_of
from store_helpers import remember, table_counts

F = memory_pb2.MemoryFilter
BAD_TIME = timestamp_pb2.Timestamp(seconds=-(10**12))


def test_remember_names_all_three_bad_fields(store, db_path: Path) -> None:
    remember(store, "a memory so the tables exist")
    before = table_counts(db_path)
    code, reason, fields = error_of(
        lambda: store.Remember(S.RememberRequest(content="", importance=2, tags=[""]))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert sorted(fields) == ["content", "importance", "tags[0]"]
    assert table_counts(db_path) == before


def test_remember_names_the_namespace_and_event_time_with_the_rest(store) -> None:
    _, _, fields = error_of(
        lambda: store.Remember(
            S.RememberRequest(
                namespace="bad ns",
                content="ok",
                type="gossip",
                tags=["", "x" * 65],
                who="w" * 257,
                event_time=BAD_TIME,
            )
        )
    )
    assert sorted(fields) == ["event_time", "namespace", "tags[0]", "tags[1]", "type", "who"]


def test_modify_names_every_bad_field_of_every_patch(store, db_path: Path) -> None:
    memory_id = remember(store, "target memory").memory.id
    before = table_counts(db_path)
    patches = [
        S.MemoryPatch(id=memory_id, importance=3, type="gossip", reason="r"),
        S.MemoryPatch(id=memory_id, who="fine", reason="r"),  # a good one among them
        S.MemoryPatch(id="", content="  ", reason="r"),
        S.MemoryPatch(id=memory_id),  # nothing to change, and no reason
    ]
    code, _, fields = error_of(
        lambda: store.ModifyMemories(S.ModifyMemoriesRequest(patches=patches, actor="a" * 257))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(fields) == [
        "actor",
        "patches[0].importance",
        "patches[0].type",
        "patches[2].content",
        "patches[2].id",
        "patches[3]",
        "patches[3].reason",
    ]
    assert table_counts(db_path) == before


def test_hundreds_of_bad_fields_still_make_one_precise_error(store) -> None:
    """The violations are capped so that the error fits in the reply's metadata;
    the message says how many were left out."""
    patches = [S.MemoryPatch(id="", importance=3, type="x" * 500) for _ in range(200)]
    with pytest.raises(grpc.RpcError) as caught:
        store.ModifyMemories(S.ModifyMemoriesRequest(patches=patches))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "more)" in caught.value.details()
    _, _, fields = error_of(lambda: store.ModifyMemories(S.ModifyMemoriesRequest(patches=patches)))
    assert fields[:3] == ["patches[0].id", "patches[0].reason", "patches[0].type"]


def test_an_import_item_error_names_every_bad_field(store) -> None:
    response = store.ImportMemories(
        iter([S.ImportMemoriesRequest(items=[S.ImportItem(content="", importance=2, tags=[""])])])
    )
    [result] = response.results
    assert result.status == S.IMPORT_STATUS_FAILED
    for field in ("items[0].content", "items[0].importance", "items[0].tags[0]"):
        assert field in result.error


CASES: list[tuple[str, Callable[[Any], Any], list[str]]] = [
    (
        "list",
        lambda s: s.ListMemories(
            S.ListMemoriesRequest(
                namespace="bad ns",
                page_size=501,
                page_token="%%%",
                filter=F(types=["nope"], importance_min=2, since=BAD_TIME),
            )
        ),
        [
            "filter.importance_min",
            "filter.since",
            "filter.types[0]",
            "namespace",
            "page_size",
            "page_token",
        ],
    ),
    ("get", lambda s: s.GetMemory(S.GetMemoryRequest(namespace="bad ns")), ["id", "namespace"]),
    (
        "delete",
        lambda s: s.DeleteMemory(S.DeleteMemoryRequest(namespace="bad ns", actor="a" * 257)),
        ["actor", "id", "namespace", "reason"],
    ),
    (
        "recover",
        lambda s: s.RecoverMemory(S.RecoverMemoryRequest(id="x" * 129)),
        ["id", "reason"],
    ),
    (
        "history",
        lambda s: s.ListMemoryHistory(
            S.ListMemoryHistoryRequest(namespace="bad ns", page_size=-1, page_token="%%%")
        ),
        ["memory_id", "namespace", "page_size", "page_token"],
    ),
    (
        "forget",
        lambda s: s.ForgetMemories(
            S.ForgetMemoriesRequest(
                mode=S.FORGET_MODE_EXECUTE,
                ids=["", "x" * 129],
                query="?! ...",
                limit=201,
                filter=F(types=["nope"]),
            )
        ),
        ["filter.types[0]", "ids[0]", "ids[1]", "limit", "query", "reason"],
    ),
]


@pytest.mark.parametrize(("name", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_every_rpc_names_all_its_bad_fields(
    store, db_path: Path, name: str, call: Callable[[Any], Any], expected: list[str]
) -> None:
    remember(store, "a memory so the tables exist")
    before = table_counts(db_path)
    code, reason, fields = error_of(lambda: call(store))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert sorted(fields) == expected
    assert table_counts(db_path) == before


def test_record_access_names_all_its_bad_fields(
    make_config: Callable[..., Any], start_store_server: Callable[..., Any], db_path: Path
) -> None:
    """RecordAccess is internal (the search service's): on the internal listener."""
    server, store = start_store_server(make_config())
    remember(store, "a memory so the tables exist")
    before = table_counts(db_path)
    with grpc.insecure_channel(f"127.0.0.1:{server.app.internal_port}") as channel:
        access = access_pb2_grpc.AccessServiceStub(channel)
        code, reason, fields = error_of(
            lambda: access.RecordAccess(
                access_pb2.RecordAccessRequest(namespace="bad ns", memory_ids=["x" * 129])
            )
        )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert sorted(fields) == ["memory_ids[0]", "namespace"]
    assert table_counts(db_path) == before
