import grpc
import pytest

from engram.store.v1 import store_pb2 as S
from grpc_helpers import error_of
from store_helpers import remember


def test_history_is_ordered_and_paginated(store) -> None:
    memory = remember(store, "v1").memory
    for i in range(2, 8):
        store.ModifyMemories(
            S.ModifyMemoriesRequest(
                patches=[S.MemoryPatch(id=memory.id, content=f"v{i}")], reason=f"r{i}"
            )
        )
    events, token = [], ""
    while True:
        page = store.ListMemoryHistory(
            S.ListMemoryHistoryRequest(memory_id=memory.id, page_size=3, page_token=token)
        )
        events.extend(page.events)
        token = page.next_page_token
        if not token:
            break
    assert [e.new_content for e in events] == [f"v{i}" for i in range(1, 8)]
    assert [e.old_content for e in events[1:]] == [f"v{i}" for i in range(1, 7)]
    assert events[0].event_type == S.HISTORY_EVENT_TYPE_CREATED
    assert all(e.create_time.seconds > 0 and e.id for e in events)


def test_namespaces_are_sealed(store) -> None:
    memory = remember(store, "private to a", namespace="a").memory
    assert (
        error_of(lambda: store.GetMemory(S.GetMemoryRequest(namespace="b", id=memory.id)))[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        error_of(lambda: store.GetMemory(S.GetMemoryRequest(id=memory.id)))[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert store.ListMemories(S.ListMemoriesRequest(namespace="b")).memories == []
    assert (
        error_of(
            lambda: store.ListMemoryHistory(
                S.ListMemoryHistoryRequest(namespace="b", memory_id=memory.id)
            )
        )[0]
        == grpc.StatusCode.NOT_FOUND
    )
    [result] = store.ModifyMemories(
        S.ModifyMemoriesRequest(
            namespace="b", reason="r", patches=[S.MemoryPatch(id=memory.id, who="x")]
        )
    ).results
    assert result.status == S.PATCH_STATUS_NOT_FOUND
    assert (
        error_of(
            lambda: store.DeleteMemory(
                S.DeleteMemoryRequest(namespace="b", id=memory.id, reason="r")
            )
        )[0]
        == grpc.StatusCode.NOT_FOUND
    )
    assert store.GetMemory(S.GetMemoryRequest(namespace="a", id=memory.id)).memory.version == 1


MUTATIONS = {
    "remember": lambda s, i: s.Remember(S.RememberRequest(content="new")),
    "import": lambda s, i: s.ImportMemories(
        iter([S.ImportMemoriesRequest(items=[S.ImportItem(content="x")])])
    ),
    "modify": lambda s, i: s.ModifyMemories(
        S.ModifyMemoriesRequest(reason="r", patches=[S.MemoryPatch(id=i, who="x")])
    ),
    "delete": lambda s, i: s.DeleteMemory(S.DeleteMemoryRequest(id=i, reason="r")),
    "recover": lambda s, i: s.RecoverMemory(S.RecoverMemoryRequest(id=i, reason="r")),
    "forget": lambda s, i: s.ForgetMemories(
        S.ForgetMemoriesRequest(ids=[i], mode=S.FORGET_MODE_EXECUTE, reason="r")
    ),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_frozen_mutations_are_unavailable(make_config, start_store_server, name: str) -> None:
    seeding, store = start_store_server(make_config())
    memory_id = remember(store, "existing").memory.id
    seeding.stop()
    _, frozen = start_store_server(make_config(**{"memory.pipelineV2.mutationsFrozen": True}))
    code, reason, _ = error_of(lambda: MUTATIONS[name](frozen, memory_id))
    assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "MUTATIONS_FROZEN")
    assert frozen.GetMemory(S.GetMemoryRequest(id=memory_id)).memory.version == 1
    assert len(frozen.ListMemories(S.ListMemoriesRequest()).memories) == 1
    assert len(frozen.ForgetMemories(S.ForgetMemoriesRequest(ids=[memory_id])).candidates) == 1
