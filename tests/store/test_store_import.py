from pathlib import Path

import grpc

from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from store_helpers import remember, table_counts

Item = store_pb2.ImportItem


def _stream(*batches: tuple[str, list[store_pb2.ImportItem]]):
    for namespace, items in batches:
        yield store_pb2.ImportMemoriesRequest(namespace=namespace, items=items)


def test_import_reports_each_item_in_stream_order(store, db_path: Path) -> None:
    existing = remember(store, "already known").memory
    response = store.ImportMemories(
        _stream(
            ("", [Item(content="first"), Item(content="Already known."), Item(content="")]),
            (
                "",
                [
                    Item(content="FIRST"),
                    Item(content="second", type="decision", tags=["x"]),
                    Item(content="ok", importance=7),
                ],
            ),
        )
    )
    statuses = [(r.index, r.status) for r in response.results]
    assert statuses == [
        (0, store_pb2.IMPORT_STATUS_CREATED),
        (1, store_pb2.IMPORT_STATUS_DEDUPLICATED),
        (2, store_pb2.IMPORT_STATUS_FAILED),
        (3, store_pb2.IMPORT_STATUS_DEDUPLICATED),
        (4, store_pb2.IMPORT_STATUS_CREATED),
        (5, store_pb2.IMPORT_STATUS_FAILED),
    ]
    assert response.results[1].memory_id == existing.id
    assert response.results[3].memory_id == response.results[0].memory_id
    assert "items[2].content" in response.results[2].error
    assert "items[5].importance" in response.results[5].error
    assert (response.created_count, response.deduplicated_count, response.failed_count) == (2, 2, 2)
    second = store.GetMemory(store_pb2.GetMemoryRequest(id=response.results[4].memory_id)).memory
    assert (second.type, list(second.tags)) == ("decision", ["x"])
    assert table_counts(db_path)["memory_jobs"] == 3 * 2  # embed + extract for each new memory


def test_import_applies_remember_rules(store) -> None:
    response = store.ImportMemories(
        _stream(("", [Item(content="critical: [a,b]: Alice prefers tea")]))
    )
    memory = store.GetMemory(store_pb2.GetMemoryRequest(id=response.results[0].memory_id)).memory
    assert (memory.content, memory.pinned, memory.importance, list(memory.tags), memory.type) == (
        "Alice prefers tea",
        True,
        1.0,
        ["a", "b"],
        "preference",
    )


def test_import_keeps_namespaces_apart(store) -> None:
    response = store.ImportMemories(
        _stream(("a", [Item(content="same")]), ("b", [Item(content="same")]))
    )
    assert [r.status for r in response.results] == [store_pb2.IMPORT_STATUS_CREATED] * 2
    ids = [r.memory_id for r in response.results]
    assert (
        store.GetMemory(store_pb2.GetMemoryRequest(namespace="a", id=ids[0])).memory.namespace
        == "a"
    )
    assert (
        store.GetMemory(store_pb2.GetMemoryRequest(namespace="b", id=ids[1])).memory.namespace
        == "b"
    )


def test_import_of_many_memories(store) -> None:
    batches = [
        ("bulk", [Item(content=f"memory number {b * 500 + i}") for i in range(500)])
        for b in range(6)
    ]
    response = store.ImportMemories(_stream(*batches))
    assert response.created_count == 3000
    listed = store.ListMemories(store_pb2.ListMemoriesRequest(namespace="bulk", page_size=500))
    assert len(listed.memories) == 500 and listed.next_page_token


def test_bad_namespace_in_a_later_message_writes_nothing(store, db_path: Path) -> None:
    remember(store, "tables exist")
    before = table_counts(db_path)
    code, _, fields = error_of(
        lambda: store.ImportMemories(
            _stream(("good", [Item(content="one")]), ("bad ns!", [Item(content="two")]))
        )
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["namespace"])
    assert table_counts(db_path) == before


def test_oversized_message_is_rejected(store, db_path: Path) -> None:
    remember(store, "tables exist")
    before = table_counts(db_path)
    code, _, fields = error_of(
        lambda: store.ImportMemories(_stream(("", [Item(content=f"m{i}") for i in range(1001)])))
    )
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["items"])
    assert table_counts(db_path) == before


def test_empty_stream_imports_nothing(store) -> None:
    response = store.ImportMemories(iter([]))
    assert (response.created_count, len(response.results)) == (0, 0)
