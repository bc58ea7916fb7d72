"""Categories set by callers (Remember, ImportMemories, ModifyMemories) and the valid
time an import carries (issue 18 categories, issue 17's import gap), through the
public gRPC API of a real store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from engram.common.v1 import memory_pb2
from engram.common.v1 import pii_policy_pb2 as pii_pb
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from store_helpers import remember, table_counts

Item = store_pb2.ImportItem


def _ts(text: str) -> Timestamp:
    moment = Timestamp()
    moment.FromJsonString(text)
    return moment


def _import(store: Any, *items: store_pb2.ImportItem, namespace: str = "") -> Any:
    return store.ImportMemories(
        iter([store_pb2.ImportMemoriesRequest(namespace=namespace, items=list(items))])
    )


def _listed(store: Any, **request: Any) -> list[str]:
    reply = store.ListMemories(store_pb2.ListMemoriesRequest(page_size=100, **request))
    return sorted(m.content for m in reply.memories)


def test_remember_stores_normalised_categories_returns_and_filters_them(store: Any) -> None:
    memory = remember(
        store, "the deploy runs on fridays", categories=[" Work ", "work", "Team Rituals"]
    ).memory
    assert list(memory.categories) == ["work", "team rituals"]
    got = store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory
    assert list(got.categories) == ["work", "team rituals"]
    remember(store, "lunch is at noon", categories=["food"])
    remember(store, "no category here")
    assert _listed(store, filter=memory_pb2.MemoryFilter(categories=["WORK"])) == [
        "the deploy runs on fridays"
    ]
    assert _listed(store, filter=memory_pb2.MemoryFilter(categories=["work", "food"])) == []
    # a duplicate keeps what the existing memory has
    again = remember(store, "The deploy runs on Fridays", categories=["other"])
    assert again.deduplicated and list(again.memory.categories) == ["work", "team rituals"]


def test_bad_categories_are_named_and_nothing_is_written(store: Any, db_path: Path) -> None:
    before = table_counts(db_path)
    code, _, fields = error_of(lambda: remember(store, "x", categories=[f"c{n}" for n in range(9)]))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["categories"])
    code, _, fields = error_of(lambda: remember(store, "x", categories=["ok", "", "a" * 65]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert sorted(fields) == ["categories[1]", "categories[2]"]
    # 8 distinct after de-duplication is within the cap
    ok = remember(store, "y", categories=[*(f"c{n}" for n in range(8)), "C0"]).memory
    assert len(ok.categories) == 8
    reply = _import(store, Item(content="z", categories=["a" * 65]))
    assert reply.results[0].status == store_pb2.IMPORT_STATUS_FAILED
    assert "items[0].categories[0]" in reply.results[0].error
    assert table_counts(db_path)["memories"] == before["memories"] + 1


def test_categories_pass_the_pii_gate_like_tags(store: Any) -> None:
    redacted = remember(
        store,
        "the plan",
        categories=["AKIAIOSFODNN7EXAMPLE", "planning"],
        pii_policy=pii_pb.PII_POLICY_REDACT,
    ).memory
    assert list(redacted.categories) == ["[secret_1]", "planning"]
    code, reason, fields = error_of(
        lambda: remember(
            store, "another plan", categories=["536-22-1234"], pii_policy=pii_pb.PII_POLICY_REJECT
        )
    )
    assert (code, reason, fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "PII_DETECTED",
        ["categories[0]"],
    )


def test_modify_sets_and_clears_categories(store: Any) -> None:
    memory = remember(store, "standup at nine", categories=["work"]).memory

    def patch(**fields: Any) -> Any:
        return store.ModifyMemories(
            store_pb2.ModifyMemoriesRequest(
                patches=[store_pb2.MemoryPatch(id=memory.id, **fields)], reason="r"
            )
        ).results[0]

    result = patch(categories=store_pb2.CategoryList(values=["Team", "ritual"]))
    assert result.status == store_pb2.PATCH_STATUS_UPDATED
    got = store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory
    assert list(got.categories) == ["team", "ritual"]
    assert patch(categories=store_pb2.CategoryList(values=["team", "RITUAL"])).status == (
        store_pb2.PATCH_STATUS_UNCHANGED
    )
    patch(categories=store_pb2.CategoryList())
    assert list(store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory.categories) == []
    code, _, fields = error_of(
        lambda: patch(categories=store_pb2.CategoryList(values=[str(n) for n in range(9)]))
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["patches[0].categories"])


def test_import_keeps_valid_time_and_categories(store: Any) -> None:
    reply = _import(
        store,
        Item(
            content="Ana lives in Lisbon",
            categories=["home"],
            valid_from=_ts("2020-01-01T00:00:00Z"),
            valid_until=_ts("2022-06-01T00:00:00.000000001Z"),
        ),
        Item(content="Ana lives in Berlin", valid_from=_ts("2022-06-01T00:00:00.000000001Z")),
        Item(content="the trip ends", valid_until=_ts("9999-01-01T00:00:00Z")),
    )
    assert [r.status for r in reply.results] == [store_pb2.IMPORT_STATUS_CREATED] * 3
    lisbon = store.GetMemory(store_pb2.GetMemoryRequest(id=reply.results[0].memory_id)).memory
    assert lisbon.valid_from.ToJsonString() == "2020-01-01T00:00:00Z"
    assert lisbon.valid_until.ToJsonString() == "2022-06-01T00:00:00.000000001Z"
    assert list(lisbon.categories) == ["home"]
    berlin = store.GetMemory(store_pb2.GetMemoryRequest(id=reply.results[1].memory_id)).memory
    assert berlin.valid_from.ToJsonString() == "2022-06-01T00:00:00.000000001Z"
    assert not berlin.HasField("valid_until")
    # what is valid now: Berlin and the open-ended trip; Lisbon is over
    assert _listed(store) == ["Ana lives in Berlin", "the trip ends"]
    # the import was recorded now, so reads as of now see validity at instants in the past
    assert _listed(store, as_of=_ts("9000-01-01T00:00:00Z")) == [
        "Ana lives in Berlin",
        "the trip ends",
    ]


def test_import_valid_until_must_follow_valid_from(store: Any, db_path: Path) -> None:
    before = table_counts(db_path)
    reply = _import(
        store,
        Item(
            content="a",
            valid_from=_ts("2021-01-01T00:00:00Z"),
            valid_until=_ts("2021-01-01T00:00:00Z"),
        ),
        Item(
            content="b",
            event_time=_ts("2021-01-02T00:00:00Z"),
            valid_until=_ts("2021-01-01T00:00:00Z"),
        ),
        Item(content="c", valid_until=_ts("2001-01-01T00:00:00Z")),  # before now (the default)
        Item(
            content="d",
            valid_from=_ts("2021-01-01T00:00:00Z"),
            valid_until=_ts("2021-01-01T00:00:01Z"),
        ),
    )
    statuses = [r.status for r in reply.results]
    assert statuses == [store_pb2.IMPORT_STATUS_FAILED] * 3 + [store_pb2.IMPORT_STATUS_CREATED]
    for index in range(3):
        assert f"items[{index}].valid_until" in reply.results[index].error
    assert table_counts(db_path)["memories"] == before["memories"] + 1
