"""Seed 003 "Ebbinghaus decay" in the store: a memory's stored confidence and
decay rate, reinforcement where access is recorded, ListWeakMemories, the
weak count in diagnostics, and pruning by the retention sweep only when
`memory.decay_prune` is on (soft delete, history event, recoverable).

Ages and a stored confidence below 1 are written to the SQLite file directly
(tests cannot wait 100 days; only the pipeline writes a confidence below 1).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from admin_helpers import AdminStore
from engram.client import AsyncEngram, Engram
from engram.maintenance.v1 import maintenance_pb2 as mpb
from engram.store.internal.v1 import access_pb2, access_pb2_grpc
from engram.store.v1 import store_pb2
from grpc_helpers import error_of


def seed_confidence(days: float, rate: float = 0.1, confidence: float = 1.0) -> float:
    return confidence * math.exp(-rate * days**0.8)


def weak(st: AdminStore, namespace: str = "", **fields: Any) -> store_pb2.ListWeakMemoriesResponse:
    return st.store.ListWeakMemories(
        store_pb2.ListWeakMemoriesRequest(namespace=namespace, **fields)
    )


def access(st: AdminStore, *ids: str, namespace: str = "") -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{st.internal_port}")
    try:
        access_pb2_grpc.AccessServiceStub(channel).RecordAccess(
            access_pb2.RecordAccessRequest(namespace=namespace, memory_ids=list(ids))
        )
    finally:
        channel.close()


def get(st: AdminStore, memory_id: str, namespace: str = "") -> Any:
    return st.store.GetMemory(store_pb2.GetMemoryRequest(id=memory_id, namespace=namespace)).memory


def test_a_new_memory_has_full_confidence_and_follows_the_default_rate(
    maintained: Callable[..., Any],
) -> None:
    st = maintained().st
    memory = get(st, st.remember("the kettle is in the left cupboard"))
    assert memory.confidence == 1.0
    assert not memory.HasField("decay_rate")


def test_each_access_reinforces_confidence_by_the_seed_formula_capped_at_one(
    maintained: Callable[..., Any],
) -> None:
    st = maintained().st
    memory_id = st.remember("the spare key is under the blue pot")
    st.execute("UPDATE memories SET confidence = 0.5 WHERE id = ?", memory_id)
    access(st, memory_id)
    first = 0.5 + 0.05 * math.log(1 + 1 / 20)
    assert get(st, memory_id).confidence == pytest.approx(first)
    access(st, memory_id, memory_id)  # two accesses in one batch: n = 2, then n = 3
    memory = get(st, memory_id)
    assert memory.access_count == 3
    assert memory.confidence == pytest.approx(
        first + 0.05 * math.log(1 + 2 / 20) + 0.05 * math.log(1 + 3 / 20)
    )
    st.execute("UPDATE memories SET confidence = 0.999 WHERE id = ?", memory_id)
    access(st, memory_id)
    assert get(st, memory_id).confidence == 1.0


def test_weak_memories_are_those_decayed_below_the_threshold_in_the_namespace(
    maintained: Callable[..., Any],
) -> None:
    st = maintained().st
    stale = st.remember("the old gym locker code was 4411")
    sixty = st.remember("the plumber came on a tuesday")
    fresh = st.remember("the new locker code is 7302")
    pinned = st.remember("mum's birthday is on the ninth of may", pinned=True)
    recalled = st.remember("the wifi password is on the fridge")
    protected = st.remember("the passport lives in the desk drawer")
    elsewhere = st.remember("the old gym locker code was 4411", namespace="other")
    for memory_id in (stale, pinned, recalled, protected, elsewhere):
        st.age("memories", "created_at", 100, "id = ?", memory_id)
    st.age("memories", "created_at", 60, "id = ?", sixty)
    st.age("memories", "last_accessed", 1, "id = ?", recalled)  # accessed yesterday
    st.execute("UPDATE memories SET decay_rate = 0 WHERE id = ?", protected)

    page = weak(st)
    assert [w.memory.id for w in page.memories] == [stale]
    assert page.memories[0].current_confidence == pytest.approx(seed_confidence(100), rel=1e-4)
    assert page.decay_threshold == pytest.approx(0.05)
    assert seed_confidence(60) > 0.05  # sixty days is not yet weak at the default rate
    assert get(st, protected).decay_rate == 0.0
    assert [w.memory.id for w in weak(st, "other").memories] == [elsewhere]
    assert fresh not in {w.memory.id for w in page.memories}


def test_the_python_clients_list_every_weak_memory_page_by_page(
    maintained: Callable[..., Any],
) -> None:
    st = maintained().st
    ids = [st.remember(f"an errand nobody ran {n}") for n in range(3)]
    st.age("memories", "created_at", 200, "1 = 1")
    with Engram(f"127.0.0.1:{st.port}") as client:
        found = list(client.list_weak_memories(page_size=2))
    assert [w.memory.id for w in found] == ids
    assert all(w.current_confidence < 0.05 for w in found)

    async def listed() -> list[str]:
        async with AsyncEngram(f"127.0.0.1:{st.port}") as client:
            return [w.memory.id async for w in client.list_weak_memories(page_size=1)]

    assert asyncio.run(listed()) == ids


def test_a_faster_own_rate_makes_a_memory_weak_sooner(maintained: Callable[..., Any]) -> None:
    st = maintained().st
    memory_id = st.remember("the car is parked on level three")
    st.age("memories", "created_at", 10, "id = ?", memory_id)
    assert not weak(st).memories
    st.execute("UPDATE memories SET decay_rate = 0.5 WHERE id = ?", memory_id)
    [found] = weak(st).memories
    assert found.current_confidence == pytest.approx(seed_confidence(10, 0.5), rel=1e-4)
    assert found.memory.decay_rate == 0.5


def test_weak_memories_page_in_written_order(maintained: Callable[..., Any]) -> None:
    st = maintained().st
    ids = [st.remember(f"forgotten errand number {n}") for n in range(3)]
    st.age("memories", "created_at", 200, "1 = 1")
    first = weak(st, page_size=2)
    assert [w.memory.id for w in first.memories] == ids[:2]
    second = weak(st, page_size=2, page_token=first.next_page_token)
    assert [w.memory.id for w in second.memories] == ids[2:]
    assert second.next_page_token == ""


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"page_size": -1}, "page_size"),
        ({"page_size": 501}, "page_size"),
        ({"page_token": "not-a-token"}, "page_token"),
        ({"namespace": "bad namespace!"}, "namespace"),
    ],
)
def test_bad_listing_requests_are_invalid_argument(
    maintained: Callable[..., Any], fields: dict[str, Any], field: str
) -> None:
    st = maintained().st
    code, _, named = error_of(lambda: weak(st, **fields))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in named


def test_a_token_from_another_namespace_is_refused(maintained: Callable[..., Any]) -> None:
    st = maintained().st
    for n in range(2):
        st.remember(f"lost thought {n}")
    st.age("memories", "created_at", 200, "1 = 1")
    token = weak(st, page_size=1).next_page_token
    code, _, named = error_of(lambda: weak(st, "other", page_token=token))
    assert (code, named) == (grpc.StatusCode.INVALID_ARGUMENT, ["page_token"])


def test_diagnostics_count_weak_memories_and_retention_leaves_them_by_default(
    maintained: Callable[..., Any],
) -> None:
    m = maintained()
    memory_id = m.st.remember("the broken umbrella is in the boot")
    m.st.remember("the umbrella was replaced")
    m.st.age("memories", "created_at", 100, "id = ?", memory_id)
    assert m.maintenance.GetDiagnostics(mpb.GetDiagnosticsRequest()).storage.weak_memories == 1
    steps = m.maintenance.RunRetention(mpb.RunRetentionRequest()).steps
    assert "weak_memories" not in [s.step for s in steps]
    assert not get(m.st, memory_id).deleted


def test_with_decay_prune_the_sweep_soft_deletes_weak_memories_recoverably(
    maintained: Callable[..., Any],
) -> None:
    m = maintained(**{"memory.decay_prune": True})
    memory_id = m.st.remember("the broken umbrella is in the boot")
    kept = m.st.remember("the umbrella was replaced")
    m.st.age("memories", "created_at", 100, "id = ?", memory_id)
    audits_before = m.st.scalar(
        "SELECT count(*) FROM maintenance_audit WHERE action = 'retention:weak_memories'"
    )

    steps = m.maintenance.RunRetention(mpb.RunRetentionRequest()).steps
    assert steps[0].step == "weak_memories" and steps[0].removed == 1
    assert get(m.st, memory_id).deleted and not get(m.st, kept).deleted
    assert not weak(m.st).memories
    assert m.maintenance.GetDiagnostics(mpb.GetDiagnosticsRequest()).storage.weak_memories == 0
    history = m.st.store.ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(memory_id=memory_id)
    ).events
    last = history[-1]
    assert last.event_type == store_pb2.HISTORY_EVENT_TYPE_DELETED
    assert last.actor == "decay"
    assert "decay_threshold" in last.reason
    assert (
        m.st.scalar(
            "SELECT count(*) FROM maintenance_audit WHERE action = 'retention:weak_memories'"
        )
        == audits_before + 1
    )

    recovered = m.st.store.RecoverMemory(
        store_pb2.RecoverMemoryRequest(id=memory_id, reason="still true")
    ).memory
    assert not recovered.deleted
    # recovering restarts the decay clock: the next sweep leaves it alone
    steps = m.maintenance.RunRetention(mpb.RunRetentionRequest()).steps
    assert steps[0].removed == 0
    assert not get(m.st, memory_id).deleted


def test_pruning_leaves_pinned_memories_however_old(maintained: Callable[..., Any]) -> None:
    m = maintained(**{"memory.decay_prune": True})
    memory_id = m.st.remember("the house deeds are with the solicitor", pinned=True)
    m.st.age("memories", "created_at", 1000, "id = ?", memory_id)
    m.maintenance.RunRetention(mpb.RunRetentionRequest())
    assert not get(m.st, memory_id).deleted


def modify(st: AdminStore, *patches: store_pb2.MemoryPatch) -> store_pb2.ModifyMemoriesResponse:
    return st.store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(patches=list(patches), reason="decay test")
    )


def test_a_patch_sets_the_decay_rate_and_zero_protects_from_decay(
    maintained: Callable[..., Any],
) -> None:
    """Seed 003's confirm_fact: decay_rate 0 keeps an old, never recalled memory
    out of the weak list; a faster rate makes a younger one weak."""
    st = maintained().st
    confirmed = st.remember("the boiler service is due every october")
    hurried = st.remember("the parcel locker code is 1187")
    st.age("memories", "created_at", 100, "id = ?", confirmed)
    st.age("memories", "created_at", 10, "id = ?", hurried)
    assert [w.memory.id for w in weak(st).memories] == [confirmed]

    modify(
        st,
        store_pb2.MemoryPatch(id=confirmed, decay_rate=0.0, reason="confirmed by the user"),
        store_pb2.MemoryPatch(id=hurried, decay_rate=2.0),
    )
    assert get(st, confirmed).decay_rate == 0.0 and get(st, hurried).decay_rate == 2.0
    listed = weak(st).memories
    assert [w.memory.id for w in listed] == [hurried]
    assert listed[0].current_confidence == pytest.approx(seed_confidence(10, rate=2.0), rel=1e-4)
    history = store_pb2.ListMemoryHistoryRequest(memory_id=confirmed)
    last = st.store.ListMemoryHistory(history).events[-1]
    assert last.reason == "confirmed by the user"
    assert last.metadata["changes"]["decay_rate"] == 0.0
    again = modify(st, store_pb2.MemoryPatch(id=confirmed, decay_rate=0.0))
    assert again.results[0].status == store_pb2.PATCH_STATUS_UNCHANGED


@pytest.mark.parametrize("rate", [-0.1, 10.5, float("nan")])
def test_a_decay_rate_out_of_range_is_invalid_and_writes_nothing(
    maintained: Callable[..., Any], rate: float
) -> None:
    st = maintained().st
    memory_id = st.remember("the bins go out on thursday night")
    before = get(st, memory_id)
    code, _, named = error_of(
        lambda: modify(
            st,
            store_pb2.MemoryPatch(id=memory_id, type="fact"),
            store_pb2.MemoryPatch(id=memory_id, decay_rate=rate),
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert named == ["patches[1].decay_rate"]
    after = get(st, memory_id)
    assert after.version == before.version and not after.HasField("decay_rate")


def test_a_superseding_version_takes_the_patch_decay_rate_or_keeps_the_old_one(
    maintained: Callable[..., Any],
) -> None:
    st = maintained().st
    old = st.remember("the car is parked on level 2")
    modify(st, store_pb2.MemoryPatch(id=old, decay_rate=0.0))
    kept = modify(
        st, store_pb2.MemoryPatch(id=old, content="the car is on level 3", supersede=True)
    )
    newer = kept.results[0].new_memory_id
    assert get(st, newer).decay_rate == 0.0
    faster = modify(
        st,
        store_pb2.MemoryPatch(
            id=newer, content="the car is on level 4", supersede=True, decay_rate=0.5
        ),
    )
    assert get(st, faster.results[0].new_memory_id).decay_rate == 0.5
