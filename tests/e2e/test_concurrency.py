"""Concurrent writers against one store process: dedup must hold under races."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from e2e_helpers import Launcher, ProcessHandle
from engram.store.v1 import store_pb2, store_pb2_grpc

T = TypeVar("T")


@pytest.fixture(scope="module")
def store(
    module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProcessHandle]:
    handle = module_launcher.start_store(tmp_path_factory.mktemp("concurrency-data"))
    yield handle
    handle.kill()


def run_together(calls: list[Callable[[], T]]) -> list[T]:
    """Run every call on its own thread, released at the same moment by a barrier."""
    barrier = threading.Barrier(len(calls))
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[index] = calls[index]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a concurrent call never finished"
    assert errors == []
    return [r for r in results if r is not None]


def remember_call(
    stub: store_pb2_grpc.MemoryStoreServiceStub, namespace: str, content: str
) -> Callable[[], store_pb2.RememberResponse]:
    return lambda: stub.Remember(
        store_pb2.RememberRequest(namespace=namespace, content=content), timeout=60
    )


def list_all(stub: store_pb2_grpc.MemoryStoreServiceStub, namespace: str) -> list[str]:
    contents: list[str] = []
    token = ""
    while True:
        page = stub.ListMemories(
            store_pb2.ListMemoriesRequest(namespace=namespace, page_size=500, page_token=token),
            timeout=30,
        )
        contents.extend(m.content for m in page.memories)
        token = page.next_page_token
        if not token:
            return contents


def test_fifty_concurrent_identical_remembers_create_exactly_one_memory(
    store: ProcessHandle,
) -> None:
    namespace = f"race-{uuid.uuid4().hex[:8]}"
    content = f"the build server is in rack {uuid.uuid4().hex[:8]}"
    # One channel per caller: 50 separate HTTP/2 connections racing each other.
    stubs = [store.stub() for _ in range(50)]
    responses = run_together([remember_call(stub, namespace, content) for stub in stubs])

    assert len(responses) == 50
    assert len({r.memory.id for r in responses}) == 1
    assert sum(not r.deduplicated for r in responses) == 1
    assert {r.memory.content for r in responses} == {content}
    assert {r.memory.version for r in responses} == {1}
    assert list_all(stubs[0], namespace) == [content]

    [created] = [r for r in responses if not r.deduplicated]
    history = stubs[0].ListMemoryHistory(
        store_pb2.ListMemoryHistoryRequest(namespace=namespace, memory_id=created.memory.id),
        timeout=30,
    )
    assert [e.event_type for e in history.events] == [store_pb2.HISTORY_EVENT_TYPE_CREATED]


def test_concurrent_remembers_differing_only_in_normalisation_create_one_memory(
    store: ProcessHandle,
) -> None:
    namespace = f"norm-{uuid.uuid4().hex[:8]}"
    word = uuid.uuid4().hex[:8]
    variants = [
        f"Deploys happen on Friday {word}",
        f"deploys happen on friday {word}.",
        f"  Deploys   happen on FRIDAY {word}!",
        f"DEPLOYS HAPPEN ON FRIDAY {word}",
    ]
    stub = store.stub()
    responses = run_together([remember_call(stub, namespace, variants[i % 4]) for i in range(24)])

    assert len({r.memory.id for r in responses}) == 1
    assert sum(not r.deduplicated for r in responses) == 1
    assert len(list_all(stub, namespace)) == 1


def test_same_content_in_two_namespaces_creates_two_distinct_memories(
    store: ProcessHandle,
) -> None:
    content = f"the staging database is postgres {uuid.uuid4().hex[:8]}"
    first, second = f"ns-a-{uuid.uuid4().hex[:8]}", f"ns-b-{uuid.uuid4().hex[:8]}"
    stub = store.stub()
    calls = [remember_call(stub, first if i % 2 else second, content) for i in range(40)]
    responses = run_together(calls)

    by_namespace: dict[str, set[str]] = {}
    for response in responses:
        by_namespace.setdefault(response.memory.namespace, set()).add(response.memory.id)
    assert set(by_namespace) == {first, second}
    assert all(len(ids) == 1 for ids in by_namespace.values())
    (id_a,), (id_b,) = by_namespace[first], by_namespace[second]
    assert id_a != id_b
    assert sum(not r.deduplicated for r in responses) == 2

    assert list_all(stub, first) == [content]
    assert list_all(stub, second) == [content]
    # Namespaces are a hard boundary: one namespace's id is NOT_FOUND in the other.
    with pytest.raises(grpc.RpcError) as excinfo:
        stub.GetMemory(store_pb2.GetMemoryRequest(namespace=second, id=id_a), timeout=30)
    assert excinfo.value.code() == grpc.StatusCode.NOT_FOUND


def test_concurrent_remembers_and_imports_of_overlapping_contents_store_each_once(
    store: ProcessHandle,
) -> None:
    namespace = f"mix-{uuid.uuid4().hex[:8]}"
    word = uuid.uuid4().hex[:8]
    contents = [f"overlapping memory number {n} {word}" for n in range(60)]
    stub = store.stub()

    def import_all() -> store_pb2.ImportMemoriesResponse:
        batches = [
            store_pb2.ImportMemoriesRequest(
                namespace=namespace,
                items=[store_pb2.ImportItem(content=c) for c in contents[start : start + 20]],
            )
            for start in range(0, len(contents), 20)
        ]
        return stub.ImportMemories(iter(batches), timeout=60)

    def remember_each(offset: int) -> list[store_pb2.RememberResponse]:
        return [
            stub.Remember(store_pb2.RememberRequest(namespace=namespace, content=c), timeout=60)
            for c in contents[offset:] + contents[:offset]
        ]

    imports_and_remembers: list[Callable[[], object]] = [
        import_all,
        import_all,
        lambda: remember_each(0),
        lambda: remember_each(30),
    ]
    results = run_together(imports_and_remembers)

    ids_by_content: dict[str, set[str]] = {}
    created = 0
    for result in results:
        if isinstance(result, store_pb2.ImportMemoriesResponse):
            assert result.failed_count == 0
            created += result.created_count
            for item in result.results:
                ids_by_content.setdefault(contents[item.index], set()).add(item.memory_id)
        else:
            assert isinstance(result, list)
            for response in result:
                created += not response.deduplicated
                ids_by_content.setdefault(response.memory.content, set()).add(response.memory.id)
    assert set(ids_by_content) == set(contents)
    assert [c for c, ids in ids_by_content.items() if len(ids) != 1] == []
    assert created == len(contents)
    assert sorted(list_all(stub, namespace)) == sorted(contents)


def test_data_written_concurrently_survives_a_restart(launcher: Launcher, data_dir: Path) -> None:
    store = launcher.start_store(data_dir)
    stub = store.stub()
    word = uuid.uuid4().hex[:8]
    contents = [f"restart check {n} {word}" for n in range(40)]
    responses = run_together([remember_call(stub, "default", c) for c in contents * 2])
    ids = {r.memory.content: r.memory.id for r in responses}
    assert len(set(ids.values())) == len(contents)
    assert store.stop() == 0

    restarted = launcher.start_store(data_dir)
    stub = restarted.stub()
    for content, memory_id in ids.items():
        got = stub.GetMemory(store_pb2.GetMemoryRequest(id=memory_id), timeout=30)
        assert got.memory.content == content
    assert sorted(list_all(stub, "default")) == sorted(contents)
