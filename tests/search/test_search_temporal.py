"""Bi-temporal reads (issue 17) through the public gRPC API: ListMemories, Recall
and AssembleContext return what is valid now by default, and with `as_of` what
was valid at that instant as known at that instant.

Every instant here comes from the server (create_time, valid_from): nothing
waits on the clock, and "just before" is one nanosecond earlier."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import Stack, timestamp, vec

QUERY = "where does Ana live"


@pytest.fixture
def stack(recall_stack: Callable[..., Stack]) -> Stack:
    return recall_stack({"providers.embedding.kind": "none"})


def shifted(ts: timestamp_pb2.Timestamp, nanos: int) -> timestamp_pb2.Timestamp:
    total = ts.seconds * 10**9 + ts.nanos + nanos
    return timestamp_pb2.Timestamp(seconds=total // 10**9, nanos=total % 10**9)


def supersede(
    stack: Stack, old_id: str, content: str, valid_from: Any = None, **fields: Any
) -> store_pb2.PatchResult:
    patch = store_pb2.MemoryPatch(id=old_id, content=content, supersede=True, **fields)
    if valid_from is not None:
        patch.valid_from.CopyFrom(valid_from)
    request = store_pb2.ModifyMemoriesRequest(patches=[patch], reason="she moved")
    return stack.store.ModifyMemories(request).results[0]


def get(stack: Stack, memory_id: str) -> Any:
    return stack.store.GetMemory(store_pb2.GetMemoryRequest(id=memory_id)).memory


def listed(stack: Stack, as_of: timestamp_pb2.Timestamp | None = None) -> list[str]:
    request = store_pb2.ListMemoriesRequest()
    if as_of is not None:
        request.as_of.CopyFrom(as_of)
    return [m.content for m in stack.store.ListMemories(request).memories]


def recalled(stack: Stack, as_of: timestamp_pb2.Timestamp | None = None) -> list[str]:
    request = search_pb2.RecallRequest(query=QUERY, limit=10, min_score=0)
    if as_of is not None:
        request.as_of.CopyFrom(as_of)
    return [r.memory.content for r in stack.search.Recall(request, timeout=30).results]


def context_text(stack: Stack, as_of: timestamp_pb2.Timestamp | None = None) -> str:
    request = search_pb2.AssembleContextRequest(query=QUERY, token_budget=500)
    if as_of is not None:
        request.as_of.CopyFrom(as_of)
    return str(stack.search.AssembleContext(request, timeout=30).context)


def test_a_chain_of_three_values_reads_as_now_and_as_of_each_earlier_instant(
    stack: Stack,
) -> None:
    """Moved to Lisbon, then Berlin, then Porto: now reads Porto; as of any
    instant, the value valid (and known) then; List, Recall and AssembleContext
    agree."""
    lisbon = stack.remember("Ana lives in Lisbon")
    berlin = get(stack, supersede(stack, lisbon.id, "Ana lives in Berlin").new_memory_id)
    porto = get(stack, supersede(stack, berlin.id, "Ana lives in Porto").new_memory_id)
    lisbon, berlin = get(stack, lisbon.id), get(stack, berlin.id)
    # each value is valid until the next one starts
    assert lisbon.valid_until == berlin.valid_from == berlin.create_time
    assert berlin.valid_until == porto.valid_from and not porto.HasField("valid_until")

    expected: list[tuple[timestamp_pb2.Timestamp | None, list[str]]] = [
        (None, ["Ana lives in Porto"]),
        (lisbon.create_time, ["Ana lives in Lisbon"]),
        (shifted(berlin.valid_from, -1), ["Ana lives in Lisbon"]),
        (berlin.valid_from, ["Ana lives in Berlin"]),
        (shifted(porto.valid_from, -1), ["Ana lives in Berlin"]),
        (porto.valid_from, ["Ana lives in Porto"]),
        # known by then: nothing was recorded yet (though Lisbon's event time is earlier)
        (shifted(lisbon.create_time, -1), []),
    ]
    for as_of, values in expected:
        assert listed(stack, as_of) == values, as_of
        assert recalled(stack, as_of) == values, as_of
        text = context_text(stack, as_of)
        for city in ("Lisbon", "Berlin", "Porto"):
            assert (f"Ana lives in {city}" in text) == (f"Ana lives in {city}" in values), as_of


def test_a_change_recorded_late_is_not_known_before_it_was_recorded(stack: Stack) -> None:
    """Valid time and transaction time apart: Berlin is recorded now as true
    since 2020. As of an instant after Lisbon was recorded but before the move
    was, Lisbon was what we knew (its close was not written yet); from the
    instant the move was recorded, Berlin."""
    lisbon = stack.remember(
        "Ana lives in Lisbon", event_time=timestamp(datetime(2019, 5, 1, tzinfo=UTC))
    )
    assert lisbon.valid_from == lisbon.event_time
    moved = timestamp(datetime(2020, 9, 1, tzinfo=UTC))
    berlin = get(stack, supersede(stack, lisbon.id, "Ana lives in Berlin", moved).new_memory_id)
    assert (berlin.valid_from, berlin.event_time) == (moved, moved)
    assert get(stack, lisbon.id).valid_until == moved
    assert listed(stack, shifted(berlin.create_time, -1)) == ["Ana lives in Lisbon"]
    assert recalled(stack, shifted(berlin.create_time, -1)) == ["Ana lives in Lisbon"]
    assert listed(stack, berlin.create_time) == ["Ana lives in Berlin"]
    assert recalled(stack) == ["Ana lives in Berlin"]


def test_a_fact_known_ahead_stays_valid_until_its_successor_starts(stack: Stack) -> None:
    """Moving to Porto next year: Lisbon stays valid now; reads now return both
    (what is known now about the future is part of now), and Porto's own
    validity starts then."""
    lisbon = stack.remember("Ana lives in Lisbon")
    later = timestamp(datetime(2999, 1, 1, tzinfo=UTC))
    porto = get(stack, supersede(stack, lisbon.id, "Ana lives in Porto", later).new_memory_id)
    assert sorted(listed(stack)) == ["Ana lives in Lisbon", "Ana lives in Porto"]
    assert listed(stack, porto.create_time) == ["Ana lives in Lisbon"]


def test_deleted_memories_are_forgotten_whatever_as_of(stack: Stack) -> None:
    """Deleting forgets (it is not a change of fact): an as_of before the
    delete does not bring it back."""
    memory = stack.remember("Ana lives in Lisbon")
    stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=memory.id, reason="wrong"))
    assert listed(stack, memory.create_time) == []
    assert recalled(stack, memory.create_time) == []


def test_the_list_page_token_is_bound_to_as_of(stack: Stack) -> None:
    first = stack.remember("Ana lives in Lisbon")
    stack.remember("Ana likes tea")
    page = stack.store.ListMemories(
        store_pb2.ListMemoriesRequest(page_size=1, as_of=shifted(first.create_time, 10**12))
    )
    assert page.next_page_token
    assert error_of(
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(page_size=1, page_token=page.next_page_token)
        )
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["page_token"])


def test_a_bad_as_of_is_invalid_argument_naming_it(stack: Stack) -> None:
    out_of_range = timestamp_pb2.Timestamp(seconds=253_402_300_800)
    assert error_of(
        lambda: stack.store.ListMemories(store_pb2.ListMemoriesRequest(as_of=out_of_range))
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["as_of"])
    assert error_of(
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(deleted=True, as_of=timestamp_pb2.Timestamp(seconds=1))
        )
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["as_of"])
    assert error_of(
        lambda: stack.search.Recall(search_pb2.RecallRequest(query="Ana", as_of=out_of_range))
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["as_of"])
    assert error_of(
        lambda: stack.search.AssembleContext(
            search_pb2.AssembleContextRequest(query="Ana", as_of=out_of_range)
        )
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["as_of"])


def test_as_of_applies_inside_the_vector_channel_before_its_cut(
    vector_stack: Callable[..., tuple[Stack, Any]],
) -> None:
    """Channels ten deep and twelve better vector matches recorded after the
    as_of instant: Lisbon (found by its vector alone) still comes back as of
    then, so the point-in-time rule is applied inside the channel; now, its
    successor replaces it."""
    stack, _ = vector_stack({"search.channel_depth": 10, "search.vector_candidates": 10})
    vectors = {"Ana lives in Lisbon": vec(0.7), "Ana lives in Berlin": vec(0.6)}
    lisbon = stack.remember("Ana lives in Lisbon")
    for i in range(12):
        stack.remember(f"decoy number {i}")
        vectors[f"decoy number {i}"] = vec(0.99)
    supersede(stack, lisbon.id, "Ana lives in Berlin")
    stack.embed_pending(lambda text: vectors[text])

    def zebra(as_of: timestamp_pb2.Timestamp | None = None) -> list[str]:
        request = search_pb2.RecallRequest(query="zebra", limit=20, min_score=0)
        if as_of is not None:
            request.as_of.CopyFrom(as_of)
        return [r.memory.id for r in stack.search.Recall(request, timeout=30).results]

    assert zebra(lisbon.create_time) == [lisbon.id]


def moved(stack: Stack, namespace: str = "default") -> dict[str, Any]:
    """Ana in Lisbon from 2019-05, Berlin from 2020-09, Porto from 2022-03."""
    lisbon = stack.remember(
        "Ana lives in Lisbon",
        namespace=namespace,
        event_time=timestamp(datetime(2019, 5, 1, tzinfo=UTC)),
    )
    berlin_from = timestamp(datetime(2020, 9, 1, tzinfo=UTC))
    if namespace != "default":
        patch = store_pb2.MemoryPatch(
            id=lisbon.id, content="Ana lives in Berlin", supersede=True, valid_from=berlin_from
        )
        request = store_pb2.ModifyMemoriesRequest(
            namespace=namespace, patches=[patch], reason="moved"
        )
        berlin_id = stack.store.ModifyMemories(request).results[0].new_memory_id
        assert berlin_id
        return {"lisbon": lisbon.id, "berlin": berlin_id}
    berlin_id = supersede(stack, lisbon.id, "Ana lives in Berlin", berlin_from).new_memory_id
    porto_from = timestamp(datetime(2022, 3, 1, tzinfo=UTC))
    porto_id = supersede(stack, berlin_id, "Ana lives in Porto", porto_from).new_memory_id
    return {"lisbon": lisbon.id, "berlin": berlin_id, "porto": porto_id}


def test_a_question_naming_a_past_range_reads_what_was_true_then(stack: Stack) -> None:
    """'Where did Ana live in May 2021?': Berlin, superseded since, was the value
    then; it ranks first (the range's time boost), though no word of the range
    is in it and its event time (September 2020) lies before the range. Lisbon
    had ended before the range and stays out; Porto is valid now and stays in.
    Without a range, or with routing asked off (GENERAL), now alone."""
    ids = moved(stack)
    routed = stack.search.Recall(
        search_pb2.RecallRequest(query="where did Ana live in May 2021", limit=10, min_score=0),
        timeout=30,
    )
    assert routed.intent == search_pb2.QUERY_INTENT_TEMPORAL
    order = [r.memory.id for r in routed.results]
    assert order == [ids["berlin"], ids["porto"]], [r.memory.content for r in routed.results]
    assert routed.results[0].intent_boost == pytest.approx(0.2)
    assert routed.results[0].memory.HasField("valid_until")

    in_2019 = stack.search.Recall(
        search_pb2.RecallRequest(query="where did Ana live in 2019", limit=10, min_score=0),
        timeout=30,
    )
    found_2019 = [r.memory.id for r in in_2019.results]
    assert found_2019[0] == ids["lisbon"] and ids["berlin"] not in found_2019

    assert recalled(stack) == ["Ana lives in Porto"]
    flat = stack.search.Recall(
        search_pb2.RecallRequest(
            query="where did Ana live in May 2021",
            limit=10,
            min_score=0,
            intent=search_pb2.QUERY_INTENT_GENERAL,
        ),
        timeout=30,
    )
    assert [r.memory.id for r in flat.results] == [ids["porto"]]


def test_a_past_range_never_reads_another_namespace_or_a_deleted_fact(stack: Stack) -> None:
    """The widening is of validity only: another namespace's superseded fact of
    the range stays out, and a deleted one is forgotten whatever the range."""
    other = moved(stack, namespace="other")
    ids = moved(stack)
    asked = search_pb2.RecallRequest(query="where did Ana live in May 2021", limit=10, min_score=0)
    found = [r.memory.id for r in stack.search.Recall(asked, timeout=30).results]
    assert ids["berlin"] in found and other["berlin"] not in found
    stack.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=ids["berlin"], reason="wrong"))
    found = [r.memory.id for r in stack.search.Recall(asked, timeout=30).results]
    assert found == [ids["porto"]]


def test_as_of_decides_over_a_range_the_question_names(stack: Stack) -> None:
    """With `as_of`, the instant asked for is what is valid: the question's range
    lifts but does not widen (as of a 2023 instant, Porto alone)."""
    ids = moved(stack)
    porto = get(stack, ids["porto"])
    request = search_pb2.RecallRequest(
        query="where did Ana live in May 2021", limit=10, min_score=0
    )
    request.as_of.CopyFrom(shifted(porto.create_time, 1))
    assert [r.memory.id for r in stack.search.Recall(request, timeout=30).results] == [ids["porto"]]
