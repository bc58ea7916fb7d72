import threading
import time
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from services.store.memories import IMPORT_CHUNK, MAX_IMPORT_STREAM_ITEMS
from store_helpers import remember, rows, scalar, table_counts

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
    # an embed job for each new memory; no extract job: the pipeline is off by default
    assert table_counts(db_path)["memory_jobs"] == 3


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


# ---- committed as the stream arrives (issue 11, item 8) ------------------------------


def _numbered(start: int, count: int) -> list[store_pb2.ImportItem]:
    return [Item(content=f"streamed memory {n}") for n in range(start, start + count)]


def _wait_for_rows(db_path: Path, expected: int) -> None:
    """Until the file holds `expected` memories (bounded: a deadlock guard, not a timing claim)."""
    deadline = time.monotonic() + 60
    while scalar(db_path, "SELECT count(*) FROM memories") < expected:
        assert time.monotonic() < deadline, "the streamed chunk was never committed"
        time.sleep(0.02)


def test_import_commits_each_chunk_before_the_stream_ends(store, db_path: Path) -> None:
    remember(store, "tables exist")
    committed = threading.Event()

    def requests():
        yield store_pb2.ImportMemoriesRequest(items=_numbered(0, IMPORT_CHUNK))
        # The stream is still open: the first chunk is already in the file.
        _wait_for_rows(db_path, 1 + IMPORT_CHUNK)
        committed.set()
        yield store_pb2.ImportMemoriesRequest(items=_numbered(IMPORT_CHUNK, 10))

    response = store.ImportMemories(requests(), timeout=120)
    assert committed.is_set()
    assert response.created_count == IMPORT_CHUNK + 10
    assert scalar(db_path, "SELECT count(*) FROM memories") == 1 + IMPORT_CHUNK + 10


def test_a_cut_stream_keeps_a_prefix_in_whole_chunks_and_can_be_sent_again(
    store, db_path: Path
) -> None:
    remember(store, "tables exist")
    sent = 2 * IMPORT_CHUNK + 100
    committed_mid_stream = threading.Event()

    def requests():
        yield store_pb2.ImportMemoriesRequest(items=_numbered(0, IMPORT_CHUNK))
        yield store_pb2.ImportMemoriesRequest(items=_numbered(IMPORT_CHUNK, IMPORT_CHUNK + 100))
        _wait_for_rows(db_path, 1 + 2 * IMPORT_CHUNK)
        committed_mid_stream.set()
        raise RuntimeError("the client goes away mid-stream")

    with pytest.raises(grpc.RpcError):  # the client library cancels the call
        store.ImportMemories(requests(), timeout=120)
    assert committed_mid_stream.is_set()
    # The writer commits in order: once this is answered, anything the import
    # had queued is in the file too.
    remember(store, "after the cut")
    # The two whole chunks are committed; the last 100 items may or may not be
    # (grpc.aio can end a cut stream like a finished one): a prefix either way.
    imported = {r[0] for r in rows(db_path, "SELECT content FROM memories")} - {
        "tables exist",
        "after the cut",
    }
    assert imported in (
        {f"streamed memory {n}" for n in range(2 * IMPORT_CHUNK)},
        {f"streamed memory {n}" for n in range(sent)},
    )
    counts = table_counts(db_path)
    assert counts["memories"] == counts["memories_fts"] == 2 + len(imported)
    assert counts["memory_jobs"] == 2 + len(imported)  # an embed job each (the pipeline is off)

    # Sending the whole stream again is safe: the committed items come back
    # DEDUPLICATED, the rest are created once.
    again = store.ImportMemories(
        iter(
            [
                store_pb2.ImportMemoriesRequest(items=_numbered(0, IMPORT_CHUNK)),
                store_pb2.ImportMemoriesRequest(items=_numbered(IMPORT_CHUNK, sent - IMPORT_CHUNK)),
            ]
        ),
        timeout=120,
    )
    assert (again.created_count, again.deduplicated_count) == (sent - len(imported), len(imported))
    assert scalar(db_path, "SELECT count(*) FROM memories") == 2 + sent


def test_a_stream_over_the_item_cap_says_what_it_committed(store, db_path: Path) -> None:
    """Was INVALID_ARGUMENT "at most 25000 items per stream" after committing 25,000
    (an INVALID_ARGUMENT writes nothing). Now the first 25,000 are committed, the
    partial chunk of valid items too, and the error's code, message and metadata
    say so: here 3 of them are invalid and the last 497 valid ones are a partial chunk."""
    remember(store, "tables exist")
    per_message = 1000
    invalid = {10, 20_000, MAX_IMPORT_STREAM_ITEMS - 1}

    def requests():
        for start in range(0, MAX_IMPORT_STREAM_ITEMS + 2, per_message):
            items = _numbered(start, min(per_message, MAX_IMPORT_STREAM_ITEMS + 2 - start))
            for offset, item in enumerate(items):
                if start + offset in invalid:
                    item.importance = 7
            yield store_pb2.ImportMemoriesRequest(items=items)

    with pytest.raises(grpc.RpcError) as caught:
        store.ImportMemories(requests(), timeout=300)
    error = caught.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = rpc_status.from_call(error)
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    stored = MAX_IMPORT_STREAM_ITEMS - len(invalid)
    assert info.reason == "IMPORT_STREAM_LIMIT"
    assert dict(info.metadata) == {
        "committed": str(stored),
        "failed": "3",
        "next_index": str(MAX_IMPORT_STREAM_ITEMS),
    }
    assert f"({stored} stored, created or deduplicated; 3 invalid, not stored)" in error.details()
    assert scalar(db_path, "SELECT count(*) FROM memories") == 1 + stored


# ---- a chunk of many rows: each value in its own row (the multi-row INSERTs) ---------


def _varied(n: int) -> store_pb2.ImportItem:
    """Item n, every written field its own (a value landing in another row or
    column shows); n % 50 == 7 is invalid (importance out of range)."""
    return Item(
        content=f"imported fact {n}: 100% of it",
        tags=[f"t{n}"],
        who=f"agent-{n}",
        why=f"because {n}",
        source_type="import-test",
        source_id=f"src-{n}",
        importance=7 if n % 50 == 7 else (n % 10) / 10,
    )


def test_a_chunk_of_many_items_with_duplicates_and_bad_ones_lands_item_by_item(
    store, db_path: Path
) -> None:
    count = 300  # several of the repository's multi-row INSERTs per chunk
    items = [_varied(n) for n in range(count)]
    items[150] = Item(content=items[3].content)  # a duplicate of an earlier item, mid-chunk
    first = store.ImportMemories(
        _stream(("bulk", items[:100]), ("bulk", items[100:200]), ("bulk", items[200:]))
    )
    bad = {n for n in range(count) if n % 50 == 7}
    assert [r.index for r in first.results] == list(range(count))
    for r in first.results:
        expected = (
            store_pb2.IMPORT_STATUS_FAILED
            if r.index in bad
            else store_pb2.IMPORT_STATUS_DEDUPLICATED
            if r.index == 150
            else store_pb2.IMPORT_STATUS_CREATED
        )
        assert r.status == expected, r.index
    assert "importance" in first.results[7].error
    assert first.results[150].memory_id == first.results[3].memory_id
    created = [r for r in first.results if r.status == store_pb2.IMPORT_STATUS_CREATED]
    assert first.created_count == len(created) == count - len(bad) - 1
    for r in created:
        memory = store.GetMemory(
            store_pb2.GetMemoryRequest(namespace="bulk", id=r.memory_id)
        ).memory
        n = r.index
        assert (
            memory.content,
            list(memory.tags),
            memory.who,
            memory.why,
            memory.source_id,
            memory.importance,
        ) == (
            f"imported fact {n}: 100% of it",
            [f"t{n}"],
            f"agent-{n}",
            f"because {n}",
            f"src-{n}",
            pytest.approx((n % 10) / 10),
        ), n
    stored = {
        row[0]: (row[1], row[2])
        for row in rows(
            db_path,
            "SELECT m.id, count(DISTINCT h.id), count(DISTINCT j.id) FROM memories m "
            "JOIN memory_history h ON h.memory_id = m.id AND h.event = 'created' "
            "JOIN memory_jobs j ON j.memory_id = m.id AND j.job_type = 'embed' "
            "WHERE m.namespace = 'bulk' GROUP BY m.id",
        )
    }
    assert stored == {r.memory_id: (1, 1) for r in created}
    # the same stream again: every valid item deduplicated to the same memory, nothing written
    before = table_counts(db_path)
    again = store.ImportMemories(
        _stream(("bulk", items[:100]), ("bulk", items[100:200]), ("bulk", items[200:]))
    )
    assert (again.created_count, again.deduplicated_count, again.failed_count) == (
        0,
        count - len(bad),
        len(bad),
    )
    assert [r.memory_id for r in again.results] == [r.memory_id for r in first.results]
    assert table_counts(db_path) == before
