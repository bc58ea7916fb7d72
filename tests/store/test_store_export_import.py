"""Export then import (issue 35 item 3): every live memory of a namespace, turned
into an ImportItem by `engram.client.export_item` (what `engram export` writes)
and imported into another namespace, comes back with every field it had."""

from __future__ import annotations

import datetime as dt

from google.protobuf.duration_pb2 import Duration
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from engram.client import export_item
from engram.common.v1 import memory_pb2
from engram.common.v1 import pii_policy_pb2 as pii_pb
from engram.store.v1 import store_pb2

SOURCE, COPY = "export-src", "export-copy"
# What a new write assigns, so a copy cannot share it.
ASSIGNED = {
    "id",
    "namespace",
    "version",
    "create_time",
    "update_time",
    "access_count",
    "last_access_time",
}


def _stamp(text: str) -> Timestamp:
    stamp = Timestamp()
    stamp.FromJsonString(text)
    return stamp


def _live(store, namespace: str) -> list[memory_pb2.Memory]:
    reply = store.ListMemories(store_pb2.ListMemoriesRequest(namespace=namespace, page_size=500))
    assert not reply.next_page_token
    return list(reply.memories)


def _fields(memory: memory_pb2.Memory) -> dict[str, object]:
    data = MessageToDict(memory, preserving_proto_field_name=True)
    return {key: value for key, value in data.items() if key not in ASSIGNED}


def _fill_source(store) -> None:
    """One of every kind of memory in SOURCE."""
    remember = store.Remember
    remember(
        store_pb2.RememberRequest(
            namespace=SOURCE, content="critical: never log tokens", who="agent-1", why="policy"
        )
    )
    remember(
        store_pb2.RememberRequest(
            namespace=SOURCE,
            content="Bob prefers vim",
            type="preference",
            importance=0.4,
            tags=["bob", "editor"],
            source_type="chat",
            source_id="msg-9",
            event_time=_stamp("2026-01-02T03:04:05.123456789Z"),
            categories=["Tools"],
        )
    )
    # PII redacted: the placeholder starts the content like a `[tags]:` prefix
    remember(
        store_pb2.RememberRequest(
            namespace=SOURCE,
            content="jane.doe@example.com: call her back",
            pii_policy=pii_pb.PII_POLICY_REDACT,
        )
    )
    # short-term: a session's memory with a ttl, and conversation turns
    remember(
        store_pb2.RememberRequest(
            namespace=SOURCE,
            content="the standup moved to 10",
            session_id="s1",
            ttl=Duration(seconds=3600),
        )
    )
    for role, text in (
        (store_pb2.TURN_ROLE_USER, "critical: which room is it in?"),
        (store_pb2.TURN_ROLE_ASSISTANT, "Room 4, second floor."),
    ):
        turn = store.AppendTurn(
            store_pb2.AppendTurnRequest(
                namespace=SOURCE, session_id="s1", role=role, content=text, who="harness"
            )
        )
        assert turn.memory.expire_time.seconds > 0
    # a superseded chain: only its newest version is live
    old = remember(
        store_pb2.RememberRequest(
            namespace=SOURCE,
            content="Eve lives in Lisbon",
            event_time=_stamp("2025-01-01T00:00:00Z"),
        )
    )
    patch = store_pb2.MemoryPatch(
        id=old.memory.id,
        content="Eve lives in Berlin",
        supersede=True,
        valid_from=_stamp("2026-03-01T00:00:00Z"),
    )
    result = store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(namespace=SOURCE, patches=[patch], reason="moved")
    ).results[0]
    assert result.status == store_pb2.PATCH_STATUS_UPDATED, result
    # the rest of what a memory carries: a known end, a temporal class, a
    # confidence, its own decay rate
    store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(
                    namespace=SOURCE,
                    items=[
                        store_pb2.ImportItem(
                            content="Dana works at Acme",
                            temporal_class=memory_pb2.TEMPORAL_CLASS_LONG_TERM,
                            confidence=0.75,
                            decay_rate=0.3,
                            valid_until=_stamp("2999-01-01T00:00:00Z"),
                        )
                    ],
                )
            ]
        )
    )
    protect = store_pb2.MemoryPatch(id=result.new_memory_id, decay_rate=0.0)
    store.ModifyMemories(
        store_pb2.ModifyMemoriesRequest(namespace=SOURCE, patches=[protect], reason="confirmed")
    )
    # a deleted memory is not live and not exported
    gone = remember(store_pb2.RememberRequest(namespace=SOURCE, content="scratch note"))
    store.DeleteMemory(
        store_pb2.DeleteMemoryRequest(namespace=SOURCE, id=gone.memory.id, reason="scratch")
    )


def test_export_then_import_keeps_every_field_of_every_live_memory(store) -> None:
    _fill_source(store)
    source = _live(store, SOURCE)
    assert len(source) == 8  # Lisbon (superseded) and the deleted note are not live
    items = [export_item(memory) for memory in source]
    reply = store.ImportMemories(
        iter([store_pb2.ImportMemoriesRequest(namespace=COPY, items=items)])
    )
    assert reply.created_count == len(items), [r.error for r in reply.results]
    copy = _live(store, COPY)
    by_content = {memory.content: _fields(memory) for memory in copy}
    assert len(by_content) == len(copy) == len(source)
    for memory in source:
        assert by_content[memory.content] == _fields(memory), memory.content
    fields = {memory.content: memory for memory in copy}
    assert fields["never log tokens"].pinned
    turn = fields["critical: which room is it in?"]
    assert (turn.type, turn.session_id, turn.pinned) == ("episodic", "s1", False)
    assert turn.expire_time.seconds > 0
    assert "[EMAIL_1]: call her back" in fields and not fields["[EMAIL_1]: call her back"].tags
    berlin = fields["Eve lives in Berlin"]
    assert berlin.valid_from.ToJsonString() == "2026-03-01T00:00:00Z"
    assert berlin.HasField("decay_rate") and berlin.decay_rate == 0.0
    dana = fields["Dana works at Acme"]
    assert (dana.temporal_class, dana.confidence, dana.decay_rate) == (
        memory_pb2.TEMPORAL_CLASS_LONG_TERM,
        0.75,
        0.3,
    )


def test_an_import_item_expiry_must_be_ahead_and_alone(store) -> None:
    now = dt.datetime.now(dt.UTC)

    def stamp(at: dt.datetime) -> Timestamp:
        result = Timestamp()
        result.FromDatetime(at)
        return result

    items = [
        store_pb2.ImportItem(
            content="expired in transit", expire_time=stamp(now - dt.timedelta(1))
        ),
        store_pb2.ImportItem(
            content="both", expire_time=stamp(now + dt.timedelta(1)), ttl=Duration(seconds=60)
        ),
        store_pb2.ImportItem(content="too far", expire_time=stamp(now + dt.timedelta(400))),
        store_pb2.ImportItem(content="bad range", confidence=1.5, decay_rate=11),
        store_pb2.ImportItem(content="fine", expire_time=stamp(now + dt.timedelta(hours=2))),
    ]
    reply = store.ImportMemories(iter([store_pb2.ImportMemoriesRequest(items=items)]))
    errors = [result.error for result in reply.results]
    assert "items[0].expire_time" in errors[0] and "has passed" in errors[0]
    assert "items[1].expire_time" in errors[1] and "not both" in errors[1]
    assert "items[2].expire_time" in errors[2] and "366 days" in errors[2]
    # (an undefined temporal_class refuses the whole stream: tests/store/test_store_enum_values.py)
    for name in ("confidence", "decay_rate"):
        assert f"items[3].{name}" in errors[3]
    assert reply.results[4].status == store_pb2.IMPORT_STATUS_CREATED
    fine = store.GetMemory(store_pb2.GetMemoryRequest(id=reply.results[4].memory_id)).memory
    assert fine.expire_time.ToDatetime(dt.UTC) == items[4].expire_time.ToDatetime(dt.UTC)
