"""Bad input: a precise status naming the field, and nothing written."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import memory_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from store_helpers import remember, table_counts

R = store_pb2.RememberRequest

REMEMBER_CASES: list[tuple[str, Any, str]] = [
    ("empty content", R(content=""), "content"),
    ("whitespace content", R(content=" \n\t "), "content"),
    ("only a prefix", R(content="critical: [a]:   "), "content"),
    ("content over 64 KiB", R(content="x" * (64 * 1024 + 1)), "content"),
    ("multibyte content over 64 KiB", R(content="é" * (32 * 1024 + 1)), "content"),
    ("33 tags", R(content="ok", tags=[f"t{i}" for i in range(33)]), "tags"),
    ("tag over 64 chars", R(content="ok", tags=["x" * 65]), "tags[0]"),
    ("empty tag", R(content="ok", tags=["fine", "  "]), "tags[1]"),
    ("importance above 1", R(content="ok", importance=1.01), "importance"),
    ("importance below 0", R(content="ok", importance=-0.1), "importance"),
    ("importance NaN", R(content="ok", importance=float("nan")), "importance"),
    ("unknown type", R(content="ok", type="gossip"), "type"),
    ("namespace with space", R(content="ok", namespace="a b"), "namespace"),
    ("namespace too long", R(content="ok", namespace="n" * 129), "namespace"),
    ("namespace with slash", R(content="ok", namespace="a/b"), "namespace"),
    ("who too long", R(content="ok", who="w" * 257), "who"),
    ("source_id too long", R(content="ok", source_id="s" * 513), "source_id"),
    ("source_id of 1 MiB", R(content="ok", source_id="s" * (1 << 20)), "source_id"),
]


@pytest.mark.parametrize(
    ("name", "request_", "field"), REMEMBER_CASES, ids=[c[0] for c in REMEMBER_CASES]
)
def test_remember_rejects_bad_input(
    store, db_path: Path, name: str, request_: Any, field: str
) -> None:
    remember(store, "a memory so the tables exist")
    before = table_counts(db_path)
    code, reason, fields = error_of(lambda: store.Remember(request_))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert reason == "INVALID_ARGUMENT"
    assert fields == [field]
    assert table_counts(db_path) == before


def test_content_of_exactly_64_kib_is_accepted(store) -> None:
    assert len(remember(store, "x" * (64 * 1024)).memory.content) == 64 * 1024


def test_32_tags_are_accepted(store) -> None:
    assert len(remember(store, "ok", tags=[f"t{i}" for i in range(32)]).memory.tags) == 32


def _memory_id(store) -> str:
    return remember(store, "target memory").memory.id


OTHER_CASES: list[tuple[str, Callable[[Any, str], Any], str]] = [
    (
        "list page size over 500",
        lambda s, _: s.ListMemories(store_pb2.ListMemoriesRequest(page_size=501)),
        "page_size",
    ),
    (
        "list negative page size",
        lambda s, _: s.ListMemories(store_pb2.ListMemoriesRequest(page_size=-1)),
        "page_size",
    ),
    (
        "list malformed token",
        lambda s, _: s.ListMemories(store_pb2.ListMemoriesRequest(page_token="%%%")),
        "page_token",
    ),
    (
        "list garbage base64 token",
        lambda s, _: s.ListMemories(store_pb2.ListMemoriesRequest(page_token="bm90IGpzb24")),
        "page_token",
    ),
    (
        "list unknown filter type",
        lambda s, _: s.ListMemories(
            store_pb2.ListMemoriesRequest(filter=memory_pb2.MemoryFilter(types=["nope"]))
        ),
        "filter.types[0]",
    ),
    ("get empty id", lambda s, _: s.GetMemory(store_pb2.GetMemoryRequest(id="")), "id"),
    (
        "get bad namespace",
        lambda s, i: s.GetMemory(store_pb2.GetMemoryRequest(id=i, namespace="bad ns")),
        "namespace",
    ),
    (
        "delete without reason",
        lambda s, i: s.DeleteMemory(store_pb2.DeleteMemoryRequest(id=i)),
        "reason",
    ),
    (
        "recover without reason",
        lambda s, i: s.RecoverMemory(store_pb2.RecoverMemoryRequest(id=i)),
        "reason",
    ),
    (
        "modify with no patches",
        lambda s, _: s.ModifyMemories(store_pb2.ModifyMemoriesRequest(reason="r")),
        "patches",
    ),
    (
        "modify over 200 patches",
        lambda s, i: s.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                reason="r", patches=[store_pb2.MemoryPatch(id=i, who="x")] * 201
            )
        ),
        "patches",
    ),
    (
        "modify missing reason",
        lambda s, i: s.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(patches=[store_pb2.MemoryPatch(id=i, who="x")])
        ),
        "patches[0].reason",
    ),
    (
        "modify bad importance",
        lambda s, i: s.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                reason="r", patches=[store_pb2.MemoryPatch(id=i, importance=3)]
            )
        ),
        "patches[0].importance",
    ),
    (
        "modify empty content",
        lambda s, i: s.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                reason="r", patches=[store_pb2.MemoryPatch(id=i, content="  ")]
            )
        ),
        "patches[0].content",
    ),
    (
        "modify nothing to change",
        lambda s, i: s.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(reason="r", patches=[store_pb2.MemoryPatch(id=i)])
        ),
        "patches[0]",
    ),
    (
        "forget over 200 ids",
        lambda s, _: s.ForgetMemories(
            store_pb2.ForgetMemoriesRequest(ids=[f"id{i}" for i in range(201)])
        ),
        "ids",
    ),
    (
        "forget limit over 200",
        lambda s, _: s.ForgetMemories(store_pb2.ForgetMemoriesRequest(query="x", limit=201)),
        "limit",
    ),
    (
        "forget with no selector",
        lambda s, _: s.ForgetMemories(store_pb2.ForgetMemoriesRequest()),
        "ids",
    ),
    (
        "forget execute without reason",
        lambda s, i: s.ForgetMemories(
            store_pb2.ForgetMemoriesRequest(ids=[i], mode=store_pb2.FORGET_MODE_EXECUTE)
        ),
        "reason",
    ),
    (
        "forget since after until",
        lambda s, _: s.ForgetMemories(
            store_pb2.ForgetMemoriesRequest(
                filter=memory_pb2.MemoryFilter(
                    since={"seconds": 2_000_000_000}, until={"seconds": 1_000_000_000}
                )
            )
        ),
        "filter.since",
    ),
    (
        "history empty id",
        lambda s, _: s.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest()),
        "memory_id",
    ),
    (
        "history page size over 500",
        lambda s, i: s.ListMemoryHistory(
            store_pb2.ListMemoryHistoryRequest(memory_id=i, page_size=501)
        ),
        "page_size",
    ),
]


@pytest.mark.parametrize(("name", "call", "field"), OTHER_CASES, ids=[c[0] for c in OTHER_CASES])
def test_other_rpcs_reject_bad_input(
    store, db_path: Path, name: str, call: Any, field: str
) -> None:
    memory_id = _memory_id(store)
    before = table_counts(db_path)
    code, reason, fields = error_of(lambda: call(store, memory_id))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert fields == [field]
    assert table_counts(db_path) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.GetMemory(store_pb2.GetMemoryRequest(id="no-such-id")),
        lambda s: s.DeleteMemory(store_pb2.DeleteMemoryRequest(id="no-such-id", reason="r")),
        lambda s: s.RecoverMemory(store_pb2.RecoverMemoryRequest(id="no-such-id", reason="r")),
        lambda s: s.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest(memory_id="no-such-id")),
    ],
    ids=["get", "delete", "recover", "history"],
)
def test_unknown_ids_are_not_found(store, call: Any) -> None:
    code, reason, _ = error_of(lambda: call(store))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
