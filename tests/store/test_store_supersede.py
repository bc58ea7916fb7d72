"""Superseding through ModifyMemories (`supersede: true`, issue 17) and
ExplainMemory, on a real store over gRPC: a new memory replaces the old one,
whose content stays and whose validity closes; both get history; a
`supersedes` link joins them; ExplainMemory walks the chain."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from admin_helpers import AdminStore, admin_store
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import timestamp


@pytest.fixture
def st(start_store_server: Callable[..., Any], make_config: Callable[..., Any]) -> AdminStore:
    return admin_store(start_store_server, make_config)


def remember(st: AdminStore, content: str, **fields: Any) -> Any:
    return st.store.Remember(store_pb2.RememberRequest(content=content, **fields)).memory


def get(st: AdminStore, memory_id: str, namespace: str = "") -> Any:
    return st.store.GetMemory(store_pb2.GetMemoryRequest(id=memory_id, namespace=namespace)).memory


def modify(st: AdminStore, *patches: store_pb2.MemoryPatch, namespace: str = "") -> list[Any]:
    request = store_pb2.ModifyMemoriesRequest(
        namespace=namespace, patches=patches, reason="she moved", actor="agent-7"
    )
    return list(st.store.ModifyMemories(request).results)


def explain(st: AdminStore, memory_id: str, namespace: str = "") -> Any:
    return st.store.ExplainMemory(store_pb2.ExplainMemoryRequest(id=memory_id, namespace=namespace))


def when(year: int) -> timestamp_pb2.Timestamp:
    return timestamp(datetime(year, 1, 1, tzinfo=UTC))


def test_a_supersede_patch_creates_the_new_version_and_closes_the_old_one(st: AdminStore) -> None:
    old = remember(
        st,
        "Ana lives in Lisbon",
        tags=["home"],
        who="agent-1",
        importance=0.6,
        session_id="s1",
        event_time=when(2019),
    )
    assert old.valid_from == when(2019) and not old.HasField("valid_until")
    [result] = modify(
        st,
        store_pb2.MemoryPatch(
            id=old.id, content="Ana lives in Berlin", supersede=True, valid_from=when(2021)
        ),
    )
    assert (result.status, result.current_version, result.new_version) == (
        store_pb2.PATCH_STATUS_UPDATED,
        1,
        2,
    )
    assert result.new_memory_id and result.new_memory_id != old.id
    closed, new = get(st, old.id), get(st, result.new_memory_id)
    # the old memory keeps its content; only its validity closed
    assert (closed.content, closed.version, closed.deleted) == ("Ana lives in Lisbon", 2, False)
    assert closed.valid_until == when(2021) == new.valid_from == new.event_time
    # the new one takes the patch's content and the old one's other fields
    assert (new.content, list(new.tags), new.who, new.importance, new.session_id, new.type) == (
        "Ana lives in Berlin",
        ["home"],
        "agent-1",
        pytest.approx(0.6),
        "s1",
        old.type,
    )
    assert new.version == 1 and not new.HasField("valid_until")
    assert st.rows("SELECT from_memory_id, to_memory_id, link_type FROM memory_links") == [
        (new.id, old.id, "supersedes")
    ]
    old_events = st.store.ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(memory_id=old.id)
    ).events
    assert [(e.event_type, e.actor, e.reason) for e in old_events] == [
        (store_pb2.HISTORY_EVENT_TYPE_CREATED, "agent-1", "remember"),
        (store_pb2.HISTORY_EVENT_TYPE_MODIFIED, "agent-7", "she moved"),
    ]
    assert old_events[1].metadata["superseded_by"] == new.id
    assert old_events[1].old_content == old_events[1].new_content == "Ana lives in Lisbon"
    new_events = st.store.ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(memory_id=new.id)
    ).events
    assert [(e.event_type, e.actor, e.metadata["supersedes"]) for e in new_events] == [
        (store_pb2.HISTORY_EVENT_TYPE_CREATED, "agent-7", old.id)
    ]


def test_patch_fields_given_with_supersede_apply_to_the_new_version(st: AdminStore) -> None:
    old = remember(st, "The team deploys on Fridays", tags=["ops"])
    [result] = modify(
        st,
        store_pb2.MemoryPatch(
            id=old.id,
            content="The team deploys on Tuesdays",
            supersede=True,
            type="rule",
            pinned=True,
            tags=store_pb2.TagList(values=["ops", "release"]),
        ),
    )
    new = get(st, result.new_memory_id)
    assert (new.type, new.pinned, new.importance, list(new.tags)) == (
        "rule",
        True,
        1.0,
        ["ops", "release"],
    )
    assert get(st, old.id).pinned is False


def test_a_superseded_value_can_become_true_again(st: AdminStore) -> None:
    """Lisbon, Berlin, Lisbon again: the third is a new memory (dedup is against
    what is valid now), and Remember of a superseded content creates one too."""
    lisbon = remember(st, "Ana lives in Lisbon")
    [to_berlin] = modify(
        st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Berlin", supersede=True)
    )
    [back] = modify(
        st,
        store_pb2.MemoryPatch(
            id=to_berlin.new_memory_id, content="Ana lives in Lisbon", supersede=True
        ),
    )
    assert back.status == store_pb2.PATCH_STATUS_UPDATED
    assert back.new_memory_id not in (lisbon.id, to_berlin.new_memory_id)
    again = st.store.Remember(store_pb2.RememberRequest(content="Ana lives in Berlin"))
    assert not again.deduplicated and again.memory.id != to_berlin.new_memory_id
    # but remembering what is valid now still deduplicates
    same = st.store.Remember(store_pb2.RememberRequest(content="Ana lives in Lisbon"))
    assert same.deduplicated and same.memory.id == back.new_memory_id


def test_a_supersede_that_cannot_apply_reports_why_and_writes_nothing(st: AdminStore) -> None:
    lisbon = remember(st, "Ana lives in Lisbon", event_time=when(2019))
    other = remember(st, "Ana lives in Porto")
    before = st.snapshot()
    results = modify(
        st,
        store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Lisbon", supersede=True),
        store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Porto", supersede=True),
        store_pb2.MemoryPatch(
            id=lisbon.id, content="Ana lives in Rome", supersede=True, valid_from=when(2018)
        ),
        store_pb2.MemoryPatch(id="no-such-memory", content="Ana lives in Rome", supersede=True),
        store_pb2.MemoryPatch(
            id=lisbon.id, content="Ana lives in Rome", supersede=True, if_version=7
        ),
    )
    assert [(r.status, r.duplicate_memory_id, r.new_memory_id) for r in results] == [
        (store_pb2.PATCH_STATUS_UNCHANGED, "", ""),
        (store_pb2.PATCH_STATUS_DUPLICATE_CONTENT, other.id, ""),
        (store_pb2.PATCH_STATUS_STARTS_BEFORE_TARGET, "", ""),
        (store_pb2.PATCH_STATUS_NOT_FOUND, "", ""),
        (store_pb2.PATCH_STATUS_VERSION_CONFLICT, "", ""),
    ]
    assert st.snapshot() == before
    [done] = modify(
        st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Berlin", supersede=True)
    )
    before = st.snapshot()
    [again] = modify(
        st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Rome", supersede=True)
    )
    assert again.status == store_pb2.PATCH_STATUS_ALREADY_SUPERSEDED
    assert st.snapshot() == before
    # a plain modify of a superseded memory (a correction of history) still applies
    [fixed] = modify(st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lived in Lisbon"))
    assert fixed.status == store_pb2.PATCH_STATUS_UPDATED
    assert get(st, lisbon.id).valid_until == get(st, done.new_memory_id).valid_from


def test_another_namespaces_memory_cannot_be_superseded(st: AdminStore) -> None:
    theirs = remember(st, "Ana lives in Lisbon", namespace="team")
    before = st.snapshot()
    [result] = modify(
        st, store_pb2.MemoryPatch(id=theirs.id, content="Ana lives in Berlin", supersede=True)
    )
    assert result.status == store_pb2.PATCH_STATUS_NOT_FOUND
    assert st.snapshot() == before


def test_bad_supersede_patches_are_invalid_argument_naming_each_field(st: AdminStore) -> None:
    memory = remember(st, "Ana lives in Lisbon")
    before = st.snapshot()
    assert error_of(
        lambda: modify(
            st,
            store_pb2.MemoryPatch(id=memory.id, supersede=True, who="x"),
            store_pb2.MemoryPatch(id=memory.id, who="y", valid_from=when(2020)),
            store_pb2.MemoryPatch(
                id=memory.id,
                content="Ana lives in Rome",
                supersede=True,
                valid_from=timestamp_pb2.Timestamp(seconds=253_402_300_800),
            ),
        )
    ) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["patches[2].valid_from", "patches[0].content", "patches[1].valid_from"],
    )
    assert st.snapshot() == before


def test_explain_memory_shows_the_chain_both_ways_and_the_audit_trail(st: AdminStore) -> None:
    lisbon = remember(st, "Ana lives in Lisbon")
    [b] = modify(
        st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Berlin", supersede=True)
    )
    [p] = modify(
        st, store_pb2.MemoryPatch(id=b.new_memory_id, content="Ana lives in Porto", supersede=True)
    )
    middle = explain(st, b.new_memory_id)
    assert middle.memory == get(st, b.new_memory_id)
    assert [m.content for m in middle.supersedes] == ["Ana lives in Lisbon"]
    assert [m.content for m in middle.superseded_by] == ["Ana lives in Porto"]
    assert [e.event_type for e in middle.events] == [
        store_pb2.HISTORY_EVENT_TYPE_CREATED,
        store_pb2.HISTORY_EVENT_TYPE_MODIFIED,
    ]
    assert not middle.events_truncated and not middle.derived_from and not middle.derivations
    newest = explain(st, p.new_memory_id)
    assert [m.content for m in newest.supersedes] == ["Ana lives in Berlin", "Ana lives in Lisbon"]
    assert list(newest.superseded_by) == []
    oldest = explain(st, lisbon.id)
    assert [m.id for m in oldest.superseded_by] == [b.new_memory_id, p.new_memory_id]
    # a deleted version is still shown, as GetMemory shows it
    st.store.DeleteMemory(store_pb2.DeleteMemoryRequest(id=lisbon.id, reason="r"))
    assert [m.deleted for m in explain(st, p.new_memory_id).supersedes] == [False, True]


def test_explain_memory_is_namespace_scoped_and_not_found_says_nothing(st: AdminStore) -> None:
    theirs = remember(st, "Ana lives in Lisbon", namespace="team")
    for namespace, memory_id in (("", theirs.id), ("", "missing"), ("other", theirs.id)):
        code, reason, _ = error_of(lambda m=memory_id, n=namespace: explain(st, m, n))
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    assert explain(st, theirs.id, "team").memory.id == theirs.id
    assert error_of(lambda: explain(st, "")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["id"],
    )


def test_forgetting_by_query_reaches_superseded_versions(st: AdminStore) -> None:
    """Forgetting what is known about Ana must not leave her earlier addresses."""
    lisbon = remember(st, "Ana lives in Lisbon")
    [b] = modify(
        st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Berlin", supersede=True)
    )
    preview = st.store.ForgetMemories(store_pb2.ForgetMemoriesRequest(query="Ana"))
    assert sorted(c.id for c in preview.candidates) == sorted([lisbon.id, b.new_memory_id])
    done = st.store.ForgetMemories(
        store_pb2.ForgetMemoriesRequest(
            query="Ana", mode=store_pb2.FORGET_MODE_EXECUTE, reason="asked to be forgotten"
        )
    )
    assert done.deleted_count == 2
    assert get(st, lisbon.id).deleted and get(st, b.new_memory_id).deleted


def links(st: AdminStore, memory_id: str, **fields: Any) -> store_pb2.ListMemoryLinksResponse:
    return st.store.ListMemoryLinks(store_pb2.ListMemoryLinksRequest(memory_id=memory_id, **fields))


def test_list_memory_links_by_type_and_direction_a_page_at_a_time(st: AdminStore) -> None:
    lisbon = remember(st, "Ana lives in Lisbon")
    [b] = modify(
        st, store_pb2.MemoryPatch(id=lisbon.id, content="Ana lives in Berlin", supersede=True)
    )
    [p] = modify(
        st, store_pb2.MemoryPatch(id=b.new_memory_id, content="Ana lives in Porto", supersede=True)
    )
    berlin = b.new_memory_id
    both = links(st, berlin).links
    assert [(x.link_type, x.from_memory_id, x.to_memory_id, x.job_id) for x in both] == [
        ("supersedes", berlin, lisbon.id, ""),
        ("supersedes", p.new_memory_id, berlin, ""),
    ]
    assert both[0].create_time == get(st, berlin).create_time
    outgoing = links(st, berlin, direction=store_pb2.LINK_DIRECTION_OUTGOING).links
    assert [x.to_memory_id for x in outgoing] == [lisbon.id]
    incoming = links(st, berlin, direction=store_pb2.LINK_DIRECTION_INCOMING).links
    assert [x.from_memory_id for x in incoming] == [p.new_memory_id]
    assert list(links(st, berlin, link_types=["derived_from"]).links) == []
    first = links(st, berlin, page_size=1)
    assert [x.id for x in first.links] == [both[0].id] and first.next_page_token
    second = links(st, berlin, page_size=1, page_token=first.next_page_token)
    assert [x.id for x in second.links] == [both[1].id] and not second.next_page_token
    # the token is bound to the request it came from
    assert error_of(
        lambda: links(st, lisbon.id, page_size=1, page_token=first.next_page_token)
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", ["page_token"])


def test_list_memory_links_rejects_bad_input_and_hides_other_namespaces(st: AdminStore) -> None:
    theirs = remember(st, "Ana lives in Lisbon", namespace="team")
    assert error_of(lambda: links(st, "", link_types=["similar"], page_size=501)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["memory_id", "link_types[0]", "page_size"],
    )
    code, reason, _ = error_of(lambda: links(st, theirs.id))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "NOT_FOUND")
    assert list(links(st, theirs.id, namespace="team").links) == []
