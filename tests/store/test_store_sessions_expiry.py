"""Sessions and short-term memory on the store (issue 16): `session_id` and
`ttl` on Remember and ImportMemories, the session filter, expiry (an expired
memory is gone from every read at once; the retention sweep purges it later),
and same-content dedup against short-term twins.

Expiry is reached by moving a memory's `expire_at` into the past in the file
(tests cannot wait for hours); everything else goes through the gRPC API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

import backend_db
from admin_helpers import AdminStore, admin_store
from engram.common.v1 import memory_pb2
from engram.store.internal.v1 import admin_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from services.common.clock import days_ago_text
from services.common.memory_filter import MemoryFilterSpec
from services.storage.store.repository import list_memories_query

HOUR = duration_pb2.Duration(seconds=3600)


@pytest.fixture
def st(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(start_store_server, make_config)


def remember(st: AdminStore, content: str, **fields: Any) -> store_pb2.RememberResponse:
    return st.store.Remember(store_pb2.RememberRequest(content=content, **fields))


def expire_now(st: AdminStore, memory_id: str) -> None:
    """The memory's expiry passed a second ago."""
    st.execute(
        "UPDATE memories SET expire_at = ? WHERE id = ?", days_ago_text(1 / 86400), memory_id
    )


def listed(st: AdminStore, **filter_fields: Any) -> list[str]:
    request = store_pb2.ListMemoriesRequest(filter=memory_pb2.MemoryFilter(**filter_fields))
    return [m.id for m in st.store.ListMemories(request).memories]


def events(st: AdminStore, memory_id: str) -> list[tuple[str, str, str]]:
    return st.rows(
        "SELECT event, changed_by, reason FROM memory_history WHERE memory_id = ? ORDER BY seq",
        memory_id,
    )


# ---- session_id and ttl on the write path ------------------------------------------------


def test_a_short_term_memory_carries_its_session_and_expires_exactly_ttl_after_creation(
    st: AdminStore,
) -> None:
    memory = remember(
        st,
        "we are debugging the flaky deploy",
        session_id="chat:42",
        ttl=duration_pb2.Duration(seconds=3, nanos=5),
    ).memory
    assert memory.session_id == "chat:42"
    assert memory.HasField("expire_time")
    created = memory.create_time.seconds * 10**9 + memory.create_time.nanos
    expires = memory.expire_time.seconds * 10**9 + memory.expire_time.nanos
    assert expires - created == 3 * 10**9 + 5
    got = st.store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory
    assert got == memory


def test_a_long_term_memory_has_no_expiry_and_no_session(st: AdminStore) -> None:
    memory = remember(st, "the user's name is Ada").memory
    assert not memory.HasField("expire_time") and memory.session_id == ""


def test_short_term_memories_get_no_extract_job_long_term_ones_do(st: AdminStore) -> None:
    """Facts distilled from a short-term memory would outlive the ttl it was given."""
    short = remember(st, "just a passing remark", ttl=HOUR).memory
    long = remember(st, "a lasting fact").memory
    jobs: dict[str, list[str]] = {}
    for memory_id, job_type in st.rows("SELECT memory_id, job_type FROM memory_jobs"):
        jobs.setdefault(memory_id, []).append(job_type)
    assert jobs[short.id] == ["embed"]
    assert sorted(jobs[long.id]) == ["embed", "extract"]


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        (duration_pb2.Duration(seconds=0), "must be positive"),
        (duration_pb2.Duration(seconds=-5), "must be positive"),
        (duration_pb2.Duration(seconds=366 * 86400 + 1), "at most 366 days"),
        (duration_pb2.Duration(seconds=1, nanos=-1), "not a valid Duration"),
        (duration_pb2.Duration(seconds=0, nanos=1_000_000_000), "not a valid Duration"),
    ],
)
def test_a_bad_ttl_is_invalid_argument_naming_ttl_and_writes_nothing(
    st: AdminStore, ttl: duration_pb2.Duration, message: str
) -> None:
    before = st.snapshot()
    assert error_of(lambda: remember(st, "x", ttl=ttl)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["ttl"],
    )
    with pytest.raises(grpc.RpcError) as caught:
        remember(st, "x", ttl=ttl)
    assert message in caught.value.details()  # type: ignore[attr-defined]
    assert st.snapshot() == before


def test_the_longest_ttl_is_accepted(st: AdminStore) -> None:
    memory = remember(st, "a year", ttl=duration_pb2.Duration(seconds=366 * 86400)).memory
    assert memory.expire_time.seconds - memory.create_time.seconds == 366 * 86400


@pytest.mark.parametrize("session_id", ["has space", "tab\there", "x" * 129, "nul\x00"])
def test_a_bad_session_id_is_invalid_argument_naming_it(st: AdminStore, session_id: str) -> None:
    code, _, fields = error_of(lambda: remember(st, "x", session_id=session_id))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["session_id"])


def test_import_items_take_session_and_ttl_and_a_bad_one_fails_alone(st: AdminStore) -> None:
    batch = store_pb2.ImportMemoriesRequest(
        items=[
            store_pb2.ImportItem(content="imported turn", session_id="s1", ttl=HOUR),
            store_pb2.ImportItem(content="bad ttl", ttl=duration_pb2.Duration(seconds=-1)),
        ]
    )
    response = st.store.ImportMemories(iter([batch]))
    ok, failed = response.results
    assert ok.status == store_pb2.IMPORT_STATUS_CREATED
    assert failed.status == store_pb2.IMPORT_STATUS_FAILED and "items[1].ttl" in failed.error
    memory = st.store.GetMemory(store_pb2.GetMemoryRequest(id=ok.memory_id)).memory
    assert memory.session_id == "s1" and memory.HasField("expire_time")


# ---- the session filter -----------------------------------------------------------------


def test_list_filters_by_session(st: AdminStore) -> None:
    a1 = remember(st, "first turn of a", session_id="a").memory.id
    remember(st, "only turn of b", session_id="b")
    remember(st, "no session at all")
    a2 = remember(st, "second turn of a", session_id="a").memory.id
    assert listed(st, session_id="a") == [a2, a1]
    assert len(listed(st)) == 4


def test_a_bad_session_filter_is_invalid_argument(st: AdminStore) -> None:
    request = store_pb2.ListMemoriesRequest(filter=memory_pb2.MemoryFilter(session_id="a b"))
    code, _, fields = error_of(lambda: st.store.ListMemories(request))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["filter.session_id"])


def test_a_session_read_uses_the_session_index(st: AdminStore) -> None:
    spec = MemoryFilterSpec(session_id="s")
    sql, params = list_memories_query("default", spec, None, 51, dialect=st.dialect)
    if st.dialect.is_postgres:
        # An empty table is read by a scan whatever its indexes: with scans
        # priced out, the plan shows which index serves the query.
        with backend_db.connect(st.db) as conn:
            conn.execute("SET enable_seqscan = off")
            plan = [row[0] for row in conn.execute(f"EXPLAIN {sql}", params).fetchall()]
        assert any("memories_session" in line for line in plan), plan
        return
    plan = st.rows(f"EXPLAIN QUERY PLAN {sql}", *params)
    assert any("memories_session" in row[-1] for row in plan)


# ---- expiry: gone from every read at once -------------------------------------------------


def test_an_expired_memory_is_gone_from_get_list_forget_and_every_change(st: AdminStore) -> None:
    gone = remember(st, "the wifi password is hunter2", session_id="s", ttl=HOUR).memory
    kept = remember(st, "the wifi is slow", session_id="s", ttl=HOUR).memory
    expire_now(st, gone.id)

    assert error_of(lambda: st.store.GetMemory(store_pb2.GetMemoryRequest(id=gone.id)))[:2] == (
        grpc.StatusCode.NOT_FOUND,
        "NOT_FOUND",
    )
    assert listed(st) == [kept.id]
    assert listed(st, session_id="s") == [kept.id]
    preview = st.store.ForgetMemories(store_pb2.ForgetMemoriesRequest(query="wifi"))
    assert [c.id for c in preview.candidates] == [kept.id]
    delete = store_pb2.DeleteMemoryRequest(id=gone.id, reason="r")
    assert error_of(lambda: st.store.DeleteMemory(delete))[0] == grpc.StatusCode.NOT_FOUND
    patch = store_pb2.ModifyMemoriesRequest(
        patches=[store_pb2.MemoryPatch(id=gone.id, content="changed")], reason="r"
    )
    [result] = st.store.ModifyMemories(patch).results
    assert result.status == store_pb2.PATCH_STATUS_NOT_FOUND
    # Its history stays readable (the audit trail outlives the memory).
    history = st.store.ListMemoryHistory(store_pb2.ListMemoryHistoryRequest(memory_id=gone.id))
    assert [e.event_type for e in history.events] == [store_pb2.HISTORY_EVENT_TYPE_CREATED]


def test_an_expired_tombstone_is_neither_listed_nor_recoverable(st: AdminStore) -> None:
    memory = remember(st, "deleted then expired", ttl=HOUR).memory
    st.delete(memory.id)
    expire_now(st, memory.id)
    deleted = st.store.ListMemories(store_pb2.ListMemoriesRequest(deleted=True)).memories
    assert memory.id not in [m.id for m in deleted]
    recover = store_pb2.RecoverMemoryRequest(id=memory.id, reason="undo")
    assert error_of(lambda: st.store.RecoverMemory(recover))[0] == grpc.StatusCode.NOT_FOUND


def test_a_memory_not_yet_expired_is_read_as_usual(st: AdminStore) -> None:
    memory = remember(st, "still fresh", ttl=HOUR).memory
    st.execute(
        "UPDATE memories SET expire_at = ? WHERE id = ?", days_ago_text(-1 / 86400), memory.id
    )
    assert st.store.GetMemory(store_pb2.GetMemoryRequest(id=memory.id)).memory.id == memory.id


# ---- dedup against short-term twins ---------------------------------------------------------


def test_an_expired_twin_never_deduplicates_it_is_purged_and_the_content_stored_anew(
    st: AdminStore,
) -> None:
    old = remember(st, "Lunch is at noon", ttl=HOUR).memory
    expire_now(st, old.id)
    again = remember(st, "lunch is at noon!")
    assert not again.deduplicated and again.memory.id != old.id
    assert not again.memory.HasField("expire_time")
    assert st.scalar("SELECT count(*) FROM memories WHERE id = ?", old.id) == 0
    assert events(st, old.id)[-1] == ("purged", "retention", "short-term memory expired")
    assert listed(st) == [again.memory.id]


def test_a_long_term_duplicate_makes_a_short_term_twin_long_term(st: AdminStore) -> None:
    short = remember(st, "The user is vegetarian", session_id="s", ttl=HOUR).memory
    again = remember(st, "the user is vegetarian")
    assert again.deduplicated and again.memory.id == short.id
    assert not again.memory.HasField("expire_time")
    assert again.memory.session_id == "s" and again.memory.version == short.version + 1
    assert events(st, short.id)[-1] == ("modified", "api", "remembered again with a longer life")


def test_a_duplicate_never_shortens_a_life(st: AdminStore) -> None:
    long = remember(st, "permanent fact").memory
    again = remember(st, "permanent fact", ttl=HOUR)
    assert again.deduplicated and not again.memory.HasField("expire_time")
    assert again.memory.version == long.version

    day = remember(st, "a day long", ttl=duration_pb2.Duration(seconds=86400)).memory
    shorter = remember(st, "a day long", ttl=HOUR)
    assert shorter.deduplicated and shorter.memory.expire_time == day.expire_time

    longer = remember(st, "a day long", ttl=duration_pb2.Duration(seconds=2 * 86400))
    assert longer.memory.expire_time.seconds > day.expire_time.seconds
    assert longer.memory.version == day.version + 1


def test_changing_content_to_that_of_an_expired_memory_is_not_a_duplicate(st: AdminStore) -> None:
    old = remember(st, "meeting moved to friday", ttl=HOUR).memory
    keep = remember(st, "meeting on thursday").memory
    expire_now(st, old.id)
    request = store_pb2.ModifyMemoriesRequest(
        patches=[store_pb2.MemoryPatch(id=keep.id, content="meeting moved to friday")],
        reason="moved",
    )
    [result] = st.store.ModifyMemories(request).results
    assert result.status == store_pb2.PATCH_STATUS_UPDATED
    assert st.scalar("SELECT count(*) FROM memories WHERE id = ?", old.id) == 0


# ---- retention ----------------------------------------------------------------------------------


def test_the_sweep_purges_expired_memories_first_and_never_touches_the_rest(
    st: AdminStore,
) -> None:
    gone = remember(st, "expired turn", session_id="s", ttl=HOUR).memory
    fresh = remember(st, "fresh turn", session_id="s", ttl=HOUR).memory
    long = remember(st, "long-term fact").memory
    st.embed_all()
    expire_now(st, gone.id)
    steps = list(st.admin.SweepRetention(admin_pb2.SweepRetentionRequest()).steps)
    assert steps[0].step == "expired_memories" and steps[0].removed == 1
    assert {r[0] for r in st.rows("SELECT id FROM memories")} == {fresh.id, long.id}
    assert events(st, gone.id)[-1] == ("purged", "retention", "short-term memory expired")
    assert st.scalar("SELECT count(*) FROM memory_jobs WHERE memory_id = ?", gone.id) == 0
    again = list(st.admin.SweepRetention(admin_pb2.SweepRetentionRequest()).steps)
    assert again[0].removed == 0
