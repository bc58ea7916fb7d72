"""Fuzzed requests on both backends (issue 34, "Also probe PostgreSQL"): random
bytes as a request, and random field values in well-formed ones, sent to the
store's and search's main RPCs through real gRPC. Whatever comes in, the answer
is a deliberate status (OK, INVALID_ARGUMENT, NOT_FOUND, ...), never INTERNAL
or UNKNOWN, and the namespace stays readable afterwards. The hand-picked
poison inputs are tests/store/test_store_poison_inputs.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram.search.v1 import search_pb2
from engram.store.v1 import store_pb2
from recall_helpers import Stack

STORE = "/engram.store.v1.MemoryStoreService"
SEARCH = "/engram.search.v1.SearchService"
METHODS = [
    f"{STORE}/Remember",
    f"{STORE}/GetMemory",
    f"{STORE}/ListMemories",
    f"{STORE}/DeleteMemory",
    f"{SEARCH}/Recall",
]
FAILED = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
EXAMPLES = 40
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# any code point, NUL and lone surrogates' neighbours included (protobuf strings are UTF-8)
TEXT = st.text(st.characters(codec="utf-8"), max_size=80)


@pytest.fixture(scope="module")
def stack(module_recall_stack: Callable[..., Stack]) -> Stack:
    return module_recall_stack({"providers.embedding.kind": "none"})


def _code(call: Callable[[], Any]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _still_readable(stack: Stack, namespace: str) -> None:
    stack.store.ListMemories(store_pb2.ListMemoriesRequest(namespace=namespace), timeout=10)
    stack.search.Recall(search_pb2.RecallRequest(namespace=namespace, query="probe"), timeout=10)


@FUZZ
@given(method=st.sampled_from(METHODS), payload=st.binary(max_size=200))
def test_random_bytes_never_fail_internally(stack: Stack, method: str, payload: bytes) -> None:
    port = (
        stack.search_thread.app.port if method.startswith(SEARCH) else stack.store_thread.app.port
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        code = _code(lambda: channel.unary_unary(method)(payload, timeout=10))
    assert code not in FAILED, (method, payload)
    _still_readable(stack, "fuzz-bytes")


@FUZZ
@given(
    namespace=TEXT,
    content=TEXT,
    memory_id=TEXT,
    limit=st.integers(-(2**31), 2**31 - 1),
    page_size=st.integers(-(2**31), 2**31 - 1),
    importance=st.floats(allow_nan=True, allow_infinity=True, width=32),
)
def test_random_field_values_never_fail_internally(
    stack: Stack,
    namespace: str,
    content: str,
    memory_id: str,
    limit: int,
    page_size: int,
    importance: float,
) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: stack.store.Remember(
            store_pb2.RememberRequest(namespace=namespace, content=content, importance=importance),
            timeout=10,
        ),
        lambda: stack.store.GetMemory(
            store_pb2.GetMemoryRequest(namespace=namespace, id=memory_id), timeout=10
        ),
        lambda: stack.store.ListMemories(
            store_pb2.ListMemoriesRequest(
                namespace=namespace, page_size=page_size, page_token=memory_id
            ),
            timeout=10,
        ),
        lambda: stack.search.Recall(
            search_pb2.RecallRequest(namespace=namespace, query=content, limit=limit), timeout=10
        ),
    ]
    codes = [_code(call) for call in calls]
    assert not FAILED & set(codes), codes
    _still_readable(stack, "fuzz-fields")
