"""Enum values the proto does not define (issue 34, item 9).

Proto3 enums are open: ForgetMemories with `mode` 999 or -7 once parsed, reached
the handler and was read as a preview. Every enum field of every request of every
RPC of the suite (the public services and the store's internal ones), nested,
repeated and map values too, is walked from the descriptors here and sent an
undefined value on the real servers: each call must be INVALID_ARGUMENT naming
that field, and nothing is written.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from server_thread import ServerThread

from engram.maintenance.v1 import maintenance_pb2
from engram.pipeline.v1 import pipeline_pb2
from engram.search.v1 import search_pb2
from engram.store.internal.v1 import access_pb2, admin_pb2, dedup_pb2, documents_pb2, job_queue_pb2
from engram.store.v1 import store_pb2
from grpc_helpers import error_of
from recall_helpers import Stack
from services.maintenance.app import start_maintenance
from store_helpers import table_counts

PUBLIC = (store_pb2, search_pb2, pipeline_pb2, maintenance_pb2)
INTERNAL = (job_queue_pb2, admin_pb2, access_pb2, documents_pb2, dedup_pb2)
UNDEFINED = (999, -7)


def methods(modules: tuple[Any, ...]) -> Iterator[MethodDescriptor]:
    for module in modules:
        for service in module.DESCRIPTOR.services_by_name.values():
            yield from service.methods


Path_ = tuple[FieldDescriptor, ...]


def enum_paths(descriptor: Descriptor, seen: tuple[str, ...] = ()) -> Iterator[Path_]:
    """Every path from `descriptor` to an enum field (a map's value field ends a
    path through a map of enums), each message type at most once on a path."""
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_ENUM:
            yield (field,)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            target = field.message_type
            if target.full_name in seen:
                continue
            if target.GetOptions().map_entry:
                value = target.fields_by_name["value"]
                if value.type == FieldDescriptor.TYPE_ENUM:
                    yield (field, value)
                    continue
                if value.type != FieldDescriptor.TYPE_MESSAGE:
                    continue
                for rest in enum_paths(value.message_type, (*seen, descriptor.full_name)):
                    yield (field, value, *rest)
                continue
            for rest in enum_paths(target, (*seen, descriptor.full_name)):
                yield (field, *rest)


def _map_key(entry: Descriptor) -> Any:
    return "k" if entry.fields_by_name["key"].type == FieldDescriptor.TYPE_STRING else 1


def request_with(method: MethodDescriptor, path: Path_, value: int) -> tuple[Message, str]:
    """The method's request with the enum at `path` set to `value`, and the field
    path the error must name (the servers' form: `items[0].pii_policy`, `m['k'].x`)."""
    request = GetMessageClass(method.input_type)()
    node: Any = request
    names: list[str] = []
    steps = list(path)
    while steps:
        field = steps.pop(0)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = _map_key(field.message_type)
            steps.pop(0)  # the entry's value field
            names.append(f"{field.name}[{key!r}]")
            container = getattr(node, field.name)
            if not steps:
                container[key] = value
                return request, ".".join(names)
            node = container[key]
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated:
                node = getattr(node, field.name).add()
                names.append(f"{field.name}[0]")
            else:
                node = getattr(node, field.name)
                node.SetInParent()
                names.append(field.name)
        elif field.is_repeated:
            getattr(node, field.name).append(value)
            names.append(f"{field.name}[0]")
        else:
            setattr(node, field.name, value)
            names.append(field.name)
    return request, ".".join(names)


def call(channel: grpc.Channel, method: MethodDescriptor, request: Message) -> Any:
    name = f"/{method.containing_service.full_name}/{method.name}"
    response = GetMessageClass(method.output_type)
    ways = {
        (False, False): channel.unary_unary,
        (True, False): channel.stream_unary,
        (False, True): channel.unary_stream,
        (True, True): channel.stream_stream,
    }
    rpc = ways[method.client_streaming, method.server_streaming](
        name,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response.FromString,
    )
    sent = iter([request]) if method.client_streaming else request
    answer = rpc(sent, timeout=20)
    if method.server_streaming:
        return list(itertools.islice(answer, 1))
    return answer


def outcome(
    channel: grpc.Channel, method: MethodDescriptor, request: Message
) -> tuple[grpc.StatusCode, str, list[str]]:
    """(code, ErrorInfo reason, BadRequest fields) of the call; OK when it succeeds."""
    try:
        call(channel, method, request)
    except grpc.RpcError as error:
        failed = error
    else:
        return grpc.StatusCode.OK, "", []

    def again() -> None:
        raise failed

    return error_of(again)


def cases() -> list[tuple[str, Any, MethodDescriptor, Path_]]:
    found = []
    for kind, modules in (("public", PUBLIC), ("internal", INTERNAL)):
        for method in methods(modules):
            for path in enum_paths(method.input_type):
                found.append((kind, modules, method, path))
    return found


def test_the_walk_finds_the_enum_fields_it_must() -> None:
    """The walk is not vacuous: the enums named in the issue, and nested ones, are in it."""
    named = {
        (m.name, ".".join(f.name for f in p))
        for _, _, m, p in cases()
        if m.name in ("ForgetMemories", "ImportMemories", "Recall")
    }
    assert ("ForgetMemories", "mode") in named
    assert ("ImportMemories", "items.pii_policy") in named
    assert any(name == "Recall" for name, _ in named)
    assert len(cases()) >= 15


@pytest.fixture
def suite(recall_stack: Callable[..., Stack]) -> Iterator[dict[str, grpc.Channel]]:
    stack = recall_stack({"providers.embedding.kind": "none"}, search=True, pipeline=True)
    config = stack.config.with_overrides(
        {"clients.pipeline_address": f"127.0.0.1:{stack.pipeline_thread.app.port}"}
    )
    maintenance = ServerThread(lambda: start_maintenance(config, host="127.0.0.1", port=0))
    ports = {
        "engram.store.v1": stack.store_thread.app.port,
        "engram.search.v1": stack.search_thread.app.port,
        "engram.pipeline.v1": stack.pipeline_thread.app.port,
        "engram.maintenance.v1": maintenance.app.port,
        "engram.store.internal.v1": stack.store_thread.app.internal_port,
    }
    channels = {pkg: grpc.insecure_channel(f"127.0.0.1:{port}") for pkg, port in ports.items()}
    try:
        yield channels
    finally:
        for channel in channels.values():
            channel.close()
        maintenance.stop()


def test_every_undefined_enum_value_of_every_rpc_is_invalid_and_writes_nothing(
    suite: dict[str, grpc.Channel], db_path: Path
) -> None:
    before = table_counts(db_path)
    checked = 0
    wrong: list[str] = []
    for _, _, method, path in cases():
        channel = suite[method.containing_service.file.package]
        for value in UNDEFINED:
            request, field = request_with(method, path, value)
            code, reason, fields = outcome(channel, method, request)
            checked += 1
            if (code, reason) != (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT") or (
                fields != [field]
            ):
                wrong.append(f"{method.full_name} {field}={value}: {code} {reason} {fields}")
    assert not wrong, "\n".join(wrong)
    assert checked == len(UNDEFINED) * len(cases())
    assert table_counts(db_path) == before


def test_forget_with_an_undefined_mode_is_not_a_preview(suite: dict[str, grpc.Channel]) -> None:
    """The probe of the issue, by its stub: mode 999 names `mode`, with the enum's values."""
    from engram.store.v1 import store_pb2_grpc

    stub = store_pb2_grpc.MemoryStoreServiceStub(suite["engram.store.v1"])
    with pytest.raises(grpc.RpcError) as caught:
        stub.ForgetMemories(store_pb2.ForgetMemoriesRequest(mode=999, ids=["x"], reason="r"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("mode: 999 is not a value of ForgetMode")
